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
	"github.com/robinhoodcache/robinhood/lib/hashing"
	"github.com/robinhoodcache/robinhood/lib/model"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// uniformTrace writes secs seconds of rate requests/s, each one query of
// backend a to one of keys keys of size bytes drawn uniformly (an
// independent reference stream: an LRU of m bytes misses 1 − m/total).
func uniformTrace(t *testing.T, secs, rate, keys int, size int64) string {
	t.Helper()
	var b strings.Builder
	x := uint64(7)
	for i := 0; i < secs*rate; i++ {
		x = hashing.Mix64(x)
		fmt.Fprintf(&b, `{"t": %d, "ts_ms": %g, "d": [{"a": {"S": [%d], "U": ["k%d"], "C": [1]}}]}`+"\n",
			i, float64(i)*1000/float64(rate), size, x%uint64(keys))
	}
	p := filepath.Join(t.TempDir(), "u.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each app server's cache sees a random half of the requests over every
// key: with two app servers its curve at m MiB is the one app server's at
// m (not at 2m, as if each saw half the keys), and the rates are every app
// server's.
func TestScanSplitsRequestsOverAppServers(t *testing.T) {
	path := uniformTrace(t, 100, 400, 400, 64<<10) // 25 MiB of keys
	one, err := Scan(path, 100*time.Second, 1, 24)
	if err != nil {
		t.Fatal(err)
	}
	two, err := Scan(path, 100*time.Second, 2, 24)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := one.LoadModel(20*time.Second, 100*time.Second)
	b2, _ := two.LoadModel(20*time.Second, 100*time.Second)
	if b1[0].CacheableRate != b2[0].CacheableRate || math.Abs(b1[0].CacheableRate-400) > 1 {
		t.Fatalf("rates %v and %v, want 400 both", b1[0].CacheableRate, b2[0].CacheableRate)
	}
	m1, m2 := b1[0].MissRatio, b2[0].MissRatio
	if math.Abs(m1[12]-m2[12]) > 0.05 || math.Abs(m1[12]-(1-12.0/25)) > 0.05 {
		t.Fatalf("at 12 MiB: one app server %v, two %v, want about %v both", m1[12], m2[12], 1-12.0/25)
	}
	if m1[24] > m2[12]-0.3 {
		t.Fatalf("two app servers' 12 MiB (%v) behave like one's 24 MiB (%v)", m2[12], m1[24])
	}
	if two.Buckets() != 100 || two.Bucket != time.Second || two.Requests[3] != 400 {
		t.Fatalf("buckets %d of %v, %v requests in bucket 3", two.Buckets(), two.Bucket, two.Requests[3])
	}
}

// A scenario change sets every limit field (capacity.Patch), cost and
// stalls included.
func TestPhasesApplyEveryLimitField(t *testing.T) {
	initial := map[string]config.Limits{"a": {Workers: 4, ExtraLatencyMs: 3}}
	changes := []scenario.Change{{At: 5 * time.Second, Backend: "a", Fields: []scenario.FieldValue{
		{Field: config.FieldCostMs, Value: 2}, {Field: config.FieldStallProb, Value: 0.01}, {Field: config.FieldStallMs, Value: 30},
		{Field: config.FieldWorkers, Value: 2}}}}
	ph := Phases(initial, changes, 10*time.Second)
	got := ph[1].Limits["a"]
	if len(ph) != 2 || got.CostMs != 2 || got.StallProb != 0.01 || got.StallMs != 30 || got.Workers != 2 || got.ExtraLatencyMs != 3 {
		t.Fatalf("%+v", ph)
	}
	if ph[0].Limits["a"].CostMs != 0 || ph[1].Capacity["a"] != model.Capacity(got) {
		t.Fatalf("%+v", ph)
	}
}

// demoTrace synthesizes a OneRF-like trace of two backends.
func demoTrace(t *testing.T, secs int) string {
	t.Helper()
	o := synth.DefaultOptions()
	o.Backends, o.Names, o.Rate, o.QueriesPerRequest, o.Seed = 2, []string{"a", "b"}, 200, 12, 5
	o.Keys.Default, o.MeanSize.Default, o.SizeSigma, o.Zipf.Default = 4000, 16384, 0.4, 0.9
	g, err := synth.New(o)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "demo.jsonl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(f, synth.Limit{Duration: time.Duration(secs) * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

func demoTopology(apps int) *config.Topology {
	l := config.Limits{Workers: 8, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}
	topo := &config.Topology{
		Backends: []config.Backend{{Name: "a", Type: config.TypeKV, Limits: l, Replicas: make([]config.Replica, 1)},
			{Name: "b", Type: config.TypeKV, Limits: l, Replicas: make([]config.Replica, 1)}},
		SLO: &config.SLO{Latency: config.Duration(150 * time.Millisecond), Step: config.Duration(2 * time.Second),
			Window: config.Duration(10 * time.Second), Warmup: config.Duration(20 * time.Second)},
	}
	for i := range apps {
		topo.AppServers = append(topo.AppServers, config.AppServer{ID: fmt.Sprint("app", i), CacheMode: config.CachePartitioned,
			CacheBudgetMB: 64, Partitions: map[string]config.Partition{"a": {}, "b": {}},
			BackendTimeout: config.Duration(4 * time.Second), Controller: config.Controller{MinPartitionMB: 8}})
	}
	return topo
}

// The transient model: a partition fills at the rate its backend answers
// misses — slowly from a throttled one — and a backend offered more than
// it admits builds a queue that outlives the overload and then drains.
func TestTransientFillAndBacklog(t *testing.T) {
	path := demoTrace(t, 60)
	rep, err := Analyse(Input{Topology: demoTopology(1), TracePath: path, Duration: 60 * time.Second}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.dyn
	alloc := rep.vec(map[string]int{"a": 48, "b": 16})
	fill := func(lim config.Limits, secs int) (held []float64, queue []float64) {
		ph := d.phases[0]
		ph.Limits = map[string]config.Limits{"a": lim, "b": demoTopology(1).Backends[1].Limits}
		d.phases[0] = ph
		f := d.start()
		for s := range secs {
			d.step(f, s, alloc)
			held = append(held, f.held[0])
			queue = append(queue, f.queue[0])
		}
		return held, queue
	}
	free, _ := fill(config.Limits{Workers: 8, ExtraLatencyMs: 3}, 30)
	slow, queue := fill(config.Limits{Workers: 8, ExtraLatencyMs: 3, Rate: 60}, 30)
	hold := d.lm.heldMB(0, 48)
	for s := 1; s < 30; s++ {
		if free[s] < free[s-1] || free[s] > hold+1e-9 || slow[s] > free[s]+1e-9 {
			t.Fatalf("second %d: held %v (throttled %v), limit holds %v", s, free[s], slow[s], hold)
		}
	}
	if free[29] < 0.9*hold || slow[5] > free[5]/2 {
		t.Fatalf("free backend filled %v of %v in 30 s; throttled one %v vs %v after 5 s", free[29], hold, slow[5], free[5])
	}
	if queue[3] <= 0 || queue[10] < queue[3] {
		t.Fatalf("a throttled backend's queue: %v", queue[:11])
	}
	// Given back a quarter more capacity than its load, the backend drains
	// the queue slowly: it outlives the overload, and slows the requests
	// while it lasts.
	mr := math.Round(model.MissAt(d.w.MissCurveAt(0, 30), slow[29])/mrStep) * mrStep
	lam := d.lm.stateMR(0, config.Limits{Workers: 8, ExtraLatencyMs: 3}, d.rate[30], mr).lam
	ph := d.phases[0]
	ph.Limits = map[string]config.Limits{"a": {Workers: 8, ExtraLatencyMs: 3, Rate: 1.25 * lam}, "b": demoTopology(1).Backends[1].Limits}
	d.phases[0] = ph
	f := fluid{held: []float64{slow[29], 0}, queue: []float64{queue[29], 0}}
	first := d.step(f, 30, alloc)
	after1 := f.queue[0]
	for s := 31; s < 45; s++ {
		d.step(f, s, alloc)
	}
	if queue[29] <= 0 || after1 <= 0 || after1 >= queue[29] || f.queue[0] != 0 || first <= 0.01 {
		t.Fatalf("queue %v, %v a second later, then %v; slow share in the first second %v", queue[29], after1, f.queue[0], first)
	}
}

// A drop known in advance: the schedule with foresight gives the dropping
// backend space before it drops, the reactive one only when it has
// dropped; neither is predicted worse than the configured allocation, and
// foresight is predicted no worse than reacting. Every step allocates the
// budget with the floors kept; N app servers load the backend N times.
func TestAnalyseForesightMovesEarly(t *testing.T) {
	path := demoTrace(t, 100)
	drop := []scenario.Change{{At: 50 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: config.FieldRate, Value: 180}}},
		{At: 80 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: config.FieldRate, Value: 0}}}}
	var loads []float64
	for _, apps := range []int{1, 2} {
		rep, err := Analyse(Input{Topology: demoTopology(apps), TracePath: path, Duration: 100 * time.Second, Changes: drop},
			Options{Variants: Variants})
		if err != nil {
			t.Fatal(err)
		}
		fore, reac := rep.Schedules[Foresight], rep.Schedules[Reactive]
		for _, s := range []*Schedule{fore, reac} {
			for _, st := range s.Steps {
				if st.MB["a"]+st.MB["b"] != 64 || st.MB["a"] < 8 || st.MB["b"] < 8 {
					t.Fatalf("%d app servers, %s: %+v", apps, s.Variant, s.Steps)
				}
			}
			if s.Predicted.Pct > rep.ConfiguredPredicted.Pct+1e-9 {
				t.Fatalf("%d app servers, %s predicted %v%%, configured %v%%", apps, s.Variant, s.Predicted.Pct, rep.ConfiguredPredicted.Pct)
			}
		}
		if fore.Predicted.Pct > reac.Predicted.Pct+1e-9 {
			t.Fatalf("%d app servers: foresight %v%% > reactive %v%%", apps, fore.Predicted.Pct, reac.Predicted.Pct)
		}
		if rep.ConfiguredPredicted.Pct < 5 {
			t.Fatalf("%d app servers: the drop costs the configured allocation only %v%%", apps, rep.ConfiguredPredicted.Pct)
		}
		before, after := reac.At(49 * time.Second)["a"], reac.At(55 * time.Second)["a"]
		if fore.At(49 * time.Second)["a"] <= before || before != rep.Steady[0].Best["a"] || after <= before {
			t.Fatalf("%d app servers: a before the drop: foresight %v, reactive %v; after: reactive %v", apps,
				fore.At(49*time.Second), reac.At(49*time.Second), reac.At(55*time.Second))
		}
		b := rep.Results[1]
		loads = append(loads, b.Phase.Demand(rep.Backends[0]).Load(32))
	}
	if math.Abs(loads[1]-loads[0]) > 0.15*loads[0] {
		t.Fatalf("a's load at 32 MiB each: %v with one app server, %v with two (the requests are the same)", loads[0], loads[1])
	}
}

