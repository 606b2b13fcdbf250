package feasibility

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// Request-rate changes are phase boundaries too, and set each phase's
// factor; a capacity change and a rate change at the same time make one.
func TestPhasesSplitAtRateChanges(t *testing.T) {
	initial := map[string]config.Limits{"a": {Workers: 1, Rate: 100}}
	changes := []scenario.Change{{At: 10 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: "rate", Value: 50}}}}
	rates := []scenario.RateChange{{At: 5 * time.Second, Factor: 2}, {At: 10 * time.Second, Factor: 1.5}, {At: 20 * time.Second, Factor: 1}, {At: time.Minute, Factor: 3}}
	ph := Phases(initial, changes, 30*time.Second, rates...)
	type want struct {
		start, end time.Duration
		capacity   float64
		factor     float64
	}
	wants := []want{{0, 5 * time.Second, 100, 1}, {5 * time.Second, 10 * time.Second, 100, 2},
		{10 * time.Second, 20 * time.Second, 50, 1.5}, {20 * time.Second, 30 * time.Second, 50, 1}}
	if len(ph) != len(wants) {
		t.Fatalf("%d phases: %+v", len(ph), ph)
	}
	for i, w := range wants {
		if p := ph[i]; p.Start != w.start || p.End != w.end || p.Capacity["a"] != w.capacity || p.RateFactor != w.factor {
			t.Errorf("phase %d: %+v, want %+v", i, p, w)
		}
	}
	if ph := Phases(initial, changes, 30*time.Second); len(ph) != 2 || ph[0].RateFactor != 1 || ph[1].RateFactor != 1 {
		t.Fatalf("without a schedule: %+v", ph)
	}
}

