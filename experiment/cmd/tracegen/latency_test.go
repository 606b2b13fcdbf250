package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scenario check --trace predicts, per phase, the request P99 of the
// oracle's and the configured allocation against the topology's SLO: an
// overloaded phase has none (null), the others a finite one; --lookahead
// keeps every allocation whole.
func TestScenarioCheckLatency(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.jsonl")
	if code, _, stderr := tg("synth", "--out", tr, "--duration", "30s", "--rate", "200", "--backends", "2",
		"--backend-names", "a,b", "--keys", "2000", "--mean-size", "8192", "--seed", "3"); code != 0 {
		t.Fatal(stderr)
	}
	topo := filepath.Join(dir, "topology.yaml")
	os.WriteFile(topo, []byte(`backends:
  - {id: 0, name: a, type: kv, limits: {rate: 5000, extra_latency_ms: 3, hiccup_prob: 0.01, hiccup_ms: 25}, replicas: [{grpc: "127.0.0.1:1", http: "127.0.0.1:6"}]}
  - {id: 1, name: b, type: sql, limits: {rate: 5000, extra_latency_ms: 3, hiccup_prob: 0.01, hiccup_ms: 25}, replicas: [{grpc: "127.0.0.1:2", http: "127.0.0.1:7"}]}
app_servers:
  - {id: app0, http: "127.0.0.1:3", cache_budget_mb: 32, partitions: {a: "127.0.0.1:4", b: "127.0.0.1:5"},
     controller: {min_partition_mb: 8}}
slo: {latency: 150ms}
`), 0o644)
	sc := filepath.Join(dir, "s.yaml")
	os.WriteFile(sc, []byte(`events:
  - {kind: set, at: 10s, backend: a, set: {rate: 1}}
  - {kind: set, at: 20s, backend: a, set: {rate: 5000}}
`), 0o644)
	type phase struct {
		Oracle     map[string]int `json:"oracle_mb"`
		MinMax     map[string]int `json:"min_max_mb"`
		OracleP99  *float64       `json:"oracle_predicted_p99_ms"`
		ConfP99    *float64       `json:"configured_predicted_p99_ms"`
		Meets      *bool          `json:"oracle_meets_slo"`
		OracleUtil float64        `json:"oracle_predicted_utilization"`
	}
	var doc struct {
		SLO    float64 `json:"slo_ms"`
		Phases []phase `json:"phases"`
	}
	for _, extra := range [][]string{nil, {"--lookahead"}} {
		args := append([]string{"scenario", "check", sc, "--topology", topo, "--duration", "30s", "--trace", tr, "--json"}, extra...)
		code, out, stderr := tg(args...)
		if code != 0 {
			t.Fatal(stderr)
		}
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.SLO != 150 || len(doc.Phases) != 3 {
			t.Fatalf("%s", out)
		}
		for i, p := range doc.Phases {
			if p.Oracle["a"]+p.Oracle["b"] != 32 || p.Oracle["a"] < 8 || p.Oracle["b"] < 8 || p.MinMax["a"]+p.MinMax["b"] != 32 {
				t.Fatalf("phase %d: %+v", i, p)
			}
			overloaded := i == 1 // a at 1 query/s
			if overloaded != (p.OracleP99 == nil) || overloaded != (p.ConfP99 == nil) || p.Meets == nil || *p.Meets == overloaded {
				t.Fatalf("phase %d (overloaded %v): %s", i, overloaded, out)
			}
			if !overloaded && (*p.OracleP99 < 25 || *p.OracleP99 > *p.ConfP99*(1.0001+0.1*float64(len(extra)))) {
				t.Fatalf("phase %d: oracle P99 %v, configured %v", i, *p.OracleP99, *p.ConfP99)
			}
		}
	}
	code, out, _ := tg("scenario", "check", sc, "--topology", topo, "--duration", "30s", "--trace", tr)
	if code != 0 || !strings.Contains(out, "oracle P99 ms (predicted)") || !strings.Contains(out, "above the 150 ms SLO in 1 of 3 phases") {
		t.Fatalf("%s", out)
	}
}
