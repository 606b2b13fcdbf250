package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// Two backends behind two app servers with shared caches (no controller, so
// no Python); one of them is a kv store limited to `rate` queries/s.
const miniTopology = `
rbc_server: {grpc: 127.0.0.1:1, window: 5s}
backends:
  - {id: 0, name: a, type: kv, replicas: [{grpc: 127.0.0.1:2}], limits: {workers: 64, extra_latency_ms: 2}}
  - {id: 1, name: b, type: kv, replicas: [{grpc: 127.0.0.1:3}], limits: {workers: 64, extra_latency_ms: 5, hiccup_prob: 0.01, hiccup_ms: 30}}
app_servers:
  - {id: app0, http: 127.0.0.1:5, cache_mode: shared, shared_cache: 127.0.0.1:6, cache_budget_mb: 24, backend_timeout: 1s, request_timeout: 2s}
  - {id: app1, http: 127.0.0.1:7, cache_mode: shared, shared_cache: 127.0.0.1:8, cache_budget_mb: 24, backend_timeout: 1s, request_timeout: 2s}
`

func miniConfig(t *testing.T, dir string, d time.Duration, scen string) Config {
	t.Helper()
	tp, top := writeTopology(t, dir, miniTopology)
	o, err := synth.ParseArgs(strings.Fields("--backends 2 --backend-names a,b --rate 300 --seed 5 --queries-per-request 8 --keys 20000 --zipf 0.9 --mean-size 4096 --size-sigma 0.5"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{TopologyPath: tp, Topology: top, Synth: &o, Duration: d, Seed: 3, OutDir: filepath.Join(dir, "out"),
		SLO:   slo.Params{SLO: 50 * time.Millisecond, Step: time.Second, Window: 5 * time.Second, Warmup: 10 * time.Second},
		Epoch: time.Unix(1_000_000_000, 0)}
	if scen != "" {
		sp := filepath.Join(dir, "scenario.yaml")
		if err := os.WriteFile(sp, []byte(scen), 0o644); err != nil {
			t.Fatal(err)
		}
		sc, _, err := scenario.Load(sp, top.BackendNames(), d)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Scenario = sc
	}
	return cfg
}

func summary(t *testing.T, dir string) replay.Summary {
	t.Helper()
	var s replay.Summary
	b, err := os.ReadFile(filepath.Join(dir, "replay", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The generator in process gives the very run a trace file written by the
// same generator gives.
func TestSynthInProcessEqualsTraceFile(t *testing.T) {
	dir := t.TempDir()
	cfg := miniConfig(t, dir, 20*time.Second, "")
	g, err := synth.New(*cfg.Synth)
	if err != nil {
		t.Fatal(err)
	}
	tr := filepath.Join(dir, "trace.jsonl")
	f, err := os.Create(tr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(f, synth.Limit{Duration: 25 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	gen, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fromFile := cfg
	fromFile.Synth, fromFile.TracePath, fromFile.OutDir = nil, tr, filepath.Join(dir, "file")
	file, err := Run(fromFile)
	if err != nil {
		t.Fatal(err)
	}
	if gen.Requests != file.Requests || gen.Queries != file.Queries || gen.BackendQueries != file.BackendQueries {
		t.Fatalf("in process %d requests %d queries %d misses, from the file %d %d %d",
			gen.Requests, gen.Queries, gen.BackendQueries, file.Requests, file.Queries, file.BackendQueries)
	}
	a, b := summary(t, cfg.OutDir), summary(t, fromFile.OutDir)
	ja, _ := json.Marshal(a.SLO)
	jb, _ := json.Marshal(b.SLO)
	if !bytes.Equal(ja, jb) || a.Sent != b.Sent {
		t.Fatalf("the runs' SLO series differ: %s vs %s", ja[:200], jb[:200])
	}
}

// The miniature's hit ratios follow the exact simulation's (docs/simulator.md
// states the error): a 10% stratified key sample, a fifth of the requests,
// one app server standing for both.
func TestMiniatureHitRatiosFollowTheExactRun(t *testing.T) {
	dir := t.TempDir()
	exact := miniConfig(t, filepath.Join(dir), 60*time.Second, "")
	full, err := Run(exact)
	if err != nil {
		t.Fatal(err)
	}
	mini := exact
	mini.OutDir, mini.Sample, mini.RequestSample, mini.Apps = filepath.Join(dir, "mini"), 0.1, 0.2, 1
	m, err := Run(mini)
	if err != nil {
		t.Fatal(err)
	}
	if m.Engine != "miniature" || full.Engine != "exact" || m.AppsSimulated != 1 {
		t.Fatalf("engines %s, %s, apps %d", full.Engine, m.Engine, m.AppsSimulated)
	}
	t.Logf("hit ratios: miniature %v, exact %v; requests %d of %d", m.HitRatio, full.HitRatio, m.Requests, full.Requests)
	for _, b := range []string{"a", "b"} {
		if d := math.Abs(m.HitRatio[b] - full.HitRatio[b]); d > 0.04 {
			t.Errorf("backend %s: miniature hit ratio %.3f, exact %.3f", b, m.HitRatio[b], full.HitRatio[b])
		}
	}
	// A fifth of the requests, each with its whole fan-out.
	ratio := float64(m.Requests) / float64(full.Requests)
	if ratio < 0.17 || ratio > 0.23 {
		t.Errorf("the miniature simulated %.3f of the requests, not 0.2", ratio)
	}
	qpr := func(r *Result) float64 { return float64(r.Queries) / float64(r.Requests) }
	if math.Abs(qpr(m)-qpr(full)) > 0.3 {
		t.Errorf("queries per request: miniature %.2f, exact %.2f", qpr(m), qpr(full))
	}
	// Deterministic for its seed.
	again := mini
	again.OutDir = filepath.Join(dir, "again")
	if _, err := Run(again); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(filepath.Join(mini.OutDir, "replay", "summary.json"))
	y, _ := os.ReadFile(filepath.Join(again.OutDir, "replay", "summary.json"))
	if !bytes.Equal(x, y) {
		t.Error("two miniature runs with one seed differ")
	}
}

// A capacity drop below the miss load overloads the fluid queue: latencies
// reach the backend timeout, calls fail, and the backlog goes once the
// capacity is back.
func TestMiniatureOverloadAndRecovery(t *testing.T) {
	dir := t.TempDir()
	cfg := miniConfig(t, dir, 60*time.Second, `
events:
  - {kind: set, at: 20s, backend: b, set: {rate: 50}}
  - {kind: set, at: 40s, backend: b, set: {rate: 0}}
`)
	cfg.Sample, cfg.RequestSample = 0.2, 1
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Timeouts == 0 {
		t.Fatal("no call timed out while backend b served 50 queries/s")
	}
	s := summary(t, cfg.OutDir)
	var during, after float64
	for _, p := range s.SLO.Series {
		if p.P99 == nil {
			continue
		}
		switch {
		case p.TS > 30 && p.TS <= 40:
			during = math.Max(during, *p.P99)
		case p.TS > 50:
			after = math.Max(after, *p.P99)
		}
	}
	t.Logf("P99 during the drop %.0f ms, after %.0f ms, %d timeouts", during, after, res.Timeouts)
	if during < 900 || after > 100 {
		t.Errorf("P99 during the drop %.0f ms (want ≥ 900: the 1 s timeout), after it %.0f ms (want < 100)", during, after)
	}
}

func TestFluidServesItsRateWhenOverloaded(t *testing.T) {
	f := &fluid{mu: 100, lambda: 400, cap: 50, backlog: 50}
	rng := rand.New(rand.NewPCG(1, 1))
	n := 0
	for range 100000 {
		if f.served(rng) {
			n++
		}
	}
	if got := float64(n) / 100000; math.Abs(got-0.25) > 0.01 {
		t.Fatalf("an overloaded queue served %.3f of its arrivals, want µ/λ = 0.25", got)
	}
	f.backlog = 10 // not at its cap: everyone is answered
	if !f.served(rng) {
		t.Fatal("a queue below its cap timed a query out")
	}
	m := &miniature{rng: rng}
	if w := m.wait(&fluid{mu: 1000, lambda: 0, backlog: 200}); w != 200*time.Millisecond {
		t.Fatalf("a backlog of 200 at 1000/s waits %v, want 200ms", w)
	}
	if w := m.wait(&fluid{mu: math.Inf(1)}); w != 0 {
		t.Fatalf("an unlimited backend made a query wait %v", w)
	}
}

func TestMiniatureLimitsAreValidated(t *testing.T) {
	dir := t.TempDir()
	cfg := miniConfig(t, dir, 10*time.Second, "")
	cfg.Sample = 0.5
	s, m := startMini(t, cfg)
	_ = s
	bad := -1.0
	if err := m.applyLimits(m.keys[1].be, capacity.NewPatch(map[string]float64{capacity.FieldRate: float64(bad)})); err == nil {
		t.Fatal("a negative rate was applied")
	}
	if m.fluids[1].lim.Rate != 0 {
		t.Fatalf("a refused patch changed the limits: %+v", m.fluids[1].lim)
	}
	good := 200.0
	if err := m.applyLimits(m.keys[1].be, capacity.NewPatch(map[string]float64{capacity.FieldRate: float64(good)})); err != nil || m.fluids[1].mu != 200 {
		t.Fatalf("rate 200: %v, µ %v", err, m.fluids[1].mu)
	}
	cfg.RequestSample = 2
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "request-sample") {
		t.Fatalf("request sample 2: %v", err)
	}
	cfg.RequestSample, cfg.Apps = 0, 3
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "apps: 3") {
		t.Fatalf("3 of 2 app servers: %v", err)
	}
}

// startMini builds a miniature without running it.
func startMini(t *testing.T, cfg Config) (*Sim, *miniature) {
	t.Helper()
	top := cfg.Topology
	s := &Sim{cfg: cfg, cal: costmodel.DefaultCalibration(), eng: &Engine{}, byName: map[string]*backend{}, byID: map[uint32]*backend{},
		rng: rand.New(rand.NewPCG(1, 2)), appRng: rand.New(rand.NewPCG(1, 3))}
	maxID := uint32(0)
	for _, b := range top.Backends {
		be, err := s.newBackend(b)
		if err != nil {
			t.Fatal(err)
		}
		s.backends = append(s.backends, be)
		s.byName[b.Name], s.byID[b.ID] = be, be
		maxID = max(maxID, b.ID)
	}
	if err := s.buildApps(maxID); err != nil {
		t.Fatal(err)
	}
	m, err := s.newMiniature()
	if err != nil {
		t.Fatal(err)
	}
	s.mini = m
	return s, m
}

// A rate schedule (tracegen synth --rate-schedule, from a scenario's
// request_rate events) reaches the generated runs: twice the rate for half
// of the run is about 1.5 times the requests, in the exact run and in the
// miniature, whose cache streams and fluid backend load follow it too; the
// scenario's request_rate events change no backend.
func TestRateScheduleInProcess(t *testing.T) {
	dir := t.TempDir()
	const rr = "events:\n  - {kind: request_rate, at: 5s, factor: 2}\n  - {kind: request_rate, at: 15s, factor: 1}\n"
	run := func(name string, sched []synth.RateStep, mini bool) *Result {
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := miniConfig(t, sub, 20*time.Second, rr)
		o := *cfg.Synth
		o.RateSchedule = sched
		cfg.Synth, cfg.OutDir = &o, filepath.Join(dir, name, "out")
		if mini {
			cfg.Sample, cfg.RequestSample, cfg.Apps = 0.1, 0.2, 1
		}
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sched := []synth.RateStep{{At: 5 * time.Second, Factor: 2}, {At: 15 * time.Second, Factor: 1}}
	for _, mini := range []bool{false, true} {
		name := map[bool]string{false: "exact", true: "mini"}[mini]
		base, surge := run(name+"-base", nil, mini), run(name+"-surge", sched, mini)
		t.Logf("%s: requests %d → %d, backend queries %d → %d, cache accesses %d → %d", name, base.Requests, surge.Requests,
			base.BackendQueries, surge.BackendQueries, base.CacheAccesses, surge.CacheAccesses)
		if r := float64(surge.Requests) / float64(base.Requests); r < 1.4 || r > 1.6 {
			t.Errorf("%s: %d requests with the surge, %d without (×%.2f, want about 1.5)", name, surge.Requests, base.Requests, r)
		}
		if r := float64(surge.BackendQueries) / float64(base.BackendQueries); r < 1.3 {
			t.Errorf("%s: %d backend queries with the surge, %d without", name, surge.BackendQueries, base.BackendQueries)
		}
		// The miniature's cache streams run at the rate of the moment.
		if r := float64(surge.CacheAccesses) / float64(base.CacheAccesses); mini && (r < 1.4 || r > 1.6) {
			t.Errorf("mini: %d cache-stream accesses with the surge, %d without (×%.2f)", surge.CacheAccesses, base.CacheAccesses, r)
		}
	}
}
