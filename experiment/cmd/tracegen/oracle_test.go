package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/schema"
)

// oracleFixture writes a two-backend trace, a topology with two app
// servers and a scenario that throttles a for 10 s.
func oracleFixture(t *testing.T) (dir, tr, topo, sc string) {
	t.Helper()
	dir = t.TempDir()
	tr = filepath.Join(dir, "t.jsonl")
	if code, _, stderr := tg("synth", "--out", tr, "--duration", "40s", "--rate", "200", "--backends", "2",
		"--backend-names", "a,b", "--keys", "2000", "--mean-size", "8192", "--seed", "3"); code != 0 {
		t.Fatal(stderr)
	}
	topo = filepath.Join(dir, "topology.yaml")
	os.WriteFile(topo, []byte(`backends:
  - {id: 0, name: a, type: kv, limits: {workers: 8, extra_latency_ms: 3, hiccup_prob: 0.01, hiccup_ms: 25}, replicas: [{grpc: "127.0.0.1:1", http: "127.0.0.1:6"}]}
  - {id: 1, name: b, type: sql, limits: {workers: 8, extra_latency_ms: 3, hiccup_prob: 0.01, hiccup_ms: 25}, replicas: [{grpc: "127.0.0.1:2", http: "127.0.0.1:7"}]}
app_servers:
  - {id: app0, http: "127.0.0.1:3", cache_budget_mb: 32, partitions: {a: "127.0.0.1:4", b: "127.0.0.1:5"}, controller: {min_partition_mb: 8}}
  - {id: app1, http: "127.0.0.1:8", cache_budget_mb: 32, partitions: {a: "127.0.0.1:9", b: "127.0.0.1:10"}, controller: {min_partition_mb: 8}}
slo: {latency: 150ms, step: 2s, window: 10s, warmup: 10s}
`), 0o644)
	sc = filepath.Join(dir, "s.yaml")
	os.WriteFile(sc, []byte(`events:
  - {kind: set, at: 20s, backend: a, set: {rate: 1}}
  - {kind: set, at: 30s, backend: a, set: {rate: 0}}
`), 0o644)
	return dir, tr, topo, sc
}

// tracegen oracle writes, for every partitioned app server, the schedule
// with foresight and the reactive one: each step an allocation of the
// budget (floors kept), starting at 0, in time order, with the predicted
// violations; the scenario's analysis beside them. scenario check --trace
// reports the same analysis.
func TestOracleCommand(t *testing.T) {
	dir, tr, topo, sc := oracleFixture(t)
	out := filepath.Join(dir, "oracle.json")
	if code, _, stderr := tg("oracle", "--topology", topo, "--trace", tr, "--duration", "40s", "--scenario", sc, "--out", out, "--series"); code != 0 {
		t.Fatal(stderr)
	}
	type step struct {
		At float64        `json:"at_s"`
		MB map[string]int `json:"mb"`
	}
	type sched struct {
		Steps  []step           `json:"steps"`
		Pct    *float64         `json:"predicted_violation_pct"`
		Series []map[string]any `json:"series"`
	}
	var doc struct {
		Schedules map[string]map[string]sched `json:"app_server_schedules"`
		Class     string                      `json:"class"`
		AppS      int                         `json:"app_servers"`
		Phases    []map[string]any            `json:"phases"`
		ConfPct   *float64                    `json:"configured_predicted_violation_pct"`
		Cands     map[string][]struct {
			Name  string `json:"name"`
			Steps []step `json:"steps"`
		} `json:"app_server_candidates"`
	}
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	checkSchema(t, b)
	if doc.AppS != 2 || len(doc.Phases) != 3 || doc.Class == "" || doc.ConfPct == nil || len(doc.Schedules) != 2 {
		t.Fatalf("%s", b)
	}
	for app, vs := range doc.Schedules {
		for _, v := range []string{"foresight", "reactive"} {
			s, ok := vs[v]
			if !ok || len(s.Steps) == 0 || s.Steps[0].At != 0 || s.Pct == nil || len(s.Series) == 0 {
				t.Fatalf("%s %s: %+v", app, v, s)
			}
			for i, st := range s.Steps {
				if st.MB["a"]+st.MB["b"] != 32 || st.MB["a"] < 8 || st.MB["b"] < 8 || (i > 0 && st.At <= s.Steps[i-1].At) {
					t.Fatalf("%s %s step %d: %+v", app, v, i, s.Steps)
				}
			}
		}
		// The candidates a judge chooses the oracle's schedule from: the model's pick first.
		if cs := doc.Cands[app]; len(cs) < 2 || cs[0].Name != "model-pick" || fmt.Sprint(cs[0].Steps) != fmt.Sprint(vs["foresight"].Steps) {
			t.Fatalf("%s: candidates %+v", app, cs)
		}
		// Every app server names the same candidates in the same order (a judge runs them by name).
		var names []string
		for _, c := range doc.Cands[app] {
			names = append(names, c.Name)
		}
		if first := doc.Cands["app0"]; app != "app0" && len(first) > 0 {
			var want []string
			for _, c := range first {
				want = append(want, c.Name)
			}
			if fmt.Sprint(names) != fmt.Sprint(want) {
				t.Fatalf("%s names the candidates %v, app0 %v", app, names, want)
			}
		}
		// With foresight, never predicted worse than reacting.
		if *vs["foresight"].Pct > *vs["reactive"].Pct+1e-9 {
			t.Fatalf("%s: foresight %v%% > reactive %v%%", app, *vs["foresight"].Pct, *vs["reactive"].Pct)
		}
	}
	// scenario check --trace: the same class, and the schedule with foresight.
	code, text, stderr := tg("scenario", "check", sc, "--topology", topo, "--duration", "40s", "--trace", tr, "--json")
	if code != 0 {
		t.Fatal(stderr)
	}
	var check struct {
		Class    string `json:"class"`
		Variant  string `json:"variant"`
		Schedule sched  `json:"schedule"`
	}
	if err := json.Unmarshal([]byte(text[strings.Index(text, "{"):]), &check); err != nil {
		t.Fatal(err)
	}
	if check.Class != doc.Class || check.Variant != "foresight" || *check.Schedule.Pct != *doc.Schedules["app0"]["foresight"].Pct {
		t.Fatalf("check %+v vs oracle %+v", check, doc.Schedules["app0"]["foresight"])
	}
	if code, text, _ := tg("scenario", "check", sc, "--topology", topo, "--duration", "40s", "--trace", tr); code != 0 || !strings.Contains(text, "transient model, 150 ms SLO") {
		t.Fatalf("%s", text)
	}
}