// A drop further away than the horizon and the longest lead: foresight
// keeps the configured allocation, where every arm starts, until its
// lead cuts, and moves space before the drop (memcached's slab classes
// make space given long before it is needed worth less than the model
// says: docs/algorithms.md, "The oracle"). The reactive schedule starts
// from the first phase's steady-state best.
func TestAnalyseForesightStartsFromTheConfiguredAllocation(t *testing.T) {
	path := demoTrace(t, 160)
	drop := []scenario.Change{{At: 140 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: config.FieldRate, Value: 180}}}}
	rep, err := Analyse(Input{Topology: demoTopology(1), TracePath: path, Duration: 160 * time.Second, Changes: drop},
		Options{Variants: Variants})
	if err != nil {
		t.Fatal(err)
	}
	fore, reac := rep.Schedules[Foresight], rep.Schedules[Reactive]
	if got := fore.At(0); got["a"] != rep.Configured["a"] || got["b"] != rep.Configured["b"] {
		t.Fatalf("foresight at 0 s %v, configured %v (steps %+v)", got, rep.Configured, fore.Steps)
	}
	if got := fore.At(139 * time.Second); got["a"] <= rep.Configured["a"] {
		t.Fatalf("foresight gives the dropping backend no space before the drop: %+v", fore.Steps)
	}
	if got := reac.At(0); got["a"] != rep.Steady[0].Best["a"] {
		t.Fatalf("reactive at 0 s %v, the first phase's best %v", got, rep.Steady[0].Best)
	}
}

