package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// A short replay with a scenario against a real bin/backend: every change
// reaches the backend through its admin API, scenario.jsonl records it, and
// the limits read back with GET /admin/limits are the timeline's last ones.
func TestScenarioAgainstRealBackend(t *testing.T) {
	bin := testutil.Binary(t, "./backends/cmd/backend")
	grpcAddr, httpAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	testutil.Start(t, bin, "--type", "kv", "--name", "b1", "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--workers", "2")
	testutil.WaitHTTP(t, "http://"+httpAddr+"/healthz")

	// The replay's peer: an application server that answers at once.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"blocking_backend": "b1"}`)
	}))
	defer app.Close()
	tp, err := config.ParseTopology([]byte(fmt.Sprintf(`
backends:
  - {id: 0, name: b1, type: kv, replicas: [{grpc: %q, http: %q}]}
  - {id: 1, name: b2, type: kv, replicas: [{grpc: 127.0.0.1:9}]}
app_servers:
  - {id: app0, http: %q, cache_mode: none}
`, grpcAddr, httpAddr, strings.TrimPrefix(app.URL, "http://"))))
	if err != nil {
		t.Fatal(err)
	}
	doc := `seed: 3
events:
  - kind: set
    at: 100ms
    backend: b1
    set: {rate: 500, extra_latency_ms: 1.5}
  - kind: ramp
    backend: b1
    field: workers
    from: 4
    to: 8
    start: 150ms
    end: 350ms
    step: 50ms
  - kind: random_walk
    backend: b1
    field: hiccup_ms
    period: 50ms
    step: 5
    min: 0
    max: 50
    start: 200ms
    end: 500ms
`
	path := filepath.Join(t.TempDir(), "sc.yaml")
	os.WriteFile(path, []byte(doc), 0o644)
	// The timeline ends at 0.5 s of a 3 s run, so even a loaded machine
	// applies all of it before the run ends.
	sc, warns, err := scenario.Load(path, tp.BackendNames(), 3*time.Second)
	if err != nil || len(warns) > 0 {
		t.Fatal(err, warns)
	}
	cfg := baseConfig(t, tp, writeTrace(t, 50, 20*time.Millisecond))
	cfg.Duration = 3 * time.Second
	cfg.Loop = true
	cfg.Scenario, cfg.ScenarioSeed = sc, 3
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The walk starts from the backend's current hiccup_ms (0), read at
	// start; the expected timeline is the pure expansion.
	want, err := sc.Expand(3*time.Second, 3, map[scenario.BackendField]float64{{Backend: "b1", Field: "hiccup_ms"}: 0})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Scenario.Changes != len(want) || sum.Scenario.Applied != len(want) || sum.Scenario.Failed != 0 {
		t.Fatalf("scenario %+v, want %d changes", sum.Scenario, len(want))
	}
	resp, err := http.Get("http://" + httpAddr + "/admin/limits")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]float64
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	last := map[string]float64{}
	for _, ch := range want {
		for _, fv := range ch.Fields {
			last[fv.Field] = fv.Value
		}
	}
	if last["workers"] != 8 || last["rate"] != 500 {
		t.Fatalf("expected timeline ends with %v", last)
	}
	for f, v := range last {
		if got[f] != v {
			t.Errorf("backend %s = %v, the scenario last set %v", f, got[f], v)
		}
	}
	// scenario.jsonl: one record per field of every change, all ok, in
	// time order, each sent no earlier than scheduled.
	b, err := os.ReadFile(filepath.Join(cfg.OutDir, "scenario.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	fields := 0
	for _, ch := range want {
		fields += len(ch.Fields)
	}
	if len(lines) != fields {
		t.Fatalf("%d records, want %d", len(lines), fields)
	}
	prev := -1.0
	for _, l := range lines {
		var rec scenario.Record
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Result != "ok" || rec.Replica != httpAddr || rec.TS < rec.AtS || rec.AtS < prev {
			t.Fatalf("record %+v", rec)
		}
		prev = rec.AtS
	}
}