// --feasible-only: on an infeasible run the file has the class and the
// phases and no schedule, and says why; on a feasible one it is the file
// written without the flag, byte for byte.
func TestOracleFeasibleOnly(t *testing.T) {
	dir, tr, topo, sc := oracleFixture(t)
	calm := filepath.Join(dir, "calm.yaml")
	os.WriteFile(calm, []byte("events: []\n"), 0o644)
	for _, c := range []struct {
		scenario, class string
	}{{sc, "infeasible"}, {calm, ""}} {
		with, without := filepath.Join(dir, "with.json"), filepath.Join(dir, "without.json")
		common := []string{"oracle", "--topology", topo, "--trace", tr, "--duration", "40s", "--scenario", c.scenario}
		if code, _, stderr := tg(append(common, "--out", with, "--feasible-only")...); code != 0 {
			t.Fatal(stderr)
		}
		b, _ := os.ReadFile(with)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		checkSchema(t, b)
		if c.class == "infeasible" {
			if doc["class"] != "infeasible" || len(doc["phases"].([]any)) != 3 || doc["schedules_skipped"] == nil ||
				doc["app_server_candidates"] != nil || fmt.Sprint(doc["app_server_schedules"]) != "map[app0:map[] app1:map[]]" {
				t.Fatalf("%s", b)
			}
			continue
		}
		if doc["class"] == "infeasible" {
			t.Fatalf("the calm run is infeasible: %s", b)
		}
		if code, _, stderr := tg(append(common, "--out", without)...); code != 0 {
			t.Fatal(stderr)
		}
		if b2, _ := os.ReadFile(without); string(b) != string(b2) {
			t.Fatalf("--feasible-only changed a feasible run's file:\n%s\n%s", b, b2)
		}
	}
}

// checkSchema fails the test unless b, a file tracegen oracle wrote, is what
// schema/oracle.schema.yaml describes (what its readers check it against).
func checkSchema(t *testing.T, b []byte) {
	t.Helper()
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Default().Read(schema.Oracle, doc, ""); err != nil {
		t.Fatalf("tracegen oracle wrote a file its schema refuses: %v", err)
	}
}

// Bad input is named and nothing is written.
func TestOracleCommandErrors(t *testing.T) {
	dir, tr, topo, sc := oracleFixture(t)
	out := filepath.Join(dir, "oracle.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--topology", topo, "--trace", tr, "--out", out}, "--duration is required"},
		{[]string{"--topology", topo, "--trace", tr, "--duration", "40s", "--variants", "psychic", "--out", out}, `"psychic" is not foresight or reactive`},
		{[]string{"--topology", topo, "--trace", filepath.Join(dir, "nope"), "--duration", "40s", "--out", out}, "nope"},
		{[]string{"--topology", topo, "--trace", tr, "--duration", "40s", "--scenario", tr, "--out", out}, "t.jsonl"},
		{[]string{"--topology", topo, "--trace", sc, "--duration", "40s", "--out", out}, "s.yaml"},
	} {
		code, _, stderr := tg(append([]string{"oracle"}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want %q", c.args, code, stderr, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v: wrote %s", c.args, out)
		}
	}
}