func TestAnalyseListsTheCandidatesForTheJudge(t *testing.T) {
	path := demoTrace(t, 160)
	drop := []scenario.Change{{At: 140 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: config.FieldRate, Value: 180}}}}
	in := Input{Topology: demoTopology(1), TracePath: path, Duration: 160 * time.Second, Changes: drop}
	rep, err := Analyse(in, Options{Variants: Variants, Candidates: true})
	if err != nil {
		t.Fatal(err)
	}
	cs := rep.Candidates
	if len(cs) < 2 || cs[0].Name != "model-pick" || fmt.Sprint(cs[0].Schedule.Steps) != fmt.Sprint(rep.Schedules[Foresight].Steps) {
		t.Fatalf("the model's pick is not the first candidate: %+v", cs)
	}
	names, steps := map[string]bool{}, map[string]bool{}
	for _, c := range cs {
		if names[c.Name] {
			t.Fatalf("candidate %s twice: %+v", c.Name, cs)
		}
		names[c.Name], steps[fmt.Sprint(c.Schedule.Steps)] = true, true
		if c.Schedule.Steps[0].At != 0 || c.Schedule.Variant != Foresight {
			t.Fatalf("candidate %s does not start at 0 s as a foresight schedule: %+v", c.Name, c.Schedule)
		}
	}
	// The reactive schedule and the configured allocation are among them (by schedule).
	if !steps[fmt.Sprint(rep.Schedules[Reactive].Steps)] || !steps[fmt.Sprint([]Step{{At: 0, MB: rep.Configured}})] {
		t.Fatalf("the reactive schedule or the configured allocation is missing: %+v", cs)
	}
	// Every app server lists the same names in the same order, spread ones included.
	want := []string{"model-pick", "foresight-search", "reactive-from-configured", "configured", "reactive",
		"reactive-lead-5s", "reactive-lead-20s", "model-pick-spread", "reactive-spread", "model-pick-ramp"}
	var got []string
	for _, c := range cs {
		got = append(got, c.Name)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("candidates %v, want %v", got, want)
	}
	// Without foresight there is nothing to judge.
	if only, err := Analyse(in, Options{Variants: []string{Reactive}, Candidates: true}); err != nil || len(only.Candidates) != 0 {
		t.Fatalf("reactive only: %v, %d candidates", err, len(only.Candidates))
	}
	// Nor unless asked (scenario check).
	if pick, err := Analyse(in, Options{Variants: Variants}); err != nil || len(pick.Candidates) != 0 ||
		fmt.Sprint(pick.Schedules[Foresight].Steps) != fmt.Sprint(rep.Schedules[Foresight].Steps) {
		t.Fatalf("without candidates: %v, %d candidates, or another pick", err, len(pick.Candidates))
	}
}

