package replay

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// topo builds a topology with backends b1, b2 and one app server per
// address (ids app0, app1, …).
func topo(t testing.TB, apps ...string) *config.Topology {
	t.Helper()
	var b strings.Builder
	b.WriteString("backends:\n")
	for i, name := range []string{"b1", "b2"} {
		fmt.Fprintf(&b, "  - {id: %d, name: %s, type: kv, replicas: [{grpc: 127.0.0.1:1%d}]}\n", i, name, i)
	}
	b.WriteString("app_servers:\n")
	for i, a := range apps {
		fmt.Fprintf(&b, "  - {id: app%d, http: %q, cache_mode: none}\n", i, a)
	}
	tp, err := config.ParseTopology([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// writeTrace writes n requests, one every gap starting at 0 (with ts_ms when
// gap > 0).
func writeTrace(t testing.TB, n int, gap time.Duration) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		ts := ""
		if gap > 0 {
			ts = fmt.Sprintf(`, "ts_ms": %g`, float64(time.Duration(i)*gap)/float64(time.Millisecond))
		}
		fmt.Fprintf(&b, `{"t": %d%s, "d": [{"b1": {"S": [10], "U": ["k%d"], "C": [1]}, "b2": {"S": [20], "U": ["j"], "C": [0]}}]}`+"\n", i, ts, i)
	}
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func baseConfig(t testing.TB, tp *config.Topology, tracePath string) Config {
	return Config{
		Topology:       tp,
		TracePath:      tracePath,
		OutDir:         filepath.Join(t.TempDir(), "out"),
		SLO:            slo.Params{SLO: 150 * time.Millisecond, Step: 200 * time.Millisecond, Window: 400 * time.Millisecond, Warmup: -1},
		WarmupFraction: 0.25,
		Seed:           1,
		Log:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func readRows(t *testing.T, dir string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "requests.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows[0], ",") != "send_ms,latency_us,status,blocking_backend,app_server" {
		t.Fatalf("header %v", rows[0])
	}
	return rows[1:]
}

func readSummary(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The send schedule does not wait for answers: against a server that holds
// every request until 150 are in flight at once, all 200 requests go out
// (over one second) and are answered. A closed-loop sender would never get
// past the first request.
func TestOpenLoopAgainstSlowServer(t *testing.T) {
	const gate = 150
	var inFlight, peak atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n >= gate {
			once.Do(func() { close(release) })
		}
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		_, _ = io.ReadAll(r.Body)
		fmt.Fprint(w, `{"latency_us": 5, "blocking_backend": "b2", "status": "ok", "backends": {}}`)
	}))
	defer srv.Close()
	cfg := baseConfig(t, topo(t, strings.TrimPrefix(srv.URL, "http://")), writeTrace(t, 200, 5*time.Millisecond))
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p < gate {
		t.Fatalf("the server saw at most %d requests at once; open loop should reach %d", p, gate)
	}
	if sum.Sent != 200 || sum.OK != 200 || sum.Dropped != 0 || sum.InFlight.Peak < gate || sum.Mode != "trace" {
		t.Fatalf("summary: sent %d ok %d dropped %d peak %d mode %s", sum.Sent, sum.OK, sum.Dropped, sum.InFlight.Peak, sum.Mode)
	}
	rows := readRows(t, cfg.OutDir)
	if len(rows) != 200 {
		t.Fatalf("%d rows", len(rows))
	}
	held := 0
	for _, r := range rows {
		if r[2] != "200" || r[3] != "b2" || r[4] != "app0" {
			t.Fatalf("row %v", r)
		}
		send, _ := strconv.ParseFloat(r[0], 64)
		lat, _ := strconv.ParseInt(r[1], 10, 64)
		// The gate opens when the 150th request (due at 745 ms; the
		// scheduler never sends early) arrives, so the requests it held
		// finished after that.
		if float64(lat)/1000+send >= 149*5 {
			held++
		}
	}
	if held < gate-1 {
		t.Fatalf("only %d requests were answered after the gate opened", held)
	}
	// The lateness count is the scheduler's own; it is reported, whatever
	// this machine's load made it.
	m := readSummary(t, cfg.OutDir)
	late := m["lateness"].(map[string]any)
	if late["threshold_ms"].(float64) != 1 || late["fell_behind"].(bool) != (late["max_late_ms"].(float64) > late["behind_threshold_ms"].(float64)) {
		t.Fatalf("lateness %v", late)
	}
}

// When the in-flight cap is reached, requests are dropped and counted, and
// the schedule goes on.
func TestInFlightCapDrops(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond)
		fmt.Fprint(w, `{"blocking_backend": "b1"}`)
	}))
	defer srv.Close()
	cfg := baseConfig(t, topo(t, strings.TrimPrefix(srv.URL, "http://")), writeTrace(t, 100, 2*time.Millisecond))
	cfg.MaxInFlight = 20
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Dropped == 0 || sum.Sent < 20 || sum.Sent+sum.Dropped != 100 || sum.Errors["dropped"] != sum.Dropped || sum.InFlight.Peak > 20 {
		t.Fatalf("sent %d dropped %d errors %v peak %d", sum.Sent, sum.Dropped, sum.Errors, sum.InFlight.Peak)
	}
	dropped := 0
	for _, r := range readRows(t, cfg.OutDir) {
		if r[2] == StatusDropped {
			dropped++
			if r[1] != "" {
				t.Fatalf("dropped row with a latency: %v", r)
			}
		}
	}
	if int64(dropped) != sum.Dropped {
		t.Fatalf("%d dropped rows, summary says %d", dropped, sum.Dropped)
	}
}

