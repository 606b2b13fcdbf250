package sim

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func benchConfig(policies ...string) *HedgingConfig {
	c := &HedgingConfig{Name: "t", Shards: 1, Replicas: 1, Workers: 1,
		Service: ServiceDist{Dist: "exponential", MeanMs: 1}, Utilizations: []float64{0.5},
		Requests: 20000, Warmup: 2000, Percentile: 99}
	for _, p := range policies {
		c.Policies = append(c.Policies, BenchPolicy{Dispatch: map[string]any{"policy": p}})
	}
	return c
}

// The bench against queueing theory: one M/M/1 server at 50% load has mean
// response time 1/(μ-λ) = 2 mean service times, and its P99 is
// ln(100)/(μ-λ) ≈ 9.2.
func TestBenchMatchesMM1(t *testing.T) {
	c := benchConfig("random")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var mean, tail []float64
	for seed := uint64(1); seed <= 3; seed++ {
		r, err := c.RunBench(c.Policies[0], 0.5, seed)
		if err != nil {
			t.Fatal(err)
		}
		if r.Unfinished != 0 || r.CopiesPerQuery != 1 {
			t.Fatalf("run %+v", r)
		}
		mean, tail = append(mean, r.Mean), append(tail, r.Tail)
	}
	m := (mean[0] + mean[1] + mean[2]) / 3
	p := (tail[0] + tail[1] + tail[2]) / 3
	if math.Abs(m-2) > 0.2 || math.Abs(p-2*math.Log(100)) > 1.2 {
		t.Fatalf("M/M/1 at 50%%: mean %.2f (want 2), P99 %.2f (want %.2f)", m, p, 2*math.Log(100))
	}
}

// Without queueing, a Pareto(1.1, 2) service time's P95 is 2·20^(1/1.1)
// ≈ 30.5 (SingleR §5.3's no-reissue baseline).
func TestBenchParetoTail(t *testing.T) {
	c := benchConfig("random")
	c.Replicas, c.Workers, c.Percentile = 10, 10000, 95
	c.Service = ServiceDist{Dist: "pareto", Shape: 1.1, ModeMs: 2}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := c.RunBench(c.Policies[0], 0.01, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := 2 * math.Pow(20, 1/1.1)
	if math.Abs(r.Tail-want)/want > 0.08 {
		t.Fatalf("P95 %.2f, want %.2f", r.Tail, want)
	}
}

// Every arm answers every request; naive hedging sends two copies of
// nearly every query (its budget of one per batch rounds down at the
// window's edges); the idealized hedge beats PSQ at low load (it hedges on idle
// replicas) and a single-copy policy never sends extra copies.
func TestBenchArms(t *testing.T) {
	c := benchConfig("psq", "hedge", Ideal, "laedge")
	c.Shards, c.Replicas, c.Requests, c.Warmup = 5, 2, 4000, 400
	c.HiccupProb, c.HiccupMs = 0.01, 15
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	runs := map[string]BenchRun{}
	for _, p := range c.Policies {
		r, err := c.RunBench(p, 0.1, 7)
		if err != nil {
			t.Fatal(err)
		}
		if r.Unfinished != 0 || r.Requests != c.Requests {
			t.Fatalf("%s: %+v", p.Label, r)
		}
		runs[p.Label] = r
	}
	if c := runs["hedge"].CopiesPerQuery; c < 1.95 || c > 2 || runs["psq"].ExtraPerQuery != 0 {
		t.Fatalf("copies: hedge %v, psq extra %v", runs["hedge"].CopiesPerQuery, runs["psq"].ExtraPerQuery)
	}
	if runs[Ideal].Tail >= runs["psq"].Tail {
		t.Fatalf("idealized hedge P99 %.2f is not below PSQ's %.2f at 10%% load", runs[Ideal].Tail, runs["psq"].Tail)
	}
	sums := Summarize([]BenchRun{runs["psq"], runs["hedge"]})
	if tab := c.Table(sums); !strings.Contains(tab, "| load | psq | hedge |") || !strings.Contains(tab, "| 10% |") {
		t.Fatalf("table:\n%s", tab)
	}
}

func TestBenchBadInputIsNamed(t *testing.T) {
	dir := t.TempDir()
	base := "name: x\nshards: 2\nreplicas: 2\nservice: {dist: exponential, mean_ms: 1}\nutilizations: [0.5]\nrequests: 1000\n"
	for _, c := range []struct{ doc, want string }{
		// The contract's checks (schema/hedging.schema.yaml; more in tests/config/hedging).
		{"shards: 0", "name: is required"},
		{strings.Replace(base, "shards: 2", "shards: 0", 1) + "policies: [{dispatch: random}]", "shards: 0 is out of range [1, 10000]"},
		{base + "policies: [{dispatch: random}]\nfanout: 3", "fanout: 3 is more than shards (2)"},
		{base + "policies: [{dispatch: random}]\nreplica: 2", "replica: unknown field"},
		{"[[[", "not valid YAML"},
		// The bench's own: each arm's dispatch parameters, the idealized hedge's conditions.
		{base + "workers: 2\npolicies: [{dispatch: {policy: ideal}}]", "policies[0]: the idealized hedge needs single-worker replicas"},
		{base + "policies: [{dispatch: {policy: nosuch}}]", "policies[0].dispatch"},
		{base + "policies: [{dispatch: {policy: jsq, nope: 1}}]", "policies[0].dispatch.nope: unknown field (known: none)"},
		{base + "policies: [{dispatch: {policy: psq, n: 0}}]", "policies[0].dispatch.n: 0 is out of range [1, 1000]"},
		{base + "policies: [{dispatch: random}, {dispatch: random}]", `policies[1].label: "random" appears twice`},
	} {
		p := filepath.Join(dir, "e.yaml")
		os.WriteFile(p, []byte(c.doc), 0o644)
		if _, err := LoadHedging(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.doc, err, c.want)
		}
	}
}

