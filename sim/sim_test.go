package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/dispatch"

	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// writeTrace writes n requests at rate per second, each with q queries on
// each of the backends, Zipf-like keys.
func writeTrace(t testing.TB, path string, backends []string, n, q int, rate float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"t": %d, "ts_ms": %.3f, "d": [{`, i, float64(i)*1000/rate)
		for j, be := range backends {
			if j > 0 {
				b.WriteString(", ")
			}
			var s, u, c []string
			for range q {
				k := int(rng.ExpFloat64() * 300)
				s = append(s, fmt.Sprint(4096+(k%7)*1024))
				u = append(u, fmt.Sprintf(`"%s%d"`, be, k))
				c = append(c, "1")
			}
			fmt.Fprintf(&b, `"%s": {"S": [%s], "U": [%s], "C": [%s]}`, be, strings.Join(s, ","), strings.Join(u, ","), strings.Join(c, ","))
		}
		b.WriteString("}]}\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

const sharedTopology = `
rbc_server: {grpc: 127.0.0.1:1, window: 5s}
backends:
  - {id: 0, name: a, type: kv, replicas: [{grpc: 127.0.0.1:2}], limits: {workers: 4, extra_latency_ms: 2}}
  - {id: 1, name: b, type: sql, replicas: [{grpc: 127.0.0.1:3}, {grpc: 127.0.0.1:4}], limits: {workers: 4, extra_latency_ms: 2, hiccup_prob: 0.01, hiccup_ms: 30}}
app_servers:
  - {id: app0, http: 127.0.0.1:5, cache_mode: shared, shared_cache: 127.0.0.1:6, cache_budget_mb: 8, backend_timeout: 1s, request_timeout: 2s}
  - {id: app1, http: 127.0.0.1:7, cache_mode: none, backend_timeout: 1s, request_timeout: 2s}
`

func simConfig(t testing.TB, dir, topo string, scen string) Config {
	return simConfigN(t, dir, topo, scen, 3000, 5)
}

// writeTopology writes topo into dir and loads it.
func writeTopology(t testing.TB, dir, topo string) (string, *config.Topology) {
	t.Helper()
	tp := filepath.Join(dir, "topology.yaml")
	if err := os.WriteFile(tp, []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	top, err := config.LoadTopology(tp)
	if err != nil {
		t.Fatal(err)
	}
	return tp, top
}

func simConfigN(t testing.TB, dir, topo string, scen string, n, q int) Config {
	t.Helper()
	tp, top := writeTopology(t, dir, topo)
	tr := filepath.Join(dir, "trace.jsonl")
	writeTrace(t, tr, []string{"a", "b"}, n, q, 100)
	cfg := Config{TopologyPath: tp, Topology: top, TracePath: tr, Duration: time.Duration(n/100) * time.Second, Seed: 3,
		SLO:   slo.Params{SLO: 50 * time.Millisecond, Step: time.Second, Window: 5 * time.Second, Warmup: 5 * time.Second},
		Epoch: time.Unix(1_000_000_000, 0)}
	if scen != "" {
		sp := filepath.Join(dir, "scenario.yaml")
		if err := os.WriteFile(sp, []byte(scen), 0o644); err != nil {
			t.Fatal(err)
		}
		sc, _, err := scenario.Load(sp, []string{"a", "b"}, cfg.Duration)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Scenario = sc
	}
	return cfg
}

func readSummary(t testing.TB, dir string) (*replay.Summary, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "replay", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s replay.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s, b
}

func TestARunIsDeterministicAndComplete(t *testing.T) {
	dir := t.TempDir()
	var outs [][]byte
	for i := range 2 {
		cfg := simConfig(t, dir, sharedTopology, "")
		cfg.OutDir = filepath.Join(dir, fmt.Sprint("run", i))
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 3000 || res.Queries != 3000*10 {
			t.Fatalf("%d requests, %d queries; want 3000 and 30000", res.Requests, res.Queries)
		}
		if res.OverallHitRatio == nil || *res.OverallHitRatio < 0.2 || *res.OverallHitRatio > 0.99 {
			t.Fatalf("hit ratio %v: app0's cache should hit some of the Zipf keys", res.OverallHitRatio)
		}
		sum, raw := readSummary(t, cfg.OutDir)
		if sum.Sent != 3000 || sum.OK != 3000 || sum.SLO.PointsCounted == 0 {
			t.Fatalf("summary: sent %d ok %d points %d", sum.Sent, sum.OK, sum.SLO.PointsCounted)
		}
		// One kv and one sql query each take 2 ms of extra latency plus
		// their data path: no request is faster than that.
		if p50 := *sum.Latency.P50; p50 < 2 || p50 > 20 {
			t.Fatalf("P50 %.2f ms, want a few ms", p50)
		}
		rbcLines, err := os.ReadFile(filepath.Join(cfg.OutDir, "rbc.jsonl"))
		if err != nil || strings.Count(string(rbcLines), "\n") < 25 {
			t.Fatalf("rbc.jsonl: %d lines (%v), want one a second", strings.Count(string(rbcLines), "\n"), err)
		}
		outs = append(outs, raw)
	}
	if string(outs[0]) != string(outs[1]) {
		t.Fatal("two runs with the same seed wrote different summaries")
	}
}

func TestACapacityDropQueuesThenTimesOut(t *testing.T) {
	dir := t.TempDir()
	// b's 500 misses/s at most against a rate of 50/s: its queue grows
	// until calls pass the 1 s backend timeout and fail.
	cfg := simConfig(t, dir, sharedTopology, "events:\n  - {kind: set, at: 10s, backend: b, set: {rate: 50}}\n  - {kind: set, at: 20s, backend: b, set: {rate: 0}}\n")
	cfg.OutDir = filepath.Join(dir, "out")
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := readSummary(t, cfg.OutDir)
	if res.Timeouts == 0 || sum.Status["502"] == 0 {
		t.Fatalf("no timeouts (%d) or failed requests (%v) under a rate of 50/s", res.Timeouts, sum.Status)
	}
	var before, during, after float64
	for _, p := range sum.SLO.Series {
		switch {
		case p.TS == 9:
			before = *p.P99
		case p.TS == 19:
			during = *p.P99
		case p.TS == 29:
			after = *p.P99
		}
	}
	if !(before < 50 && during > 500 && after < during) {
		t.Fatalf("P99 before/during/after the drop: %.0f/%.0f/%.0f ms", before, during, after)
	}
}

func TestBadInputIsNamed(t *testing.T) {
	dir := t.TempDir()
	cfg := simConfig(t, dir, sharedTopology, "")
	cfg.OutDir = filepath.Join(dir, "out")
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"t": 1, "ts_ms": 0, "d": [{"zzz": {"S": [1], "U": ["k"], "C": [1]}}]}`+"\n"), 0o644)
	cfg.TracePath = bad
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), `unknown backend "zzz"`) {
		t.Fatalf("unknown backend: %v", err)
	}
	os.WriteFile(bad, []byte(`{"t": 1, "d": [{"a": {"S": [1], "U": ["k"], "C": [1]}}]}`+"\n"), 0o644)
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "no ts_ms") {
		t.Fatalf("no ts_ms: %v", err)
	}
	cfg.TracePath = filepath.Join(dir, "missing.jsonl")
	cfg.OutDir = filepath.Join(dir, "never")
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Fatalf("missing trace: %v", err)
	}
	if _, err := os.Stat(cfg.OutDir); !os.IsNotExist(err) {
		t.Fatal("a run that cannot start must not write its folder")
	}
	// A bad dispatch parameter is the topology reader's to refuse (the
	// contract); a Config built in code is checked again by Run.
	if _, err := config.ParseTopology([]byte(strings.Replace(sharedTopology, "cache_mode: none,", "cache_mode: none, dispatch: {policy: hedge, budget: -1},", 1))); err == nil || !strings.Contains(err.Error(), "app_servers[1].dispatch.budget") {
		t.Fatalf("the topology reader should refuse a bad dispatch parameter by name: %v", err)
	}
	cfg = simConfig(t, dir, sharedTopology, "")
	cfg.Topology.AppServers[1].Dispatch = config.Dispatch{Policy: "hedge", Params: map[string]any{"budget": -1.0}}
	cfg.OutDir = filepath.Join(dir, "out2")
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "app_servers[1].dispatch") || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("a bad dispatch parameter should be refused by name: %v", err)
	}
}