var tRE = regexp.MustCompile(`"t": (\d+)`)

// Rate mode: Poisson arrivals for the duration, spread over both app
// servers; HTTP errors, timeouts and refused connections are counted by
// kind; the SLO series has a point every step.
func TestRateModeSpreadErrorsAndSeries(t *testing.T) {
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m := tRE.FindSubmatch(body)
		n, _ := strconv.Atoi(string(m[1]))
		switch {
		case n%10 == 3:
			w.WriteHeader(http.StatusBadGateway)
		case n%10 == 7:
			w.WriteHeader(http.StatusBadRequest)
		}
		fmt.Fprint(w, `{"blocking_backend": "b1"}`)
	}
	a0 := httptest.NewServer(http.HandlerFunc(handler))
	defer a0.Close()
	a1 := httptest.NewServer(http.HandlerFunc(handler))
	defer a1.Close()
	tp := topo(t, strings.TrimPrefix(a0.URL, "http://"), strings.TrimPrefix(a1.URL, "http://"))
	cfg := baseConfig(t, tp, writeTrace(t, 50, 0)) // no ts_ms: needs --rate
	cfg.Rate = 400
	cfg.Duration = time.Second
	cfg.Loop = true
	cfg.SLO.SLO = time.Minute // no point can violate it, however loaded the machine
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Mode != "rate" || sum.Sent < 300 || sum.Sent > 500 || sum.Loops < 5 || sum.Dropped != 0 {
		t.Fatalf("sent %d in 1 s at 400/s, loops %d, mode %s", sum.Sent, sum.Loops, sum.Mode)
	}
	per := map[string]int{}
	for _, r := range readRows(t, cfg.OutDir) {
		per[r[4]]++
	}
	if per["app0"] < 100 || per["app1"] < 100 {
		t.Fatalf("spread over app servers: %v", per)
	}
	if sum.Errors["http_5xx"] == 0 || sum.Errors["http_4xx"] == 0 || sum.Answered != sum.Sent || sum.OK+sum.Errors["http_5xx"]+sum.Errors["http_4xx"] != sum.Sent {
		t.Fatalf("errors %v answered %d ok %d", sum.Errors, sum.Answered, sum.OK)
	}
	if sum.Latency.N != int(sum.Sent) || sum.Latency.P99 == nil {
		t.Fatalf("latency %+v", sum.Latency)
	}
	// 1 s, 200 ms steps: points at 0.2 … 1.0 s; the warm-up is 25% of the
	// run (0.25 s), so four count.
	if len(sum.SLO.Series) != 5 || sum.SLO.Series[4].TS != 1 || sum.SLO.WarmupS != 0.25 || sum.SLO.PointsCounted != 4 || sum.SLO.ViolationPct != 0 {
		t.Fatalf("slo %+v", sum.SLO)
	}

	// Same seed, same schedule and spread.
	cfg2 := cfg
	cfg2.OutDir = filepath.Join(t.TempDir(), "again")
	sum2, err := Run(context.Background(), cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Sent != sum.Sent {
		t.Fatalf("seeded runs sent %d and %d", sum.Sent, sum2.Sent)
	}

	// Nobody listening: every request is a transport error, without a
	// latency.
	a1.Close()
	cfg3 := baseConfig(t, topo(t, strings.TrimPrefix(a1.URL, "http://")), writeTrace(t, 20, time.Millisecond))
	sum3, err := Run(context.Background(), cfg3)
	if err != nil {
		t.Fatal(err)
	}
	if sum3.Errors["transport"] != 20 || sum3.Latency.N != 0 || sum3.Status[StatusError] != 20 {
		t.Fatalf("refused: %+v", sum3.Errors)
	}
}

func TestTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // so the server notices the client leaving
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer srv.Close()
	cfg := baseConfig(t, topo(t, strings.TrimPrefix(srv.URL, "http://")), writeTrace(t, 5, time.Millisecond))
	cfg.Timeout = 100 * time.Millisecond
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors["timeout"] != 5 || sum.Latency.N != 5 || *sum.Latency.P50 < 100 {
		t.Fatalf("timeouts: %+v %+v", sum.Errors, sum.Latency)
	}
}

// With --loop a trace with ts_ms repeats, each pass shifted by its span
// plus its mean gap: 0, 10, 20 | 30, 40, 50 | … within 100 ms.
func TestLoopTraceTimes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	cfg := baseConfig(t, topo(t, strings.TrimPrefix(srv.URL, "http://")), writeTrace(t, 3, 10*time.Millisecond))
	cfg.Loop = true
	cfg.Duration = 100 * time.Millisecond
	cfg.SLO.Step, cfg.SLO.Window = 50*time.Millisecond, 50*time.Millisecond
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 10 || sum.Loops != 3 || sum.TraceEnded {
		t.Fatalf("sent %d loops %d ended %v", sum.Sent, sum.Loops, sum.TraceEnded)
	}
}

func TestStartErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	tp := topo(t, strings.TrimPrefix(srv.URL, "http://"))
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"t": 0, "ts_ms": 0, "d": [{"b9": {"S": [1], "U": ["k"], "C": [1]}}]}`+"\n"), 0o644)
	broken := filepath.Join(dir, "broken.jsonl")
	os.WriteFile(broken, []byte(`{"t": 0, "ts_ms": 0, "d": [{"b1": {"S": [1], "U": ["k"]}}]}`+"\n"), 0o644)
	cases := []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.TracePath = writeTrace(t, 3, 0) }, "line 1: no ts_ms; replay a trace without arrival times with --rate"},
		{func(c *Config) { c.TracePath = bad }, `line 1: backend "b9" is not in the topology`},
		{func(c *Config) { c.TracePath = broken }, "line 1: d[0].b1: S, U and C must have the same length"},
		{func(c *Config) { c.AppServers = []string{"app7"} }, `app-servers: "app7" is not an app server of the topology`},
		{func(c *Config) { c.Loop = true }, "loop: needs --duration"},
		{func(c *Config) { c.SLO.Window = 300 * time.Millisecond }, "slo-window 300ms must be a multiple of slo-step 200ms"},
		{func(c *Config) { c.TracePath = filepath.Join(dir, "none") }, "no such file"},
		{func(c *Config) { c.TracePath = dir }, "a folder, not a regular file (replay reads it more than once"},
	}
	for _, c := range cases {
		cfg := baseConfig(t, tp, writeTrace(t, 3, time.Millisecond))
		c.mut(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
		if _, err := os.Stat(cfg.OutDir); err == nil {
			t.Errorf("%q: the output folder was created before the run could start", c.want)
		}
	}
	// A malformed line after the pre-flight stops the run with its line
	// number; what was sent is summarized.
	long := writeTrace(t, preflightLines+5, time.Millisecond)
	b, _ := os.ReadFile(long)
	b = append(b, []byte("{oops\n")...)
	os.WriteFile(long, b, 0o644)
	cfg := baseConfig(t, tp, long)
	sum, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("line %d:", preflightLines+6)) || sum == nil || sum.Sent != preflightLines+5 || sum.Aborted == "" {
		t.Fatalf("broken line: %v, %+v", err, sum)
	}
}

func TestInterrupt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	cfg := baseConfig(t, topo(t, strings.TrimPrefix(srv.URL, "http://")), writeTrace(t, 1000, 10*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Interrupted || sum.Sent == 0 || sum.Sent >= 1000 {
		t.Fatalf("interrupted %v sent %d", sum.Interrupted, sum.Sent)
	}
}
