package synth

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// With a schedule, each segment's arrivals are Poisson at its rate: the
// counts per segment are within 5 standard deviations of rate × length,
// the trace is byte-identical for the same seed and flags, and a schedule
// that never leaves 1 changes nothing but rounding.
func TestRateScheduleArrivals(t *testing.T) {
	o := small(DefaultOptions())
	o.Rate = 100
	sched, err := ParseRateSchedule("0s:1,20s:2.5,50s:0.5,70s:1")
	if err != nil {
		t.Fatal(err)
	}
	o.RateSchedule = sched
	out := write(t, o, Limit{Duration: 90 * time.Second})
	if again := write(t, o, Limit{Duration: 90 * time.Second}); !bytes.Equal(out, again) {
		t.Fatal("the same seed and schedule gave different traces")
	}
	segments := []struct {
		from, to float64 // s
		rate     float64
	}{{0, 20, 100}, {20, 50, 250}, {50, 70, 50}, {70, 90, 100}}
	counts := make([]int, len(segments))
	prev := -1.0
	for i, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		r, err := trace.Parse([]byte(l))
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if r.TsMs < prev {
			t.Fatalf("line %d: ts_ms %v before %v", i+1, r.TsMs, prev)
		}
		prev = r.TsMs
		for j, s := range segments {
			if r.TsMs >= s.from*1000 && r.TsMs < s.to*1000 {
				counts[j]++
			}
		}
	}
	for j, s := range segments {
		want := s.rate * (s.to - s.from)
		if math.Abs(float64(counts[j])-want) > 5*math.Sqrt(want) {
			t.Errorf("segment %v-%v s: %d arrivals, want about %v", s.from, s.to, counts[j], want)
		}
	}
	g, _ := New(o)
	for _, c := range []struct{ ms, want float64 }{{0, 1}, {19999, 1}, {20000, 2.5}, {60000, 0.5}, {1e9, 1}} {
		if got := g.RateFactor(c.ms); got != c.want {
			t.Errorf("RateFactor(%v) = %v, want %v", c.ms, got, c.want)
		}
	}
	// A schedule that starts later keeps the base rate before it.
	o.RateSchedule = []RateStep{{At: 30 * time.Second, Factor: 3}}
	g, _ = New(o)
	if g.RateFactor(29999) != 1 || g.RateFactor(30000) != 3 {
		t.Fatal("factor before and after the first step")
	}
}

func TestRateScheduleParse(t *testing.T) {
	got, err := ParseRateSchedule(" 0s:1, 1m:1.5 ,100s:1,")
	want := []RateStep{{0, 1}, {time.Minute, 1.5}, {100 * time.Second, 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%v %v", got, err)
	}
	if FormatRateSchedule(got) != "0s:1,1m0s:1.5,1m40s:1" {
		t.Fatal(FormatRateSchedule(got))
	}
	if s, err := ParseRateSchedule(""); s != nil || err != nil {
		t.Fatal("empty spec")
	}
	for spec, want := range map[string]string{
		"60s":         `--rate-schedule: "60s" is not AT:FACTOR`,
		"1m:x":        `--rate-schedule: "1m:x": factor "x" is not a number`,
		"soon:2":      `--rate-schedule: "soon:2": "soon" is not a duration`,
		"10s:0":       "--rate-schedule: step 1 (at 10s): factor 0 must be a positive number",
		"10s:NaN":     "--rate-schedule: step 1 (at 10s): factor NaN must be a positive number",
		"10s:2,5s:1":  "--rate-schedule: step 2 at 5s is not after the step before (10s)",
		"10s:2,10s:1": "--rate-schedule: step 2 at 10s is not after the step before (10s)",
		"-1s:2":       "--rate-schedule: step 1 at -1s is negative",
	} {
		if _, err := ParseRateSchedule(spec); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %s", spec, err, want)
		}
	}
	// Options built in code are checked by New; ParseArgs (bin/sim --synth)
	// takes the flag.
	o := small(DefaultOptions())
	o.RateSchedule = []RateStep{{time.Second, -1}}
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "rate-schedule: step 1 (at 1s): factor -1") {
		t.Fatal(err)
	}
	po, err := ParseArgs(strings.Fields("--rate 50 --rate-schedule 0s:1,10s:2"))
	if err != nil || !reflect.DeepEqual(po.RateSchedule, []RateStep{{0, 1}, {10 * time.Second, 2}}) {
		t.Fatalf("%+v %v", po.RateSchedule, err)
	}
	if _, err := ParseArgs([]string{"--rate-schedule", "10s"}); err == nil || !strings.Contains(err.Error(), "synth: --rate-schedule:") {
		t.Fatal(err)
	}
}

// Without a schedule the trace is byte for byte what the generator wrote
// before schedules existed (the checksum was taken then: tracegen synth
// --requests 500 --seed 4 --keys 2000 --backends 5 --rate 150).
func TestNoScheduleKeepsTheTrace(t *testing.T) {
	o := DefaultOptions()
	o.Seed, o.Keys.Default, o.Backends, o.Rate = 4, 2000, 5, 150
	sum := fmt.Sprintf("%x", sha256.Sum256(write(t, o, Limit{Requests: 500})))
	if sum != "fa4026a673f53e766456abceea68739f9f0c50c090964e7bfc977b3b4464ac4e" {
		t.Fatalf("the trace changed: sha256 %s", sum)
	}
}