// The shipped experiments load.
func TestShippedHedgingExperimentsLoad(t *testing.T) {
	files, _ := filepath.Glob("../examples/hedging/*.yaml")
	if len(files) == 0 {
		t.Fatal("no experiments in examples/hedging")
	}
	for _, f := range files {
		if _, err := LoadHedging(f); err != nil {
			t.Error(err)
		}
	}
}

// A jitter measurement becomes the bench's hiccups, in mean service times.
func TestBenchTakesAMeasurement(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "jitter.json"), []byte(`{"mean_service_ms": 0.8, "stall_prob": 0.002, "stall_x": 12}`), 0o644)
	exp := filepath.Join(dir, "e.yaml")
	doc := "name: m\nshards: 2\nreplicas: 2\nworkers: 1\nservice: {dist: exponential, mean_ms: 2}\nmeasured: jitter.json\n" +
		"utilizations: [0.3]\nrequests: 1000\npolicies: [{dispatch: {policy: psq}}]\n"
	os.WriteFile(exp, []byte(doc), 0o644)
	c, err := LoadHedging(exp)
	if err != nil {
		t.Fatal(err)
	}
	if c.HiccupProb != 0.002 || c.HiccupMs != 24 {
		t.Fatalf("hiccups %g, %g ms; want 0.002, 24 ms (12 mean service times of 2 ms)", c.HiccupProb, c.HiccupMs)
	}
	if err := c.Validate(); err != nil { // as sim hedging --requests does
		t.Fatalf("a measured experiment, validated again: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "jitter.json"), []byte(`{"stall_prob": 2, "stall_x": 12}`), 0o644)
	if _, err := LoadHedging(exp); err == nil || !strings.Contains(err.Error(), "measured: hiccup_prob: 2.0 is out of range [0, 1]") {
		t.Fatalf("a measured probability of 2: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "jitter.json"), []byte(`{"stall_prob": 0.002, "stall_x": 12}`), 0o644)
	os.WriteFile(exp, []byte(doc+"hiccup_prob: 0.1\n"), 0o644)
	if _, err := LoadHedging(exp); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("a measurement and hiccups together: %v", err)
	}
}

// dasBench is the DAS §6 setup (examples/hedging/das.yaml) at one load
// point with the given arms.
func dasBench(arms ...BenchPolicy) *HedgingConfig {
	c := benchConfig()
	c.Replicas, c.Requests, c.Warmup = 10, 20000, 2000
	c.HiccupProb, c.HiccupMs = 0.1, 5
	c.Policies = arms
	return c
}

func ms(v float64) *float64 { return &v }

var (
	hedgedArm  = map[string]any{"policy": "d-hedge", "budget": 1.0, "delay": "5.75ms", "percentile": 0.0, "cancel": true}
	cloningArm = map[string]any{"policy": "hedge", "budget": 1.0, "cancel": true}
)

// A purge cost without bound leaves every running copy to finish: the
// queued cancel model, to the request.
func TestAnUnboundedPurgeCostIsTheQueuedModel(t *testing.T) {
	c := dasBench(
		BenchPolicy{Label: "cost", Dispatch: cloningArm, PurgeCostMs: ms(60000)},
		BenchPolicy{Label: "queued", Dispatch: cloningArm, Cancel: "queued"},
		BenchPolicy{Label: "free", Dispatch: cloningArm},
	)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var runs [3]BenchRun
	for i, p := range c.Policies {
		r, err := c.RunBench(p, 0.5, 3)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = r
	}
	if runs[0].Tail != runs[1].Tail || runs[0].Mean != runs[1].Mean {
		t.Fatalf("unbounded purge cost: P99 %.3f mean %.3f; queued model: %.3f %.3f", runs[0].Tail, runs[0].Mean, runs[1].Tail, runs[1].Mean)
	}
	if !(runs[2].Tail < runs[0].Tail) {
		t.Fatalf("stopping for free (P99 %.3f) is not better than letting copies run (%.3f)", runs[2].Tail, runs[0].Tail)
	}
}

// DAS §6: with purges that take 10 mean service times to reach the
// replica, Hedged (same priority) is unstable at 80% load while DAS (low
// priority) holds; with instant purges both hold (docs/hedging.md).
func TestASlowPurgeDestabilizesHedgedNotDAS(t *testing.T) {
	das := map[string]any{"policy": "das"}
	c := dasBench(
		BenchPolicy{Label: "hedged", Dispatch: hedgedArm},
		BenchPolicy{Label: "das", Dispatch: das},
		BenchPolicy{Label: "hedged-slow", Dispatch: hedgedArm, PurgeDelayMs: ms(10)},
		BenchPolicy{Label: "das-slow", Dispatch: das, PurgeDelayMs: ms(10)},
	)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Policies {
		r, err := c.RunBench(p, 0.8, 1)
		if err != nil {
			t.Fatal(err)
		}
		if want := p.Label == "hedged-slow"; r.Unstable != want {
			t.Errorf("%s: unstable %v (P99 %.1f, drift %.2f), want %v", p.Label, r.Unstable, r.Tail, r.Drift, want)
		}
	}
}

// An arm's purge limits are checked like the experiment's.
func TestAnArmsPurgeLimitsAreValidated(t *testing.T) {
	c := dasBench(BenchPolicy{Label: "bad", Dispatch: cloningArm, PurgeDelayMs: ms(-1)})
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "policies[0].purge_delay_ms: -1.0 is out of range") {
		t.Fatalf("Validate = %v, want policies[0]'s purge_delay_ms refused", err)
	}
	c = dasBench(BenchPolicy{Label: "ok", Dispatch: cloningArm})
	c.PurgeCostMs = 60001
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "purge_cost_ms") {
		t.Fatalf("Validate = %v, want purge_cost_ms refused", err)
	}
}

