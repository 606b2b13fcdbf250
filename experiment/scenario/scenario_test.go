package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

var twenty = func() []string {
	out := make([]string, 20)
	for i := range out {
		out[i] = fmt.Sprintf("b%d", i+1)
	}
	return out
}()

func parse(t *testing.T, doc string) (*Scenario, []string, error) {
	t.Helper()
	return Parse("s.yaml", []byte(doc), []string{"b1", "b2", "b3"}, time.Minute)
}

func TestValidationErrors(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"events: []\nfoo: 1\n", `s.yaml:2: unknown key "foo" (allowed: seed, events)`},
		{"seed: -3\nevents: []\n", `s.yaml:1: seed: "-3" is not a non-negative integer`},
		{"seed: 1\n", "s.yaml:1: events: a list of events is required"},
		{"- 1\n", "s.yaml:1: a scenario is a mapping with an events list"},
		{"events:\n  - at: 1s\n    backend: b1\n", "s.yaml:2: event has no kind (set, ramp, random_walk, request_rate)"},
		{"events:\n  - kind: spike\n", `s.yaml:2: kind "spike" is not one of set, ramp, random_walk, request_rate`},
		{"events:\n  - kind: request_rate\n    at: 5s\n", "s.yaml:2: request_rate event needs factor"},
		{"events:\n  - kind: request_rate\n    factor: 2\n", "s.yaml:2: request_rate event needs at"},
		{"events:\n  - kind: request_rate\n    at: 5s\n    factor: 0\n", "s.yaml:4: factor: 0 must be positive (it multiplies the trace's request rate)"},
		{"events:\n  - kind: request_rate\n    at: 5s\n    factor: -1.5\n", "s.yaml:4: factor: -1.5 must be positive"},
		{"events:\n  - kind: request_rate\n    at: 5s\n    factor: lots\n", `s.yaml:4: factor: "lots" is not a number`},
		{"events:\n  - kind: request_rate\n    at: 5\n    factor: 2\n", `s.yaml:3: at: "5" is not a duration`},
		{"events:\n  - kind: request_rate\n    at: 5s\n    factor: 2\n    backend: b1\n", `s.yaml:5: unknown key "backend" (allowed: kind, at, factor)`},
		{"events:\n  - kind: request_rate\n    at: 5s\n    factor: 2\n  - kind: request_rate\n    at: 5s\n    factor: 1\n", "s.yaml:5: the request rate is also set at 5s by line 2"},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b9\n    set: {rate: 1}\n", `s.yaml:4: backend "b9" is not in the topology (backends: b1, b2, b3)`},
		{"events:\n  - kind: set\n    at: 1s\n    backends: [b1, b1]\n    set: {rate: 1}\n", `s.yaml:4: backend "b1" is listed twice`},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    backends: [b2]\n    set: {rate: 1}\n", "s.yaml:5: give backend or backends, not both"},
		{"events:\n  - kind: set\n    at: 1s\n    set: {rate: 1}\n", "s.yaml:2: event names no backend"},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {rate: 1}\n    field: rate\n", `s.yaml:6: unknown key "field" (allowed: kind, backend, backends, at, set)`},
		{"events:\n  - kind: set\n    at: 1s\n    at: 2s\n    backend: b1\n    set: {rate: 1}\n", "s.yaml:4: at is given twice"},
		{"events:\n  - kind: set\n    at: 60\n    backend: b1\n    set: {rate: 1}\n", `s.yaml:3: at: "60" is not a duration (use e.g. 90s, 5m, 1h30m)`},
		{"events:\n  - kind: set\n    backend: b1\n    set: {rate: 1}\n", "s.yaml:2: set event needs at"},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {iops: 1}\n", `s.yaml:5: field "iops" is not a backend limit (fields: workers, rate, extra_latency_ms, hiccup_prob, hiccup_ms, cost_ms, stall_prob, stall_ms, queue_limit, purge_delay_ms, purge_cost_ms)`},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {rate: -5}\n", "s.yaml:5: rate: -5.0 is out of range [0, 1000000000]"},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {hiccup_prob: 1.5}\n", "s.yaml:5: hiccup_prob: 1.5 is out of range [0, 1]"},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {workers: 2.5}\n", "s.yaml:5: workers: must be an integer, got 2.5"},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {rate: fast}\n", `s.yaml:5: rate: "fast" is not a number`},
		{"events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {}\n", "s.yaml:5: set: a mapping of fields to values is required"},
		{"events:\n  - kind: ramp\n    backend: b1\n    field: rate\n    from: 10\n    to: 5\n    start: 10s\n    end: 5s\n    step: 1s\n", "s.yaml:8: end 5s is not after start 10s"},
		{"events:\n  - kind: ramp\n    backend: b1\n    field: rate\n    from: 10\n    to: 5\n    start: 1s\n    end: 5s\n    step: 0s\n", "s.yaml:9: step: 0s must be positive"},
		{"events:\n  - kind: ramp\n    backend: b1\n    field: rate\n    from: 10\n    start: 1s\n    end: 5s\n    step: 1s\n", "s.yaml:2: ramp event needs to"},
		{"events:\n  - kind: ramp\n    backend: b1\n    field: workers\n    from: 0\n    to: 5\n    start: 1s\n    end: 5s\n    step: 1s\n", "s.yaml:5: workers: 0 is out of range [1, 1000000]"},
		{"events:\n  - kind: ramp\n    backends: [b1, b2]\n    field: rate\n    from: 10\n    to: 5\n    start: 0s\n    end: 30s\n    step: 1s\n  - kind: ramp\n    backend: b2\n    field: rate\n    from: 10\n    to: 5\n    start: 20s\n    end: 40s\n    step: 1s\n",
			"s.yaml:10: ramp of b2.rate from 20s to 40s overlaps the ramp at line 2 (0s to 30s)"},
		{"events:\n  - kind: ramp\n    backend: b1\n    field: rate\n    from: 10\n    to: 5\n    start: 0s\n    end: 30s\n    step: 1s\n  - kind: set\n    at: 15s\n    backend: b1\n    set: {workers: 3, rate: 7}\n",
			"s.yaml:10: set of b1.rate at 15s falls within the ramp at line 2 (0s to 30s)"},
		{"events:\n  - kind: random_walk\n    backend: b1\n    field: rate\n    period: 20s\n    step: 10\n    min: 50\n    max: 100\n    start: 10s\n  - kind: ramp\n    backend: b1\n    field: rate\n    from: 10\n    to: 5\n    start: 1h\n    end: 2h\n    step: 1s\n",
			"s.yaml:10: ramp of b1.rate from 1h0m0s to 2h0m0s overlaps the random_walk at line 2 (10s to the end of the run)"},
		{"events:\n  - kind: set\n    at: 5s\n    backend: b1\n    set: {rate: 3}\n  - kind: set\n    at: 5s\n    backends: [b2, b1]\n    set: {rate: 4}\n", "s.yaml:6: b1.rate is also set at 5s by line 2"},
		{"events:\n  - kind: random_walk\n    backend: b1\n    field: rate\n    period: 20s\n    step: 10\n    min: 100\n    max: 100\n", "s.yaml:8: max 100 is not above min 100"},
		{"events:\n  - kind: random_walk\n    backend: b1\n    field: rate\n    period: 20s\n    step: 10\n    min: 10\n    max: 100\n    initial: 200\n", "s.yaml:9: initial 200 is outside [min 10, max 100]"},
		{"events:\n  - kind: random_walk\n    backend: b1\n    field: workers\n    period: 20s\n    step: 1.5\n    min: 1\n    max: 10\n", "s.yaml:6: step: 1.5 must be a whole number for workers"},
		{"events:\n  - kind: random_walk\n    backend: b1\n    field: rate\n    period: -1s\n    step: 1\n    min: 1\n    max: 10\n", "s.yaml:5: period: -1s is negative"},
		{"events:\n  - kind: random_walk\n    backend: b1\n    field: rate\n    step: 1\n    min: 1\n    max: 10\n", "s.yaml:2: random_walk event needs period"},
	}
	for _, c := range cases {
		_, _, err := parse(t, c.doc)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("scenario\n%s\nerror = %v\n want %s", c.doc, err, c.want)
		}
	}
}

