package zoo

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// inputs are the demo's backends (loads as its trace gives them), one
// rate-limited and one too idle to draw.
func inputs(duration time.Duration) Inputs {
	l := config.Limits{Workers: 8, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}
	limited := l
	limited.Rate = 500
	return Inputs{Backends: []Backend{
		{Name: "catalog", Limits: l, Load: 241.06, QueryRate: 900, ConfiguredMB: 40},
		{Name: "reviews", Limits: l, Load: 106.23, QueryRate: 400, ConfiguredMB: 40},
		{Name: "recommend", Limits: limited, Load: 100.53, QueryRate: 380, ConfiguredMB: 40},
		{Name: "ratings", Limits: l, Load: 87.92, QueryRate: 350, ConfiguredMB: 40},
		{Name: "idle", Limits: l, Load: 0.2, QueryRate: 3, ConfiguredMB: 40},
	}, AppServer: "app0", Duration: duration, Warmup: 30 * time.Second, SLOLatency: 150 * time.Millisecond}
}

func names(in Inputs) []string {
	var out []string
	for _, b := range in.Backends {
		out = append(out, b.Name)
	}
	return out
}

func byName(in Inputs, name string) Backend {
	for _, b := range in.Backends {
		if b.Name == name {
			return b
		}
	}
	return Backend{}
}