// With hiccup_at: response a hiccup delays the answer, not the worker: on
// one FIFO replica every query's service ends at max(its arrival, the
// previous end) + P, and it is answered hiccup_ms after that when it
// hiccups, and at once otherwise (the FIFO recurrence, checked query by
// query; hiccup_at: service would also delay the next query's start).
func TestAResponseHiccupFreesTheWorker(t *testing.T) {
	c := benchConfig("random")
	c.HiccupProb, c.HiccupMs, c.HiccupAt = 0.3, 5, "response"
	c.Requests, c.Warmup = 3000, 0
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	type q struct{ at, p, ans float64 }
	var qs []q
	c.onQuery = func(n int, at time.Duration, _ int, cost float64) {
		qs = append(qs, q{at: float64(at) / 1e6, p: float64(time.Duration(cost*1e6)) / 1e6})
	}
	c.onAnswer = func(n int, at time.Duration) { qs[n].ans = float64(at) / 1e6 }
	r, err := c.RunBench(c.Policies[0], 0.7, 1)
	if err != nil {
		t.Fatal(err)
	}
	end, hiccups := 0.0, 0
	for i, x := range qs {
		end = math.Max(end, x.at) + x.p
		switch d := x.ans - end; {
		case math.Abs(d) < 1e-5:
		case math.Abs(d-5) < 1e-5:
			hiccups++
		default:
			t.Fatalf("query %d: answered %.6f ms after its service ended at %.6f; want 0 or 5", i, d, end)
		}
	}
	if f := float64(hiccups) / float64(len(qs)); f < 0.25 || f > 0.35 {
		t.Fatalf("%.3f of the queries hiccupped; want about 0.3", f)
	}
	// utilization counts P alone: 0.7 of one worker means 0.7 requests per ms
	if span := qs[len(qs)-1].at - qs[0].at; math.Abs(float64(len(qs))/span-0.7) > 0.05 {
		t.Fatalf("rate %.3f per ms, want 0.7 (P alone)", float64(len(qs))/span)
	}
	_ = r
}