func TestAMiniatureFollowsTheFullRun(t *testing.T) {
	dir := t.TempDir()
	full := simConfigN(t, dir, sharedTopology, "", 6000, 10)
	full.OutDir = filepath.Join(dir, "full")
	fr, err := Run(full)
	if err != nil {
		t.Fatal(err)
	}
	one := full
	one.Sample, one.OutDir = 1, filepath.Join(dir, "one")
	if _, err := Run(one); err != nil {
		t.Fatal(err)
	}
	_, a := readSummary(t, full.OutDir)
	_, b := readSummary(t, one.OutDir)
	if string(a) != string(b) {
		t.Fatal("--sample 1 must be the full simulation")
	}
	half := full
	half.Sample, half.OutDir = 0.5, filepath.Join(dir, "half")
	hr, err := Run(half)
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(hr.Queries) / float64(fr.Queries)
	if ratio < 0.4 || ratio > 0.6 {
		t.Fatalf("a 0.5 sample simulated %.2f of the queries", ratio)
	}
	if d := *hr.OverallHitRatio - *fr.OverallHitRatio; d > 0.05 || d < -0.05 {
		t.Fatalf("hit ratio %.3f in the miniature, %.3f in full", *hr.OverallHitRatio, *fr.OverallHitRatio)
	}
	if _, err := Run(Config{Sample: 2, Duration: time.Second}); err == nil || !strings.Contains(err.Error(), "sample") {
		t.Fatalf("sample 2: %v", err)
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(30*time.Second, 120*time.Second, 10*time.Second, 1_000_000)
	want := "progress: 30 of 120 simulated s (25.0%) in 10s, 100000 queries/s, about 30s left"
	if got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if got := progressLine(time.Hour, 4*time.Hour, time.Hour, 0); !strings.HasSuffix(got, "about 3h0m0s left") {
		t.Fatalf("%q: a long remainder is rounded to the minute", got)
	}
}

// The simulator runs every registered dispatch policy (the same code as the
// app server): every request is answered, and the duplicating policies
// send more copies than batches.
func TestEveryDispatchPolicyRuns(t *testing.T) {
	for _, name := range dispatch.Names() {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			topo := strings.ReplaceAll(sharedTopology, "request_timeout: 2s}", "request_timeout: 2s, dispatch: {policy: "+name+"}}")
			cfg := simConfigN(t, dir, topo, "", 1500, 5)
			cfg.OutDir = filepath.Join(dir, "out")
			res, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			sum, _ := readSummary(t, cfg.OutDir)
			if sum.Sent != 1500 || sum.OK != sum.Sent {
				t.Fatalf("sent %d, ok %d, errors %v", sum.Sent, sum.OK, sum.Errors)
			}
			// Backend b has two replicas: a duplicating policy sends extra
			// copies there, the others exactly one per batch.
			c := res.Dispatch["b"]
			if c.Batches == 0 || c.Copies != c.Batches+c.Extra+c.Retries {
				t.Fatalf("dispatch counters %+v do not add up", c)
			}
			// A policy without a budget sends no duplicate; one with a
			// budget stays within it (plus the window's first batches).
			def, _ := dispatch.Defaults(name)
			budget := 0.0
			if bp, ok := def.(interface{ Budgeted() *dispatch.BudgetParams }); ok {
				budget = bp.Budgeted().Budget
			}
			if float64(c.Extra) > budget*float64(c.Batches)+2 {
				t.Fatalf("%s sent %d extra copies for %d batches, budget %g", name, c.Extra, c.Batches, budget)
			}
			if budget >= 1 && c.Extra == 0 {
				t.Fatalf("%s, budget %g, sent no extra copy", name, budget)
			}
			if one := res.Dispatch["a"]; one.Extra != 0 || one.Copies != one.Batches {
				t.Fatalf("a single replica got extra copies: %+v", one)
			}
		})
	}
}