func TestShiftedMovesEveryStepEarlier(t *testing.T) {
	rep, a := twoPartitions(t)
	s := &Schedule{Variant: Reactive, Steps: []Step{{At: 0, MB: a(20)}, {At: 3 * time.Second, MB: a(30)},
		{At: 30 * time.Second, MB: a(40)}, {At: 33 * time.Second, MB: a(50)}}}
	got := rep.shifted(s, 5*time.Second)
	// 3 s - 5 s overtakes the first step (0 s); 30 s and 33 s move to 25 s and 28 s.
	want := []Step{{At: 0, MB: a(30)}, {At: 25 * time.Second, MB: a(40)}, {At: 28 * time.Second, MB: a(50)}}
	if fmt.Sprint(got.Steps) != fmt.Sprint(want) {
		t.Fatalf("shifted %+v, want %+v", got.Steps, want)
	}
}

// A move spread over the time before it: every step keeps the budget and
// the floor, goes one way, and the schedule is where s is at every step of s.
func TestSpreadMovesInAStraightLine(t *testing.T) {
	rep, a := twoPartitions(t)
	s := &Schedule{Variant: Foresight, Steps: []Step{{At: 0, MB: a(32)}, {At: 20 * time.Second, MB: a(52)},
		{At: 21 * time.Second, MB: a(56)}, {At: 40 * time.Second, MB: a(8)}}}
	got := rep.spread(s)
	prev := Step{At: -1, MB: a(32)}
	for _, st := range got.Steps {
		if st.MB["a"]+st.MB["b"] != rep.Budget || st.MB["a"] < 8 || st.MB["b"] < 8 || st.At <= prev.At {
			t.Fatalf("spread step %+v (budget %d): %+v", st, rep.Budget, got.Steps)
		}
		if (st.At <= 21*time.Second && st.MB["a"] < prev.MB["a"]) || (st.At > 21*time.Second && st.MB["a"] > prev.MB["a"]) {
			t.Fatalf("spread goes back and forth: %+v", got.Steps)
		}
		prev = st
	}
	for _, st := range s.Steps {
		if got.At(st.At)["a"] != st.MB["a"] {
			t.Fatalf("at %v spread has %v, s %v: %+v", st.At, got.At(st.At), st.MB, got.Steps)
		}
	}
	if m := got.At(10 * time.Second)["a"]; m < 40 || m > 44 {
		t.Fatalf("half way to the move a has %d MiB, want about 42: %+v", m, got.Steps)
	}
	if got.Predicted.Points == 0 {
		t.Fatalf("no prediction: %+v", got.Predicted)
	}
}

