package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/feasibility"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/zoo"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// zooSetup writes a small trace and a topology with a partitioned app
// server over four backends.
func zooSetup(t *testing.T) (dir, topo string, synthArgs []string) {
	t.Helper()
	dir = t.TempDir()
	synthArgs = []string{"--duration", "100s", "--rate", "60", "--backends", "4", "--backend-names", "a,b,c,d",
		"--keys", "2000", "--mean-size", "8192", "--queries-per-request", "8", "--seed", "3"}
	if code, _, stderr := tg(append([]string{"synth", "--out", filepath.Join(dir, "t.jsonl")}, synthArgs...)...); code != 0 {
		t.Fatal(stderr)
	}
	topo = filepath.Join(dir, "topology.yaml")
	var b strings.Builder
	b.WriteString("backends:\n")
	for i, n := range []string{"a", "b", "c", "d"} {
		fmt.Fprintf(&b, "  - {id: %d, name: %s, type: kv, limits: {workers: 4, extra_latency_ms: 2}, replicas: [{grpc: \"127.0.0.1:%d\", http: \"127.0.0.1:%d\"}]}\n",
			i, n, 10+i, 20+i)
	}
	b.WriteString(`app_servers:
  - {id: app0, http: "127.0.0.1:3", cache_budget_mb: 40, partitions: {a: "127.0.0.1:4", b: "127.0.0.1:5", c: "127.0.0.1:6", d: "127.0.0.1:7"},
     controller: {min_partition_mb: 8}}
slo: {latency: 100ms, warmup: 20s}
`)
	if err := os.WriteFile(topo, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, topo, synthArgs
}

// scenario generate draws a valid scenario, the same bytes for the same
// seed; scenario check --json prints the class that the package functions
// give for it (with the request-rate family, against a trace synthesized
// with its --rate-schedule).
func TestScenarioGenerateAndCheck(t *testing.T) {
	dir, topo, synthArgs := zooSetup(t)
	trace := filepath.Join(dir, "t.jsonl")
	gen := func(seed, family string) string {
		t.Helper()
		args := []string{"scenario", "generate", "--topology", topo, "--trace", trace, "--duration", "100s", "--seed", seed}
		if family != "" {
			args = append(args, "--family", family)
		}
		code, out, stderr := tg(args...)
		if code != 0 {
			t.Fatalf("generate %s %s: %s", seed, family, stderr)
		}
		return out
	}
	if a, b := gen("5", ""), gen("5", ""); a != b || a == gen("6", "") {
		t.Fatal("generate is not deterministic by seed")
	}
	topology, err := config.LoadTopology(topo)
	if err != nil {
		t.Fatal(err)
	}
	textChecked := map[feasibility.Class]bool{}
	for _, fam := range zoo.Families {
		path := filepath.Join(dir, fam+".yaml")
		if code, _, stderr := tg("scenario", "generate", "--topology", topo, "--trace", trace, "--duration", "100s",
			"--seed", "11", "--family", fam, "--out", path); code != 0 {
			t.Fatalf("%s: %s", fam, stderr)
		}
		sc, warns, err := scenario.Load(path, topology.BackendNames(), 100*time.Second)
		if err != nil || len(warns) > 0 {
			t.Fatalf("%s: %v %v", fam, err, warns)
		}
		tr := trace
		if rs := sc.RateSchedule(); len(rs) > 0 {
			tr = filepath.Join(dir, fam+".jsonl")
			if code, _, stderr := tg(append([]string{"synth", "--out", tr, "--rate-schedule", scenario.RateScheduleSpec(rs)}, synthArgs...)...); code != 0 {
				t.Fatal(stderr)
			}
		}
		code, out, stderr := tg("scenario", "check", path, "--topology", topo, "--duration", "100s", "--trace", tr, "--json")
		if code != 0 || strings.Contains(stderr, "warning") {
			t.Fatalf("%s: check: %d %s", fam, code, stderr)
		}
		var doc struct {
			Class  string   `json:"class"`
			Worst  *float64 `json:"worst_utilization"`
			Phases []struct {
				Factor float64 `json:"request_rate_factor"`
			} `json:"phases"`
		}
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc); err != nil {
			t.Fatalf("%s: %v %s", fam, err, out)
		}
		// The same analysis through the packages.
		changes, err := sc.Expand(100*time.Second, *seedOf(sc, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := feasibility.Analyse(feasibility.Input{Topology: topology, TracePath: tr, Duration: 100 * time.Second,
			Changes: changes, Rates: sc.RateSchedule()}, feasibility.Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, class, worst := rep.Results, rep.Class, rep.Worst
		if doc.Class != string(class) || doc.Worst == nil || *doc.Worst != worst || len(doc.Phases) != len(res) {
			t.Fatalf("%s: check prints %s %v (%d phases), the packages give %s %v (%d)", fam, doc.Class, doc.Worst, len(doc.Phases), class, worst, len(res))
		}
		if fam == zoo.FamilyRequestRate && !(doc.Phases[1].Factor > 1) {
			t.Fatalf("request-rate: phase factors %+v", doc.Phases)
		}
		// The text report says it too (once per class: the rest is the same report).
		if textChecked[class] {
			continue
		}
		textChecked[class] = true
		if _, text, _ := tg("scenario", "check", path, "--topology", topo, "--duration", "100s", "--trace", tr); !strings.Contains(text, "\nclass: "+string(class)+" (") {
			t.Fatalf("%s: text report:\n%s", fam, text)
		}
	}
	// --json: the drawn parameters and the scenario.
	code, out, _ := tg("scenario", "generate", "--topology", topo, "--trace", trace, "--duration", "100s", "--seed", "5", "--json")
	var g zoo.Scenario
	if code != 0 || json.Unmarshal([]byte(out), &g) != nil || g.Seed != 5 || g.YAML != gen("5", "") || len(g.Params) == 0 {
		t.Fatalf("--json: %d %s", code, out)
	}
}

func seedOf(sc *scenario.Scenario, def uint64) *uint64 {
	if sc.Seed != nil {
		return sc.Seed
	}
	return &def
}

// A scenario with request_rate events checked against a trace that does
// not carry them gets a warning; bad generate flags are named.
func TestScenarioGenerateErrorsAndUncarriedRates(t *testing.T) {
	dir, topo, _ := zooSetup(t)
	trace := filepath.Join(dir, "t.jsonl")
	sc := filepath.Join(dir, "rr.yaml")
	os.WriteFile(sc, []byte("events:\n  - {kind: request_rate, at: 30s, factor: 2}\n  - {kind: request_rate, at: 60s, factor: 1}\n"), 0o644)
	code, out, stderr := tg("scenario", "check", sc, "--topology", topo, "--duration", "100s", "--trace", trace)
	if code != 0 || !strings.Contains(out, "ok: 2 events (0 set, 0 ramp, 0 random_walk, 2 request_rate)") ||
		!strings.Contains(out, "request rate") || !strings.Contains(stderr, "warning: 30s–1m0s: the scenario's request rate is ×2, but the trace's query rate there is not: was it synthesized with --rate-schedule 30s:2,1m0s:1?") {
		t.Fatalf("%d\n%s\n%s", code, out, stderr)
	}
	base := []string{"scenario", "generate", "--topology", topo, "--trace", trace, "--duration", "100s"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{base, "--seed is required"},
		{[]string{"scenario", "generate", "--seed", "1"}, "--topology is required"},
		{append(base, "--seed", "1", "--family", "spike"), `--family: "spike" is not one of drop, overlap, drop-recover-drop, ramp, random-walk, slow-off-path, popular-drop, request-rate`},
		{append(base, "--seed", "1", "--app-server", "app9"), `--app-server: no partitioned app server "app9"`},
		{append(base, "--seed", "1", "--warmup", "100s"), "--warmup: 1m40s is not shorter than --duration 1m40s"},
		{append(base, "--seed", "1", "--warmup", "70s"), "duration: 1m40s leaves 20s between the warm-up (1m10s)"},
		{append(base[:len(base)-2], "--duration", "0s", "--seed", "1"), "--duration: 0s must be positive"},
		{append(base, "--seed", "0"), "--seed: 0 is outside the zoo's seeds (development 1-999, evaluation 1000-1999)"},
		{append(base, "--seed", "2000"), "--seed: 2000 is outside the zoo's seeds"},
		{[]string{"scenario", "frobnicate"}, "Usage: tracegen scenario check"},
	} {
		code, _, stderr := tg(c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %d %q, want %q", c.args, code, stderr, c.want)
		}
	}
	// replay --rate would drop the trace's request-rate changes.
	code, _, stderr = tg("replay", "--topology", topo, "--trace", trace, "--out", filepath.Join(dir, "out"), "--rate", "50",
		"--duration", "5s", "--scenario", sc)
	if code != 1 || !strings.Contains(stderr, "--rate: the scenario's request_rate events (line 2) are carried by the trace's ts_ms") {
		t.Fatalf("replay --rate: %d %s", code, stderr)
	}
}