// writeTrace writes a trace whose backend a gets `per` queries a request
// (the last one uncacheable) from rate(t) requests/s, and b one query a
// request, for secs seconds.
func writeTrace(t *testing.T, secs int, rate func(s int) int, per int) string {
	t.Helper()
	var b strings.Builder
	n := 0
	for s := 0; s < secs; s++ {
		for i := 0; i < rate(s); i++ {
			ts := float64(s)*1000 + (float64(i)+0.5)*1000/float64(rate(s))
			var sizes, keys, c []string
			for q := 0; q < per; q++ {
				sizes = append(sizes, "1000")
				keys = append(keys, fmt.Sprintf("%q", fmt.Sprintf("k%d", (n*per+q)%50)))
				c = append(c, map[bool]string{true: "1", false: "0"}[q < per-1])
			}
			fmt.Fprintf(&b, `{"t": %d, "ts_ms": %g, "d": [{"a": {"S": [%s], "U": [%s], "C": [%s]}, "b": {"S": [10], "U": ["x%d"], "C": [1]}}]}`+"\n",
				n, ts, strings.Join(sizes, ", "), strings.Join(keys, ", "), strings.Join(c, ", "), n%7)
			n++
		}
	}
	p := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// SetRates gives each phase the query rates within it (every app server)
// and its own miss-ratio curve; the whole trace's stay as LoadModel's; and
// analysePhases judges each phase at its own rates: a phase at triple the request
// rate can be infeasible where the whole trace's average is not.
func TestPerPhaseRates(t *testing.T) {
	rate := func(s int) int {
		if s >= 10 && s < 20 {
			return 30
		}
		return 10
	}
	path := writeTrace(t, 30, rate, 4)
	c := map[string]float64{"a": 24, "b": math.Inf(1)}
	phases := []Phase{{Start: 0, End: 10 * time.Second, Capacity: c},
		{Start: 10 * time.Second, End: 20 * time.Second, Capacity: c},
		{Start: 20 * time.Second, End: 40 * time.Second, Capacity: c},
		{Start: 40 * time.Second, End: 50 * time.Second, Capacity: c}}
	w, err := Scan(path, 50*time.Second, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	all, ok := w.LoadModel(0, 50*time.Second)
	if !ok || len(all) != 2 || all[0].Name != "a" {
		t.Fatalf("whole trace: %+v", all)
	}
	w.SetRates(phases)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6*want+1e-9 }
	// Every app server: phase 1 has 30 requests/s × 3 cacheable queries to a.
	for i, want := range []Rates{{30, 10}, {90, 30}} {
		if got := phases[i].Rates["a"]; !near(got.Cacheable, want.Cacheable) || !near(got.Uncacheable, want.Uncacheable) {
			t.Errorf("phase %d: a's rates %+v, want %+v", i, got, want)
		}
	}
	// The last request is at 29.95 s: phase 2 is measured over 20 s–29.95 s.
	if got := phases[2].Rates["b"].Cacheable; !near(got, 100/9.95) {
		t.Errorf("phase 2: b's rate %v, want %v", got, 100/9.95)
	}
	if phases[3].Rates != nil {
		t.Errorf("a phase beyond the trace has rates %+v; it keeps the whole trace's", phases[3].Rates)
	}
	if b := phases[3].Demand(all[0]); b.CacheableRate != all[0].CacheableRate {
		t.Error("Demand without rates changed the rates")
	}
	// The first phase's curve counts the keys' first accesses (50 keys on
	// each of the 2 app servers); the last one's almost none.
	if first, last := phases[0].Curves["a"][4], phases[2].Curves["a"][4]; first < 0.2 || last > first/2 {
		t.Errorf("miss ratio at 4 MiB: %v at the start, %v at the end", first, last)
	}
	// Capacity 24 queries/s of a: phase 1 has 30 uncacheable queries/s
	// alone, beyond it; the whole trace's average (16.7) is not.
	res, err := analysePhases(all, phases, 4, 1, map[string]int{"a": 2, "b": 2})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Feasible || res[1].Feasible || !res[2].Feasible || !res[3].Feasible {
		t.Fatalf("feasible per phase: %v %v %v %v", res[0].Feasible, res[1].Feasible, res[2].Feasible, res[3].Feasible)
	}
	if all[0].Load(4) > 24 {
		t.Fatalf("the whole trace's load %v should fit", all[0].Load(4))
	}
	if c, w := Classify(res); c != ClassInfeasible || w <= 1 {
		t.Fatalf("class %s %v", c, w)
	}
}

func TestClassify(t *testing.T) {
	res := func(worst ...float64) []Result {
		var out []Result
		for _, w := range worst {
			out = append(out, Result{MinMaxWorst: w})
		}
		return out
	}
	for _, c := range []struct {
		worst []float64
		want  Class
	}{
		{nil, ClassMargin},
		{[]float64{0.2, MarginUtilization}, ClassMargin},
		{[]float64{0.2, 0.8500001}, ClassTight},
		{[]float64{FeasibleUtilization, 0.3}, ClassTight},
		{[]float64{0.3, 1.0000001}, ClassInfeasible},
		{[]float64{math.Inf(1)}, ClassInfeasible},
	} {
		got, w := Classify(res(c.worst...))
		if got != c.want {
			t.Errorf("%v: %s, want %s", c.worst, got, c.want)
		}
		if len(c.worst) > 0 && w != math.Max(c.worst[0], c.worst[len(c.worst)-1]) {
			t.Errorf("%v: worst %v", c.worst, w)
		}
	}
}

// A phase whose factor the trace's rate does not show is flagged; one that
// shows it is not.
func TestUncarriedRates(t *testing.T) {
	mk := func(start, end int, factor, rate float64) Phase {
		return Phase{Start: time.Duration(start) * time.Second, End: time.Duration(end) * time.Second, RateFactor: factor,
			Rates: map[string]Rates{"a": {Cacheable: rate * 0.8, Uncacheable: rate * 0.2}}}
	}
	carried := []Phase{mk(0, 10, 1, 100), mk(10, 20, 2, 205), mk(20, 30, 1, 98)}
	if u := UncarriedRates(carried); len(u) != 0 {
		t.Fatalf("carried flagged: %+v", u)
	}
	not := []Phase{mk(0, 10, 1, 100), mk(10, 20, 2, 103), mk(20, 22, 2, 100), mk(22, 30, 1, 98)}
	if u := UncarriedRates(not); len(u) != 1 || u[0].Start != 10*time.Second {
		t.Fatalf("uncarried: %+v", u)
	}
}