// ramp: from the configured allocation at 0 in a straight line to where s
// is when the hardest phase starts, then s; s itself when the hardest
// phase is the first.
func TestRampReachesThePickByTheHardestPhase(t *testing.T) {
	rep, a := twoPartitions(t)
	s := &Schedule{Variant: Foresight, Steps: []Step{{At: 0, MB: a(20)}, {At: 30 * time.Second, MB: a(50)}}}
	if got := rep.ramp(s); got != s {
		t.Fatalf("one phase: ramp is not s: %+v", got.Steps)
	}
	first := rep.Results[0]
	rep.Results = []Result{first, first, first}
	for i, p := range []struct {
		at    time.Duration
		worst float64
	}{{0, 0.3}, {20 * time.Second, 0.9}, {40 * time.Second, 0.9}} {
		rep.Results[i].Start, rep.Results[i].MinMaxWorst = p.at, p.worst
	}
	got := rep.ramp(s)
	conf := rep.Configured["a"]
	if got.At(0)["a"] != conf || got.At(20 * time.Second)["a"] != 20 || got.At(30 * time.Second)["a"] != 50 {
		t.Fatalf("ramp from %d: %+v", conf, got.Steps)
	}
	if m, want := got.At(10 * time.Second)["a"], (conf+20)/2; m < want-1 || m > want+1 {
		t.Fatalf("half way a has %d MiB, want about %d: %+v", m, want, got.Steps)
	}
	prev := got.Steps[0]
	for _, st := range got.Steps[1:] {
		if st.MB["a"]+st.MB["b"] != rep.Budget || st.At <= prev.At || (st.At <= 20*time.Second && (st.MB["a"]-prev.MB["a"])*(20-conf) < 0) {
			t.Fatalf("ramp step %+v after %+v: %+v", st, prev, got.Steps)
		}
		prev = st
	}
	if got.Predicted.Points == 0 {
		t.Fatalf("no prediction: %+v", got.Predicted)
	}
}

// lerp keeps the total, stays between the two ends and leaves -1 alone.
func TestLerpKeepsTheTotal(t *testing.T) {
	a, b := []int{10, 20, 34, -1}, []int{30, 17, 17, -1}
	for _, f := range []float64{0, 0.1, 1.0 / 3, 0.5, 0.77, 1} {
		got := lerp(a, b, f, nil)
		sum := 0
		for i := range got {
			if a[i] < 0 {
				if got[i] != -1 {
					t.Fatalf("f=%v: %v", f, got)
				}
				continue
			}
			sum += got[i]
			if lo, hi := min(a[i], b[i]), max(a[i], b[i]); got[i] < lo || got[i] > hi {
				t.Fatalf("f=%v: %v outside %v..%v", f, got, a, b)
			}
		}
		if sum != 64 {
			t.Fatalf("f=%v: %v sums to %d", f, got, sum)
		}
	}
	if got := lerp(a, b, 1, nil); fmt.Sprint(got) != fmt.Sprint(b) {
		t.Fatalf("lerp(1) = %v, want %v", got, b)
	}
}

// lerp rounds equal remainders up in the order given (index order
// without one), and the oracle's midpoints in the trace backends' indices
// as decimal text (the order the search has always used).
func TestLerpTieOrder(t *testing.T) {
	a := make([]int, 12)
	b := make([]int, 12)
	for i := range a {
		a[i], b[i] = 10, 10
	}
	a[2], b[2] = 11, 10 // 10.5
	a[10], b[10] = 10, 11
	if got := lerp(a, b, 0.5, nil); got[2] != 11 || got[10] != 10 {
		t.Fatalf("index order: %v", got)
	}
	if got := lerp(a, b, 0.5, []int{0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9}); got[2] != 10 || got[10] != 11 {
		t.Fatalf("decimal-text order: %v", got)
	}
	w := &Workload{Fanout: Fanout{Backends: make([]string, 12)}}
	for i := range w.Backends {
		w.Backends[i] = fmt.Sprintf("p%02d", i)
	}
	rep := &Report{workload: w}
	rep.index()
	if got := rep.mid(a, b); got[2] != 10 || got[10] != 11 {
		t.Fatalf("the oracle's midpoint: %v (order %v)", got, rep.midOrder)
	}
}

// twoPartitions is the analysis of a 60 s demo trace on one app server
// with no scenario, and an allocation of n MiB to a (the rest to b).
func twoPartitions(t *testing.T) (*Report, func(n int) map[string]int) {
	t.Helper()
	path := demoTrace(t, 60)
	rep, err := Analyse(Input{Topology: demoTopology(1), TracePath: path, Duration: 60 * time.Second}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep, func(n int) map[string]int { return map[string]int{"a": n, "b": rep.Budget - n} }
}