// request_rate events: the schedule in time order, no change of any backend,
// no conflict with a set at the same time, a warning beyond the run.
func TestRequestRate(t *testing.T) {
	doc := "events:\n" +
		"  - {kind: request_rate, at: 1m40s, factor: 1}\n" +
		"  - {kind: set, at: 1m, backend: b1, set: {rate: 5}}\n" +
		"  - {kind: request_rate, at: 1m, factor: 1.5}\n" +
		"  - {kind: request_rate, at: 3m, factor: 2}\n"
	sc, warns, err := Parse("s.yaml", []byte(doc), []string{"b1"}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []RateChange{{At: time.Minute, Factor: 1.5, Line: 4}, {At: 100 * time.Second, Factor: 1, Line: 2}, {At: 3 * time.Minute, Factor: 2, Line: 5}}
	if got := sc.RateSchedule(); !reflect.DeepEqual(got, want) {
		t.Fatalf("schedule %+v, want %+v", got, want)
	}
	if spec := RateScheduleSpec(sc.RateSchedule()); spec != "1m0s:1.5,1m40s:1,3m0s:2" {
		t.Fatalf("spec %q", spec)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "s.yaml:5: request_rate at 3m0s is not before the end of the run") {
		t.Fatalf("warnings %q", warns)
	}
	changes, err := sc.Expand(10*time.Minute, 1, nil)
	if err != nil || len(changes) != 1 || changes[0].Backend != "b1" {
		t.Fatalf("changes %+v %v", changes, err)
	}
	if r, err := sc.Replicas(&config.Topology{Backends: []config.Backend{{Name: "b1", Replicas: []config.Replica{{HTTP: "127.0.0.1:1"}}}}}); err != nil || len(r) != 1 {
		t.Fatalf("replicas %v %v", r, err)
	}
	if sc, _, _ := Parse("s.yaml", []byte("events: []\n"), nil, 0); sc.RateSchedule() != nil {
		t.Fatal("a scenario without request_rate events has a schedule")
	}
}

func TestWarningsBeyondDuration(t *testing.T) {
	doc := "events:\n  - kind: set\n    at: 2m\n    backend: b1\n    set: {rate: 1}\n" +
		"  - kind: ramp\n    backend: b2\n    field: rate\n    from: 10\n    to: 5\n    start: 30s\n    end: 90s\n    step: 10s\n" +
		"  - kind: set\n    at: 10s\n    backend: b3\n    set: {rate: 1}\n"
	_, warns, err := parse(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"s.yaml:2: set at 2m0s is not before the end of the run (1m0s); it will not be applied",
		"s.yaml:6: ramp ends at 1m30s, after the end of the run (1m0s); it is cut short",
	}
	if !reflect.DeepEqual(warns, want) {
		t.Fatalf("warnings:\n%q\nwant\n%q", warns, want)
	}
}

func TestExpandRampsAndSets(t *testing.T) {
	doc := `events:
  - kind: ramp
    backend: b1
    field: workers
    from: 10
    to: 4
    start: 0s
    end: 6s
    step: 2s
  - kind: ramp
    backend: b2
    field: rate
    from: 100
    to: 50
    start: 0s
    end: 5s
    step: 2s
  - kind: set
    at: 4s
    backend: b1
    set: {rate: 7, extra_latency_ms: 2.5}
  - kind: set
    at: 9s
    backend: b3
    set: {rate: 1}
`
	sc, _, err := parse(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sc.Expand(8*time.Second, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	type c struct {
		at      time.Duration
		backend string
		fields  string
	}
	var flat []c
	for _, ch := range got {
		var fs []string
		for _, fv := range ch.Fields {
			fs = append(fs, fmt.Sprintf("%s=%g", fv.Field, fv.Value))
		}
		flat = append(flat, c{ch.At, ch.Backend, strings.Join(fs, ",")})
	}
	s := time.Second
	want := []c{
		{0, "b1", "workers=10"}, {0, "b2", "rate=100"},
		{2 * s, "b1", "workers=8"}, {2 * s, "b2", "rate=80"},
		{4 * s, "b1", "workers=6"}, {4 * s, "b2", "rate=60"}, {4 * s, "b1", "rate=7,extra_latency_ms=2.5"},
		{5 * s, "b2", "rate=50"},
		{6 * s, "b1", "workers=4"},
		// the set at 9 s is after the 8 s run
	}
	if !reflect.DeepEqual(flat, want) {
		t.Fatalf("expanded:\n%v\nwant\n%v", flat, want)
	}
	// Integer fields round, and unchanged values are not re-sent.
	sc, _, err = parse(t, "events:\n  - kind: ramp\n    backend: b1\n    field: workers\n    from: 3\n    to: 2\n    start: 0s\n    end: 4s\n    step: 1s\n")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = sc.Expand(time.Minute, 1, nil)
	if len(got) != 2 || got[0].Fields[0].Value != 3 || got[1].Fields[0].Value != 2 || got[1].At != 3*time.Second { // 2.5 at 2 s rounds to 3
		t.Fatalf("workers ramp 3→2: %+v", got)
	}
}

func TestRandomWalk(t *testing.T) {
	doc := "events:\n  - kind: random_walk\n    backends: [b1, b2]\n    field: rate\n    period: 20s\n    step: 10\n    min: 50\n    max: 100\n    initial: 70\n  - kind: random_walk\n    backend: b3\n    field: workers\n    period: 10s\n    step: 1\n    min: 1\n    max: 4\n    end: 5m\n"
	sc, _, err := parse(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	if need := sc.NeedsInitial(); !reflect.DeepEqual(need, []BackendField{{"b3", "workers"}}) {
		t.Fatalf("NeedsInitial = %v", need)
	}
	if _, err := sc.Expand(time.Hour, 1, nil); err == nil || !strings.Contains(err.Error(), "s.yaml:10: the current workers of b3 is needed") {
		t.Fatalf("expand without the initial value: %v", err)
	}
	init := map[BackendField]float64{{"b3", "workers"}: 8} // above max: clamped to 4 at start
	a, err := sc.Expand(time.Hour, 42, init)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sc.Expand(time.Hour, 42, init)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave different walks")
	}
	c, _ := sc.Expand(time.Hour, 43, init)
	if reflect.DeepEqual(a, c) {
		t.Fatal("seeds 42 and 43 gave the same walk")
	}
	cur := map[string]float64{}
	steps := map[string]int{}
	for i, ch := range a {
		if i > 0 && ch.At < a[i-1].At {
			t.Fatal("changes out of order")
		}
		v := ch.Fields[0].Value
		lo, hi, step := 50.0, 100.0, 10.0
		if ch.Backend == "b3" {
			lo, hi, step = 1, 4, 1
			if ch.At > 5*time.Minute {
				t.Fatalf("b3's walk ended at 5m but changed at %v", ch.At)
			}
		}
		if v < lo || v > hi {
			t.Fatalf("%s left [%v, %v]: %v", ch.Backend, lo, hi, v)
		}
		if prev, ok := cur[ch.Backend]; ok {
			if d := math.Abs(v - prev); d == 0 || d > step {
				t.Fatalf("%s moved from %v to %v at %v", ch.Backend, prev, v, ch.At)
			}
			steps[ch.Backend]++
		} else if (ch.Backend == "b3" && v != 4) || (ch.Backend != "b3" && (v != 70 || ch.At != 0)) {
			t.Fatalf("%s starts at %v (at %v)", ch.Backend, v, ch.At)
		}
		cur[ch.Backend] = v
	}
	// 179 periods of 20 s in an hour: a walk moves on most of them.
	if steps["b1"] < 60 || steps["b2"] < 60 || steps["b3"] < 10 {
		t.Fatalf("too few moves: %v", steps)
	}
}

// The example scenarios are valid against a topology of b1…b20 and a 30 min
// run, without warnings.
func TestExampleScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testutil.RepoRoot(t), "examples", "scenarios", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("example scenarios: %v %v", files, err)
	}
	for _, f := range files {
		sc, warns, err := Load(f, twenty, 30*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(warns) > 0 {
			t.Errorf("%s: warnings %v", f, warns)
		}
		changes, err := sc.Expand(30*time.Minute, 1, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(changes) < 2 {
			t.Errorf("%s: only %d changes", f, len(changes))
		}
	}
}

// The applier sends each change to every replica as a partial PUT at its
// time, and records every field of every PUT.
func TestApplierAgainstHTTPReplicas(t *testing.T) {
	type put struct {
		replica string
		body    map[string]float64
	}
	var mu sync.Mutex
	var puts []put
	mk := func(name string, fail bool) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPut || r.URL.Path != AdminPath {
				http.Error(w, "unexpected", http.StatusNotFound)
				return
			}
			b, _ := io.ReadAll(r.Body)
			var m map[string]float64
			if err := json.Unmarshal(b, &m); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			puts = append(puts, put{name, m})
			mu.Unlock()
			if fail {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"error": "rate: no"}`)
				return
			}
			io.WriteString(w, `{}`)
		}))
	}
	r1, r2, r3 := mk("r1", false), mk("r2", false), mk("r3", true)
	defer r1.Close()
	defer r2.Close()
	defer r3.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	var out bytes.Buffer
	a := &Applier{
		Client:   http.DefaultClient,
		Replicas: map[string][]string{"b1": {host(r1), host(r2)}, "b2": {host(r3)}},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Out:      &out,
	}
	changes := []Change{
		{At: 0, Backend: "b1", Fields: []FieldValue{{"rate", 300}, {"workers", 4}}, Line: 3, Kind: KindSet},
		{At: 50 * time.Millisecond, Backend: "b2", Fields: []FieldValue{{"rate", 5}}, Line: 9, Kind: KindRamp},
	}
	start := time.Now()
	tot, err := a.Run(context.Background(), start, changes)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Applied != 2 || tot.Failed != 1 {
		t.Fatalf("totals %+v", tot)
	}
	if len(puts) != 3 || !reflect.DeepEqual(puts[2], put{"r3", map[string]float64{"rate": 5}}) {
		t.Fatalf("puts: %+v", puts)
	}
	for _, p := range puts[:2] {
		if !reflect.DeepEqual(p.body, map[string]float64{"rate": 300, "workers": 4}) {
			t.Fatalf("put %+v", p)
		}
	}
	var recs []Record
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r Record
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5 (2 fields × 2 replicas + 1)", len(recs))
	}
	last := recs[4]
	if last.Backend != "b2" || last.Field != "rate" || last.Value != 5 || last.AtS != 0.05 || last.TS < 0.05 || last.Line != 9 ||
		last.Result != `error: HTTP 400: {"error": "rate: no"}` {
		t.Fatalf("last record %+v", last)
	}
	if recs[0].Result != "ok" || recs[0].Replica != host(r1) || recs[1].Field != "workers" {
		t.Fatalf("first records %+v", recs[:2])
	}
}

func TestReplicasFromTopology(t *testing.T) {
	topo := &config.Topology{Backends: []config.Backend{
		{ID: 0, Name: "b1", Type: "kv", Replicas: []config.Replica{{GRPC: "127.0.0.1:1", HTTP: "127.0.0.1:2"}, {GRPC: "127.0.0.1:3", HTTP: "127.0.0.1:4"}}},
		{ID: 1, Name: "b2", Type: "kv", Replicas: []config.Replica{{GRPC: "127.0.0.1:5"}}},
	}}
	sc, _, err := Parse("s.yaml", []byte("events:\n  - kind: set\n    at: 1s\n    backend: b1\n    set: {rate: 1}\n"), topo.BackendNames(), 0)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := sc.Replicas(topo)
	if err != nil || !reflect.DeepEqual(reps, map[string][]string{"b1": {"127.0.0.1:2", "127.0.0.1:4"}}) {
		t.Fatalf("replicas %v, %v", reps, err)
	}
	sc, _, _ = Parse("s.yaml", []byte("events:\n  - kind: set\n    at: 1s\n    backend: b2\n    set: {rate: 1}\n"), topo.BackendNames(), 0)
	if _, err := sc.Replicas(topo); err == nil || !strings.Contains(err.Error(), `s.yaml:2: backend "b2" replica 0 (grpc 127.0.0.1:5) has no http address`) {
		t.Fatalf("replica without http: %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, _, err := Load(filepath.Join(t.TempDir(), "none.yaml"), twenty, 0); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("Load of a missing file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
