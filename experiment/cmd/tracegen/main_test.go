package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

func tg(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestSynthDeterministicAndStats(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	args := []string{"--requests", "300", "--keys", "2000,b2=50", "--zipf", "0.8", "--mean-size", "1000,b1=4000", "--seed", "9"}
	for _, out := range []string{a, b} {
		if code, _, stderr := tg(append([]string{"synth", "--out", out}, args...)...); code != 0 {
			t.Fatalf("synth: %d %s", code, stderr)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) || bytes.Count(ab, []byte("\n")) != 300 {
		t.Fatal("same seed, different traces (or wrong length)")
	}
	code, out, stderr := tg("stats", a, "--json")
	if code != 0 {
		t.Fatalf("stats: %s", stderr)
	}
	var res struct {
		Requests int64 `json:"requests"`
		Backends []struct {
			Name         string `json:"name"`
			DistinctKeys int64  `json:"distinct_keys"`
		} `json:"backends"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Requests != 300 || len(res.Backends) == 0 {
		t.Fatalf("stats --json: %v %s", err, out)
	}
	for _, be := range res.Backends {
		if be.Name == "b2" && be.DistinctKeys > 50 {
			t.Fatalf("b2 has %d distinct keys with --keys b2=50", be.DistinctKeys)
		}
	}
	if code, out, _ := tg("stats", a); code != 0 || !strings.Contains(out, "req % (pairs)") || !strings.Contains(out, "requests 300,") {
		t.Fatalf("stats table: %d %s", code, out)
	}
	// Names from --backend-names set the number of backends.
	if code, out, stderr := tg("synth", "--backend-names", "cat,rat,rec", "--describe"); code != 0 || !strings.Contains(out, "rec ") || strings.Contains(out, "b4") {
		t.Fatalf("describe: %d %s %s", code, out, stderr)
	}
}

func TestCommandErrors(t *testing.T) {
	bad := filepath.Join(testutil.RepoRoot(t), "tests", "traces", "bad_line3.jsonl")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: tracegen <command>"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"synth"}, 1, "give --requests N or --duration D"},
		{[]string{"synth", "--requests", "1", "--keys", "x"}, 1, `--keys: "x": not an integer`},
		{[]string{"synth", "--requests", "1", "--zipf", "b99=0.5"}, 1, `zipf: no backend is named "b99"`},
		{[]string{"synth", "--requests", "1", "--match", "both"}, 1, `match: "both" is not one of query, batch`},
		{[]string{"synth", "--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"stats"}, 2, "Usage: tracegen stats FILE"},
		{[]string{"stats", bad}, 1, "bad_line3.jsonl: line 3: d[0].x: S, U and C must have the same length (got 2, 1, 1)"},
		{[]string{"replay", "--trace", "x", "--out", "y"}, 1, "--topology is required"},
		{[]string{"scenario"}, 2, "Usage: tracegen scenario check"},
		{[]string{"scenario", "check", "x.yaml"}, 1, "--topology is required"},
	}
	for _, c := range cases {
		code, _, stderr := tg(c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("tracegen %v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	code, out, stderr := tg("stats", "--skip-bad", bad)
	if code != 0 || !strings.Contains(stderr, "skipping line 3:") || !strings.Contains(out, "1 malformed lines skipped") {
		t.Fatalf("--skip-bad: %d %s %s", code, out, stderr)
	}
}

func writeTopology(t *testing.T, app string, nBackends int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("backends:\n")
	for i := 0; i < nBackends; i++ {
		fmt.Fprintf(&b, "  - {id: %d, name: b%d, type: kv, replicas: [{grpc: 127.0.0.1:%d, http: 127.0.0.1:%d}]}\n", i, i+1, 20000+i, 21000+i)
	}
	fmt.Fprintf(&b, "app_servers:\n  - {id: app0, http: %q, cache_mode: none}\n", app)
	p := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestScenarioCheck(t *testing.T) {
	topo := writeTopology(t, "127.0.0.1:1", 20)
	spikes := filepath.Join(testutil.RepoRoot(t), "examples", "scenarios", "spikes.yaml")
	code, out, stderr := tg("scenario", "check", spikes, "--topology", topo, "--duration", "30m", "--print")
	if code != 0 || !strings.Contains(out, "ok: 8 events (8 set, 0 ramp, 0 random_walk)") || strings.Count(out, `"backend":`) != 8 {
		t.Fatalf("check: %d %s %s", code, out, stderr)
	}
	code, _, stderr = tg("scenario", "check", spikes, "--topology", writeTopology(t, "127.0.0.1:1", 5))
	if code != 1 || !strings.Contains(stderr, `spikes.yaml:15: backend "b6" is not in the topology`) {
		t.Fatalf("check against 5 backends: %d %s", code, stderr)
	}
	code, _, stderr = tg("scenario", "check", spikes, "--topology", topo, "--duration", "10m")
	if code != 0 || !strings.Contains(stderr, "warning: ") || !strings.Contains(stderr, "it will not be applied") {
		t.Fatalf("check with a short run: %d %s", code, stderr)
	}
}

// A short replay through the command line, with /metrics scraped while it
// runs.
func TestReplayCommandWithMetrics(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"blocking_backend": "b1"}`)
	}))
	defer app.Close()
	topo := writeTopology(t, strings.TrimPrefix(app.URL, "http://"), 20)
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.jsonl")
	if code, _, stderr := tg("synth", "--requests", "200", "--keys", "1000", "--out", trace); code != 0 {
		t.Fatal(stderr)
	}
	metrics := testutil.FreeAddr(t)
	out := filepath.Join(dir, "out")
	type res struct {
		code           int
		stdout, stderr string
	}
	done := make(chan res, 1)
	go func() {
		c, o, e := tg("replay", "--topology", topo, "--trace", trace, "--out", out, "--rate", "200", "--duration", "2s",
			"--loop", "--slo", "1m", "--slo-step", "500ms", "--slo-window", "1s", "--warmup", "0s", "--metrics", metrics)
		done <- res{c, o, e}
	}()
	want := []string{"replay_requests_sent_total", "replay_responses_total", "replay_request_seconds_bucket", "replay_window_p99_seconds", "replay_late_sends_total"}
	hasAll := func(s string) bool {
		for _, m := range want {
			if !strings.Contains(s, m) {
				return false
			}
		}
		return true
	}
	// Scrape until every series has appeared (a response series appears with
	// the first answer, which may come after the first send is counted).
	var scraped string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !hasAll(scraped) {
		if resp, err := http.Get("http://" + metrics + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			scraped = string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := <-done
	if r.code != 0 {
		t.Fatalf("replay: %d %s", r.code, r.stderr)
	}
	for _, m := range want {
		if !strings.Contains(scraped, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if !strings.Contains(r.stdout, "SLO violations 0.0% of 4 points") || !strings.Contains(r.stderr, "msg=progress") {
		t.Fatalf("stdout %q\nstderr %q", r.stdout, r.stderr)
	}
	for _, f := range []string{"requests.csv", "summary.json", "scenario.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