// events strips the comment block: what the scenario does.
func events(yaml string) string {
	var out []string
	for _, l := range strings.Split(yaml, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestDeterministic(t *testing.T) {
	in := inputs(145 * time.Second)
	for _, fam := range append([]string{""}, Families...) {
		a, err := Generate(in, 17, fam)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(in, 17, fam)
		if a.YAML != b.YAML || a.Family != b.Family {
			t.Fatalf("family %q: the same seed gave different scenarios", fam)
		}
		differ := 0
		for seed := uint64(18); seed < 23; seed++ {
			c, _ := Generate(in, seed, a.Family)
			if events(c.YAML) != events(a.YAML) {
				differ++
			}
		}
		if differ < 4 {
			t.Errorf("family %s: only %d of 5 other seeds draw other events", a.Family, differ)
		}
	}
}

// Without a family the seed draws one, uniformly: every family comes up,
// and naming the family a seed draws gives the same scenario.
func TestFamilyDraw(t *testing.T) {
	in := inputs(145 * time.Second)
	count := map[string]int{}
	for seed := uint64(1); seed <= 400; seed++ {
		sc, err := Generate(in, seed, "")
		if err != nil {
			t.Fatal(err)
		}
		count[sc.Family]++
		if seed <= 40 {
			named, _ := Generate(in, seed, sc.Family)
			if named.YAML != sc.YAML {
				t.Fatalf("seed %d: --family %s differs from the drawn family", seed, sc.Family)
			}
		}
		if !strings.Contains(sc.YAML, "\n# family: "+sc.Family+"\n") {
			t.Fatalf("seed %d: no family line:\n%s", seed, sc.YAML)
		}
	}
	for _, f := range Families {
		// 50 expected of 400; 5 standard deviations below is 15.
		if count[f] < 15 {
			t.Errorf("family %s drawn %d times of 400: %v", f, count[f], count)
		}
	}
}

// Every family, for 50 seeds and a short and a long run: the scenario
// validates against the backends and the run with no warning, every event
// lies between the warm-up and EndMargin before the end, the idle backend
// is never drawn, and each family's shape holds.
func TestEveryFamilyValidates(t *testing.T) {
	for _, dur := range []time.Duration{75 * time.Second, 145 * time.Second, 30 * time.Minute} {
		in := inputs(dur)
		last := int((dur - EndMargin).Seconds())
		for _, fam := range Families {
			for seed := uint64(1); seed <= 50; seed++ {
				sc, err := Generate(in, seed, fam)
				if err != nil {
					t.Fatalf("%v %s seed %d: %v", dur, fam, seed, err)
				}
				parsed, warns, err := scenario.Parse("g.yaml", []byte(sc.YAML), names(in), dur)
				if err != nil || len(warns) > 0 {
					t.Fatalf("%v %s seed %d: %v %v\n%s", dur, fam, seed, err, warns, sc.YAML)
				}
				for _, e := range sc.events {
					lo, hi := e.time(), e.time()
					if e.kind == scenario.KindRamp || e.kind == scenario.KindRandomWalk {
						hi = e.end
					}
					if lo < 30 || hi > last || hi < lo {
						t.Fatalf("%v %s seed %d: event %+v outside [30, %d]\n%s", dur, fam, seed, e, last, sc.YAML)
					}
					if e.backend == "idle" {
						t.Fatalf("%s seed %d: the idle backend was drawn", fam, seed)
					}
				}
				checkShape(t, in, sc, parsed)
			}
		}
	}
}

func checkShape(t *testing.T, in Inputs, sc *Scenario, parsed *scenario.Scenario) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s seed %d: "+format+"\n%s", append(append([]any{sc.Family, sc.Seed}, args...), sc.YAML)...)
	}
	kinds := map[scenario.Kind]int{}
	ramps := map[string]event{}
	sets := map[string][]event{}
	for _, e := range sc.events {
		kinds[e.kind]++
		switch e.kind {
		case scenario.KindRamp:
			b := byName(in, e.backend)
			depth := e.to / b.Load
			if b.Limits.Rate == 0 && (depth < DropDepth[0]-0.01 || depth > DropDepth[1]+0.01 || e.from < e.to) {
				fail("ramp of %s to %v: depth %v", e.backend, e.to, depth)
			}
			if b.Limits.Rate > 0 && (e.from != b.Limits.Rate || e.to > b.Limits.Rate) {
				fail("ramp of rate-limited %s from %v to %v", e.backend, e.from, e.to)
			}
			ramps[e.backend] = e
		case scenario.KindSet:
			sets[e.backend] = append(sets[e.backend], e)
			if e.field == config.FieldRate && e.value != byName(in, e.backend).Limits.Rate && sc.Family != FamilyFlapping {
				fail("%s recovers to %v, not its initial rate", e.backend, e.value)
			}
		}
	}
	// A recovery comes after its ramp's end.
	for b, r := range ramps {
		for _, s := range sets[b] {
			if s.field == config.FieldRate && s.at <= r.end {
				fail("%s recovers at %d, before its ramp ends at %d", b, s.at, r.end)
			}
		}
	}
	switch sc.Family {
	case FamilyDrop, FamilyPopularDrop:
		if kinds[scenario.KindRamp] != 1 || kinds[scenario.KindSet] != 1 {
			fail("kinds %v", kinds)
		}
		if sc.Family == FamilyPopularDrop {
			if _, ok := ramps["catalog"]; !ok {
				fail("the most queried backend (catalog) did not drop")
			}
		}
		for _, r := range ramps {
			if hold := sets[r.backend][0].at - r.end; r.end-r.start > DropRampS[1] || hold > DropHoldS[1] {
				fail("ramp %d s, hold %d s", r.end-r.start, hold)
			}
		}
	case FamilyOverlap:
		if n := kinds[scenario.KindRamp]; n < 2 || n > 3 || kinds[scenario.KindSet] != n {
			fail("kinds %v", kinds)
		}
		// The first drop: every other starts before it recovers.
		first := false
		for _, f := range ramps {
			all := true
			for _, r := range ramps {
				all = all && r.start >= f.start && r.start < sets[f.backend][0].at
			}
			first = first || all
		}
		if !first {
			fail("no drop overlaps every other")
		}
	case FamilyDropRecoverDrop:
		if kinds[scenario.KindRamp] != 2 || len(ramps) != 2 {
			fail("kinds %v", kinds)
		}
		var rs []event
		for _, r := range ramps {
			rs = append(rs, r)
		}
		if rs[0].start > rs[1].start {
			rs[0], rs[1] = rs[1], rs[0]
		}
		if sets[rs[0].backend][0].at >= rs[1].start {
			fail("the second drop starts before the first recovers")
		}
	case FamilyRamp:
		if n := kinds[scenario.KindRamp]; n < 1 || n > 2 {
			fail("kinds %v", kinds)
		}
	case FamilyRandomWalk:
		if parsed.Seed == nil || *parsed.Seed != sc.Seed {
			fail("no top-level seed")
		}
		if n := kinds[scenario.KindRandomWalk]; n < 2 || n > 4 {
			fail("%d walks", n)
		}
		for _, e := range sc.events {
			if e.kind != scenario.KindRandomWalk {
				continue
			}
			b := byName(in, e.backend)
			if e.min > b.Load || e.max < b.Load || e.initial != e.max || e.step <= 0 {
				fail("walk of %s: %+v against a load of %v", e.backend, e, b.Load)
			}
		}
	case FamilySlowOffPath:
		slowed := ""
		for _, e := range sc.events {
			if e.field == config.FieldExtraLatencyMs && e.value > byName(in, e.backend).Limits.ExtraLatencyMs {
				slowed = e.backend
				b := byName(in, e.backend)
				capacity := float64(b.Limits.Workers) * 1000 / (e.value + b.Limits.HiccupProb*b.Limits.HiccupMs)
				if e.value > SlowSLOShare[1]*150+0.05 || b.Load/capacity > SlowUtilization[1]+0.01 {
					fail("%s slowed to %v ms: utilization %v", e.backend, e.value, b.Load/capacity)
				}
			}
		}
		if _, dropped := ramps[slowed]; slowed == "" || dropped || len(ramps) != 1 || len(sets[slowed]) != 2 {
			fail("slowed %q, ramps %v", slowed, ramps)
		}
	case FamilyFlapping:
		if len(sets) != 1 || kinds[scenario.KindSet] < 4 || kinds[scenario.KindSet]%2 != 0 || len(kinds) != 1 {
			fail("kinds %v on %d backends", kinds, len(sets))
		}
		for _, evs := range sets {
			b := byName(in, evs[0].backend)
			for i, e := range evs {
				depth := e.value / b.Load
				down := i%2 == 0
				if down && (depth < DropDepth[0]-0.01 || depth > DropDepth[1]+0.01) || !down && e.value != b.Limits.Rate {
					fail("flap %d of %s: rate %v (load %v)", i, b.Name, e.value, b.Load)
				}
				if i >= 2 && e.at-evs[i-2].at != evs[2].at-evs[0].at {
					fail("flaps are not periodic: %+v", evs)
				}
			}
		}
	case FamilyRequestRate:
		rs := parsed.RateSchedule()
		if len(rs) != 2 || rs[0].Factor < RateFactor[0] || rs[0].Factor > RateFactor[1] || rs[1].Factor != 1 {
			fail("schedule %+v", rs)
		}
		for _, r := range ramps {
			if r.start >= int(rs[1].At.Seconds()) {
				fail("the drop starts after the rise")
			}
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	in := inputs(145 * time.Second)
	if _, err := Generate(in, 1, "spike"); err == nil || !strings.Contains(err.Error(), `family: "spike" is not one of drop, overlap,`) {
		t.Fatal(err)
	}
	short := inputs(65 * time.Second)
	if _, err := Generate(short, 1, ""); err == nil || !strings.Contains(err.Error(), "duration: 1m5s leaves 25s between the warm-up (30s) and the last 10s; the zoo needs at least 30s") {
		t.Fatal(err)
	}
	late := inputs(145 * time.Second)
	late.Warmup = 145 * time.Second
	if _, err := Generate(late, 1, ""); err == nil || !strings.Contains(err.Error(), "warmup: 2m25s is not within the run") {
		t.Fatal(err)
	}
	idle := inputs(145 * time.Second)
	idle.Backends = idle.Backends[4:]
	if _, err := Generate(idle, 1, ""); err == nil || !strings.Contains(err.Error(), "no backend has a miss load of at least 1") {
		t.Fatal(err)
	}
	one := inputs(145 * time.Second)
	one.Backends = one.Backends[3:]
	if _, err := Generate(one, 1, FamilyOverlap); err == nil || !strings.Contains(err.Error(), "family overlap: needs 2 backends with a miss load") {
		t.Fatal(err)
	}
	if sc, err := Generate(one, 1, FamilyDrop); err != nil || !strings.Contains(sc.YAML, "backend: ratings") {
		t.Fatalf("one backend can drop: %v", err)
	}
}

// Load measures the loads from a trace under the topology's configured
// allocation and takes the warm-up and SLO from the topology.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	o := synth.DefaultOptions()
	o.Names, o.Backends, o.Rate, o.Keys.Default, o.MeanSize.Default = []string{"a", "b"}, 2, 100, 2000, 8192
	g, err := synth.New(o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := g.Write(&buf, synth.Limit{Duration: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	tr := filepath.Join(dir, "t.jsonl")
	os.WriteFile(tr, buf.Bytes(), 0o644)
	topoPath := filepath.Join(dir, "topology.yaml")
	os.WriteFile(topoPath, []byte(`backends:
  - {id: 0, name: a, type: kv, limits: {rate: 5000}, replicas: [{grpc: "127.0.0.1:1", http: "127.0.0.1:6"}]}
  - {id: 1, name: b, type: kv, replicas: [{grpc: "127.0.0.1:2", http: "127.0.0.1:7"}]}
  - {id: 2, name: c, type: kv, replicas: [{grpc: "127.0.0.1:8", http: "127.0.0.1:9"}]}
app_servers:
  - {id: app0, http: "127.0.0.1:3", cache_budget_mb: 24, partitions: {a: "127.0.0.1:4", b: "127.0.0.1:5", c: "127.0.0.1:10"},
     controller: {min_partition_mb: 8}}
slo: {latency: 80ms, warmup: 5s}
`), 0o644)
	topo, err := config.LoadTopology(topoPath)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Load(topo, tr, 20*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if in.Warmup != 5*time.Second || in.SLOLatency != 80*time.Millisecond || in.AppServer != "app0" || len(in.Backends) != 3 {
		t.Fatalf("%+v", in)
	}
	a, c := in.Backends[0], in.Backends[2]
	if a.Limits.Rate != 5000 || a.ConfiguredMB != 8 || !(a.Load > 10 && a.Load < a.QueryRate) || c.Load != 0 {
		t.Fatalf("a %+v, c %+v", a, c)
	}
	if math.Abs(a.QueryRate+in.Backends[1].QueryRate-100*synth.DefaultQueriesPerRequest) > 0.1*100*synth.DefaultQueriesPerRequest {
		t.Fatalf("query rates %v + %v, want about %v", a.QueryRate, in.Backends[1].QueryRate, 100*synth.DefaultQueriesPerRequest)
	}
	if _, err := Load(topo, tr, 20*time.Second, "app9"); err == nil || !strings.Contains(err.Error(), `--app-server: no partitioned app server "app9"`) {
		t.Fatal(err)
	}
	if _, err := Load(topo, filepath.Join(dir, "missing.jsonl"), 20*time.Second, ""); err == nil || !strings.Contains(err.Error(), "--trace:") {
		t.Fatal(err)
	}
}
