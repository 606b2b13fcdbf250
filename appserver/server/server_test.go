package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/cache"
	"github.com/robinhoodcache/robinhood/appserver/internal/testbackend"
	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// env is one application server (in process, real HTTP on loopback) with
// real memcached (or Redis) partitions and two in-process gRPC backends,
// "fast" (id 0) and "slow" (id 1).
type env struct {
	t        *testing.T
	srv      *Server
	url      string
	mc       map[string]*testutil.Process
	mcAddr   map[string]string
	redis    map[string]bool // partitions that are Redis instances (in mc, mcAddr)
	redisPW  string          // their password ("" for none)
	cfg      Config          // what New was given
	backends map[string]*testbackend.Server
	client   *http.Client
}

type envOptions struct {
	mode           string // partitioned (default), shared, none
	requestTimeout string
	backendTimeout string
	redis          []string // partitioned: these backends' partitions are Redis instances
	redisPassword  string   // the Redis partitions require this password (password_file)
	cfg            Config
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.mode == "" {
		o.mode = config.CachePartitioned
	}
	if o.requestTimeout == "" {
		o.requestTimeout = "2s"
	}
	if o.backendTimeout == "" {
		o.backendTimeout = "1s"
	}
	e := &env{t: t, mc: map[string]*testutil.Process{}, mcAddr: map[string]string{}, redis: map[string]bool{}, backends: map[string]*testbackend.Server{}}
	var cacheYAML string
	switch o.mode {
	case config.CachePartitioned:
		for _, name := range o.redis {
			e.redis[name] = true
		}
		var parts []string
		for _, name := range []string{"fast", "slow"} {
			if e.redis[name] && o.redisPassword != "" {
				e.mcAddr[name] = testutil.FreeAddr(t)
				_, port, _ := net.SplitHostPort(e.mcAddr[name])
				e.mc[name] = testutil.Start(t, "redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "",
					"--appendonly", "no", "--requirepass", o.redisPassword)
				testutil.WaitTCP(t, e.mcAddr[name])
				pwFile := filepath.Join(t.TempDir(), "redis-"+name)
				if err := os.WriteFile(pwFile, []byte(o.redisPassword+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				parts = append(parts, fmt.Sprintf("%s: {redis: %q, password_file: %q}", name, e.mcAddr[name], pwFile))
				continue
			}
			if e.redis[name] {
				e.mc[name], e.mcAddr[name] = testutil.Redis(t)
				parts = append(parts, fmt.Sprintf("%s: {redis: %q}", name, e.mcAddr[name]))
				continue
			}
			e.mc[name], e.mcAddr[name] = testutil.Memcached(t, 16)
			parts = append(parts, fmt.Sprintf("%s: %q", name, e.mcAddr[name]))
		}
		cacheYAML = "partitions: {" + strings.Join(parts, ", ") + "}"
	case config.CacheShared:
		p, addr := testutil.Memcached(t, 16)
		for _, name := range []string{"fast", "slow"} {
			e.mc[name], e.mcAddr[name] = p, addr
		}
		cacheYAML = fmt.Sprintf("shared_cache: %q", addr)
	}
	for _, name := range []string{"fast", "slow"} {
		e.backends[name] = testbackend.Start(t, name)
	}
	httpAddr := testutil.FreeAddr(t)
	yaml := fmt.Sprintf(`
rbc_server: {grpc: %q}
backends:
  - {id: 0, name: fast, type: kv, replicas: [{grpc: %q}]}
  - {id: 1, name: slow, type: kv, replicas: [{grpc: %q}]}
app_servers:
  - id: app0
    http: %q
    cache_mode: %s
    cache_budget_mb: 32
    request_timeout: %s
    backend_timeout: %s
    controller: {min_partition_mb: 16}
    %s
`, testutil.FreeAddr(t), e.backends["fast"].Addr, e.backends["slow"].Addr, httpAddr, o.mode, o.requestTimeout, o.backendTimeout, cacheYAML)
	topo, err := config.ParseTopology([]byte(yaml))
	if err != nil {
		t.Fatalf("topology: %v\n%s", err, yaml)
	}
	cfg := o.cfg
	cfg.Topology, cfg.AppServerID = topo, "app0"
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = 50 * time.Millisecond
	}
	e.cfg, e.redisPW = cfg, o.redisPassword
	e.srv, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e.srv.Handler()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l)
	}()
	e.url = "http://" + httpAddr
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		_ = hs.Close()
		<-done
		_ = e.srv.Close()
	})
	return e
}

type response struct {
	LatencyUs       int64                      `json:"latency_us"`
	BlockingBackend string                     `json:"blocking_backend"`
	Status          string                     `json:"status"`
	FailedBackends  []string                   `json:"failed_backends"`
	SkippedLayers   int                        `json:"skipped_layers"`
	Backends        map[string]backendResponse `json:"backends"`
	Error           string                     `json:"error"`
}

type backendResponse struct {
	Queries int       `json:"queries"`
	Hits    int       `json:"hits"`
	Misses  int       `json:"misses"`
	Errors  int       `json:"errors"`
	Skipped int       `json:"skipped"`
	Error   string    `json:"error"`
	Values  []*string `json:"values"`
}

// postCached posts body again once its cacheable values are cached, and
// checks the answer: fast hits its two cacheable values and misses the
// uncacheable "42" (the only key its backend is asked for), slow hits its one
// value without a backend call.
func (e *env) postCached(body string) response {
	e.t.Helper()
	fastCalls, slowCalls := e.backends["fast"].Calls(), e.backends["slow"].Calls()
	code, r := e.post(body)
	if code != http.StatusOK {
		e.t.Fatalf("second request: %d %+v", code, r)
	}
	if g := r.Backends["fast"]; g.Hits != 2 || g.Misses != 1 {
		e.t.Fatalf("second request, fast: %+v, want 2 hits and the uncacheable miss", g)
	}
	if g := r.Backends["slow"]; g.Hits != 1 || g.Misses != 0 {
		e.t.Fatalf("second request, slow: %+v, want a hit", g)
	}
	if got := e.backends["slow"].Calls(); got != slowCalls {
		e.t.Fatalf("slow backend called on an all-hit batch")
	}
	if got := e.backends["fast"].Calls(); got != fastCalls+1 || strings.Join(e.backends["fast"].LastKeys(), ",") != "42" {
		e.t.Fatalf("fast backend: %d calls (want %d), last keys %v (want [42])", got, fastCalls+1, e.backends["fast"].LastKeys())
	}
	return r
}

func (e *env) post(body string) (int, response) {
	e.t.Helper()
	resp, err := e.client.Post(e.url+"/v1/request?values=1", "application/json", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	var r response
	if err := json.Unmarshal(b, &r); err != nil {
		e.t.Fatalf("response %d is not JSON: %v\n%s", resp.StatusCode, err, b)
	}
	return resp.StatusCode, r
}

// checkValues asserts that the values served for backend are the documented
// bytes of keys at sizes (nil entries expected where want is -1).
func (e *env) checkValues(r response, backend string, keys []string, sizes []int) {
	e.t.Helper()
	vals := r.Backends[backend].Values
	if len(vals) != len(keys) {
		e.t.Fatalf("%s: %d values, want %d", backend, len(vals), len(keys))
	}
	for i, v := range vals {
		if v == nil {
			e.t.Fatalf("%s %s: no value", backend, keys[i])
		}
		b, err := base64.StdEncoding.DecodeString(*v)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(b) != sizes[i] || !value.Check(b, backend, keys[i]) {
			e.t.Fatalf("%s %s: served %d bytes that are not value.Bytes(%q, %q, %d)", backend, keys[i], len(b), backend, keys[i], sizes[i])
		}
	}
}

// cached reads key of backend directly from its memcached or Redis.
func (e *env) cached(backend, key string) []byte {
	e.t.Helper()
	var c cache.Store
	if e.redis[backend] {
		c = cache.NewRedisClient(e.mcAddr[backend], cache.Options{MaxConns: 1, Password: e.redisPW})
	} else {
		c = cache.NewClient(e.mcAddr[backend], cache.Options{MaxConns: 1})
	}
	defer c.Close()
	vals := make([][]byte, 1)
	if err := c.GetMulti(context.Background(), []string{cache.Key(backend, key)}, vals); err != nil {
		e.t.Fatal(err)
	}
	return vals[0]
}

// waitCached waits for the background fill of key.
func (e *env) waitCached(backend, key string) []byte {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v := e.cached(backend, key); v != nil {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s %s not cached after 5 s", backend, key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metric returns the value of one series from /metrics (0 when absent).
func (e *env) metric(series string) float64 {
	e.t.Helper()
	return testutil.Metric(e.t, e.url, series)
}

func mcStat(t *testing.T, addr, name string) int {
	t.Helper()
	n, err := strconv.Atoi(testutil.MemcachedStats(t, addr, "")[name])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMissThenHit(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := `{"t": 1, "d": [{"fast": {"S": [100, 2000, 7], "U": ["a", "b", 42], "C": [1, 1, 0]},
	                         "slow": {"S": [300], "U": ["has space"], "C": [1]}}]}`
	code, r := e.post(body)
	if code != http.StatusOK || r.Status != "ok" {
		t.Fatalf("first request: %d %+v", code, r)
	}
	want := map[string]backendResponse{
		"fast": {Queries: 3, Hits: 0, Misses: 3},
		"slow": {Queries: 1, Hits: 0, Misses: 1},
	}
	for name, w := range want {
		g := r.Backends[name]
		if g.Queries != w.Queries || g.Hits != w.Hits || g.Misses != w.Misses || g.Errors != 0 {
			t.Fatalf("first request, %s: %+v, want %+v", name, g, w)
		}
	}
	e.checkValues(r, "fast", []string{"a", "b", "42"}, []int{100, 2000, 7})
	e.checkValues(r, "slow", []string{"has space"}, []int{300})
	if r.BlockingBackend != "fast" && r.BlockingBackend != "slow" {
		t.Fatalf("blocking backend %q", r.BlockingBackend)
	}
	if r.LatencyUs <= 0 {
		t.Fatalf("latency_us %d", r.LatencyUs)
	}

	// The cacheable values land in memcached as the documented bytes; the
	// key with a space is stored under its hashed key.
	for _, kv := range []struct {
		backend, key string
		size         int
	}{{"fast", "a", 100}, {"fast", "b", 2000}, {"slow", "has space", 300}} {
		got := e.waitCached(kv.backend, kv.key)
		if len(got) != kv.size || !value.Check(got, kv.backend, kv.key) {
			t.Fatalf("memcached holds %d wrong bytes for %s %s", len(got), kv.backend, kv.key)
		}
	}
	if e.cached("fast", "42") != nil {
		t.Fatal("the uncacheable query's value was cached")
	}
	if !strings.HasPrefix(cache.Key("slow", "has space"), "slow:#") {
		t.Fatal("a key with a space was not hashed")
	}

	r = e.postCached(body)
	e.checkValues(r, "fast", []string{"a", "b", "42"}, []int{100, 2000, 7})
	e.checkValues(r, "slow", []string{"has space"}, []int{300})

	for series, want := range map[string]float64{
		`appserver_cache_hits_total{backend="fast"}`:                  2,
		`appserver_cache_misses_total{backend="fast"}`:                4,
		`appserver_cache_hits_total{backend="slow"}`:                  1,
		`appserver_cache_misses_total{backend="slow"}`:                1,
		`appserver_requests_total{status="ok"}`:                       2,
		`appserver_request_seconds_count`:                             2,
		`appserver_query_seconds_count{backend="fast",result="hit"}`:  2,
		`appserver_query_seconds_count{backend="fast",result="miss"}`: 4,
		`appserver_cache_fills_total{backend="fast"}`:                 2,
		`appserver_requests_in_flight`:                                0,
	} {
		if got := e.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if b := e.metric(`appserver_blocking_total{backend="fast"}`) + e.metric(`appserver_blocking_total{backend="slow"}`); b != 2 {
		t.Errorf("blocking_total sums to %v, want 2", b)
	}
}

func TestBadInputFetchesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, tc := range []struct{ name, body, msg string }{
		{"unknown backend", `{"d": [{"fast": {"S": [1], "U": ["k"], "C": [1]}, "nosuch": {"S": [1], "U": ["k"], "C": [1]}}]}`, `d[0].nosuch: unknown backend "nosuch" (the topology has: fast, slow)`},
		{"mismatched S/U/C", `{"d": [{"fast": {"S": [1, 2], "U": ["k"], "C": [1]}}]}`, "d[0].fast: S, U and C must have the same length (got 2, 1, 1)"},
		{"negative size", `{"d": [{"fast": {"S": [10, -1], "U": ["k", "j"], "C": [1, 1]}}]}`, "d[0].fast.S[1]: size -1 is negative"},
		{"size above 64 MiB", `{"d": [{"fast": {"S": [67108865], "U": ["k"], "C": [1]}}]}`, "d[0].fast.S[0]: size 67108865 exceeds the 67108864-byte limit"},
		{"malformed JSON", `{"d": [{"fast": {"S": [1], "U": ["k"], "C": [1]}}]`, "malformed JSON"},
		{"no d", `{"t": 3}`, "d: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, r := e.post(tc.body)
			if code != http.StatusBadRequest || !strings.Contains(r.Error, tc.msg) {
				t.Fatalf("got %d %q, want 400 with %q", code, r.Error, tc.msg)
			}
		})
	}
	for name, b := range e.backends {
		if b.Calls() != 0 {
			t.Errorf("backend %s was called %d times", name, b.Calls())
		}
	}
	for name, addr := range e.mcAddr {
		if g, s := mcStat(t, addr, "cmd_get"), mcStat(t, addr, "cmd_set"); g != 0 || s != 0 {
			t.Errorf("memcached %s saw %d gets and %d sets", name, g, s)
		}
	}
	// The 167-byte request that asks for 8 values of 64 MiB (512 MiB in all) is
	// refused whole before anything is fetched: 413, naming the limit.
	attack := `{"d": [{"fast": {"S": [67108864,67108864,67108864,67108864,67108864,67108864,67108864,67108864], "U": ["a","b","c","d","e","f","g","h"], "C": [1,1,1,1,1,1,1,1]}}]}`
	if code, r := e.post(attack); code != http.StatusRequestEntityTooLarge ||
		!strings.Contains(r.Error, "asks for 536870912 bytes of values, more than the 16777216-byte limit (--max-request-bytes)") {
		t.Errorf("the 512 MiB request: got %d %q, want 413 naming --max-request-bytes", code, r.Error)
	}
	for name, b := range e.backends {
		if b.Calls() != 0 {
			t.Errorf("backend %s was called %d times", name, b.Calls())
		}
	}
	if got := e.metric(`appserver_requests_total{status="bad_request"}`); got != 7 {
		t.Errorf("bad_request count %v, want 7", got)
	}
	if got := e.metric(`appserver_request_seconds_count`); got != 0 {
		t.Errorf("bad requests were recorded as served (%v)", got)
	}
}

func TestSlowBackendBlocks(t *testing.T) {
	e := newEnv(t, envOptions{mode: config.CacheNone})
	e.backends["slow"].SetDelay(200 * time.Millisecond)
	for i := range 3 {
		code, r := e.post(fmt.Sprintf(`{"d": [{"fast": {"S": [10], "U": ["f%d"], "C": [1]}, "slow": {"S": [10], "U": ["s%d"], "C": [1]}}]}`, i, i))
		if code != http.StatusOK || r.BlockingBackend != "slow" {
			t.Fatalf("%d %+v, want slow blocking", code, r)
		}
		if r.LatencyUs < 200000 {
			t.Fatalf("latency %d µs is below the slow backend's 200 ms", r.LatencyUs)
		}
		// Cache mode none: every query is a miss, nothing is cached.
		if r.Backends["fast"].Misses != 1 || r.Backends["fast"].Hits != 0 {
			t.Fatalf("none mode: %+v", r.Backends["fast"])
		}
	}
	if got := e.metric(`appserver_blocking_total{backend="slow"}`); got != 3 {
		t.Fatalf("appserver_blocking_total{slow} = %v, want 3", got)
	}
}

func TestBackendTimeoutGivesPartial(t *testing.T) {
	e := newEnv(t, envOptions{backendTimeout: "300ms"})
	e.backends["slow"].SetDelay(5 * time.Second)
	code, r := e.post(`{"d": [{"fast": {"S": [10, 20], "U": ["a", "b"], "C": [1, 1]}, "slow": {"S": [10, 10], "U": ["x", "y"], "C": [1, 1]}}, {"fast": {"S": [5], "U": ["c"], "C": [1]}}]}`)
	if code != http.StatusBadGateway || r.Status != "partial" {
		t.Fatalf("got %d %+v, want 502 partial", code, r)
	}
	if r.BlockingBackend != "slow" || len(r.FailedBackends) != 1 || r.FailedBackends[0] != "slow" {
		t.Fatalf("blocking %q failed %v, want slow", r.BlockingBackend, r.FailedBackends)
	}
	if s := r.Backends["slow"]; s.Errors != 2 || !strings.Contains(s.Error, "DeadlineExceeded") {
		t.Fatalf("slow: %+v, want 2 errors and a deadline message", s)
	}
	// The fast backend's values were served; its second-layer query was
	// not run.
	if f := r.Backends["fast"]; f.Queries != 3 || f.Misses != 2 || f.Errors != 0 || f.Skipped != 1 || r.SkippedLayers != 1 {
		t.Fatalf("fast: %+v (skipped layers %d)", f, r.SkippedLayers)
	}
	if r.LatencyUs < 300000 {
		t.Fatalf("latency %d µs, want at least the 300 ms backend timeout", r.LatencyUs)
	}
	for series, want := range map[string]float64{
		`appserver_backend_errors_total{backend="slow",kind="timeout"}`: 1,
		`appserver_requests_total{status="partial"}`:                    1,
		`appserver_request_seconds_count`:                               1,
		`appserver_blocking_total{backend="slow"}`:                      1,
	} {
		if got := e.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// A failing backend (not slow) is reported the same way.
	e.backends["slow"].SetDelay(0)
	e.backends["slow"].SetFail(true)
	code, r = e.post(`{"d": [{"slow": {"S": [1], "U": ["z"], "C": [1]}}]}`)
	if code != http.StatusBadGateway || r.BlockingBackend != "slow" || r.Backends["slow"].Errors != 1 {
		t.Fatalf("failing backend: %d %+v", code, r)
	}
	if got := e.metric(`appserver_backend_errors_total{backend="slow",kind="error"}`); got != 1 {
		t.Fatalf("errors{kind=error} = %v", got)
	}
}

func TestRequestTimeout(t *testing.T) {
	e := newEnv(t, envOptions{requestTimeout: "150ms", backendTimeout: "5s"})
	e.backends["slow"].SetDelay(5 * time.Second)
	start := time.Now()
	code, r := e.post(`{"d": [{"slow": {"S": [1], "U": ["z"], "C": [1]}}, {"fast": {"S": [1], "U": ["y"], "C": [1]}}]}`)
	if code != http.StatusBadGateway || r.BlockingBackend != "slow" || r.SkippedLayers != 1 {
		t.Fatalf("got %d %+v", code, r)
	}
	// Without the request timeout it would take the backend's 5 s.
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("request took %v with a 150 ms request timeout", el)
	}
	if e.backends["fast"].Calls() != 0 {
		t.Fatal("the layer after the failed one ran")
	}
}

func TestSharedMode(t *testing.T) {
	e := newEnv(t, envOptions{mode: config.CacheShared})
	body := `{"d": [{"fast": {"S": [64], "U": ["k"], "C": [1]}, "slow": {"S": [64], "U": ["k"], "C": [1]}}]}`
	if code, r := e.post(body); code != http.StatusOK || r.Backends["fast"].Misses != 1 {
		t.Fatalf("%d %+v", code, r)
	}
	// Both backends' "k" live in the one memcached under their own prefix.
	for _, b := range []string{"fast", "slow"} {
		if v := e.waitCached(b, "k"); !value.Check(v, b, "k") {
			t.Fatalf("%s:k holds the wrong bytes", b)
		}
	}
	if n := mcStat(t, e.mcAddr["fast"], "curr_items"); n != 2 {
		t.Fatalf("shared memcached holds %d items, want 2", n)
	}
	code, r := e.post(body)
	if code != http.StatusOK || r.Backends["fast"].Hits != 1 || r.Backends["slow"].Hits != 1 {
		t.Fatalf("second request: %d %+v", code, r)
	}
	e.checkValues(r, "slow", []string{"k"}, []int{64})
}

func TestCacheTroubles(t *testing.T) {
	e := newEnv(t, envOptions{})

	t.Run("value above the item limit is not cached", func(t *testing.T) {
		code, r := e.post(`{"d": [{"fast": {"S": [2097152], "U": ["big"], "C": [1]}}]}`)
		if code != http.StatusOK {
			t.Fatalf("%d %+v", code, r)
		}
		e.checkValues(r, "fast", []string{"big"}, []int{2 << 20})
		if got := e.metric(`appserver_cache_fill_skipped_total{backend="fast",reason="too_large"}`); got != 1 {
			t.Fatalf("too_large = %v, want 1", got)
		}
	})

	t.Run("cached under another size is a miss", func(t *testing.T) {
		e.post(`{"d": [{"fast": {"S": [10], "U": ["resized"], "C": [1]}}]}`)
		e.waitCached("fast", "resized")
		code, r := e.post(`{"d": [{"fast": {"S": [20], "U": ["resized"], "C": [1]}}]}`)
		if code != http.StatusOK || r.Backends["fast"].Misses != 1 {
			t.Fatalf("%d %+v", code, r)
		}
		e.checkValues(r, "fast", []string{"resized"}, []int{20})
		if got := e.metric(`appserver_cache_errors_total{backend="fast",kind="size_mismatch"}`); got != 1 {
			t.Fatalf("size_mismatch = %v, want 1", got)
		}
	})

	t.Run("repeated key in one batch", func(t *testing.T) {
		code, r := e.post(`{"d": [{"fast": {"S": [8, 8], "U": ["dup", "dup"], "C": [1, 1]}}]}`)
		if code != http.StatusOK {
			t.Fatalf("%d %+v", code, r)
		}
		e.checkValues(r, "fast", []string{"dup", "dup"}, []int{8, 8})
	})

	t.Run("memcached stopped: requests are served by the backend", func(t *testing.T) {
		defer testutil.Freeze(t, e.mc["slow"])()
		code, r := e.post(`{"d": [{"slow": {"S": [10], "U": ["m"], "C": [1]}}]}`)
		if code != http.StatusOK || r.Backends["slow"].Misses != 1 {
			t.Fatalf("%d %+v", code, r)
		}
		e.checkValues(r, "slow", []string{"m"}, []int{10})
		if got := e.metric(`appserver_cache_errors_total{backend="slow",kind="timeout"}`); got < 1 {
			t.Fatalf("cache timeout errors = %v, want ≥ 1", got)
		}
	})
}

func TestRBCServerAwayDropsAreCounted(t *testing.T) {
	e := newEnv(t, envOptions{mode: config.CacheNone})
	for i := range 5 {
		if code, _ := e.post(fmt.Sprintf(`{"d": [{"fast": {"S": [1], "U": ["k%d"], "C": [1]}}]}`, i)); code != http.StatusOK {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.metric("appserver_rbc_records_dropped_total") != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("dropped = %v after 5 s, want 5", e.metric("appserver_rbc_records_dropped_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.metric("appserver_rbc_records_sent_total"); got != 0 {
		t.Fatalf("sent = %v with no RBC server", got)
	}
}

func TestEmptyRequest(t *testing.T) {
	e := newEnv(t, envOptions{mode: config.CacheNone})
	code, r := e.post(`{"t": 0, "d": [{"fast": {"S": [], "U": [], "C": []}}]}`)
	if code != http.StatusOK || r.BlockingBackend != "" || r.Backends["fast"].Queries != 0 {
		t.Fatalf("%d %+v", code, r)
	}
}

// After a burst of concurrent requests, some of them timing out, the
// goroutine count returns to where it was.
func TestNoGoroutineLeak(t *testing.T) {
	e := newEnv(t, envOptions{backendTimeout: "500ms"})
	warm := func() {
		e.post(`{"d": [{"fast": {"S": [1], "U": ["w"], "C": [1]}, "slow": {"S": [1], "U": ["w"], "C": [1]}}]}`)
	}
	warm()
	time.Sleep(100 * time.Millisecond)
	e.client.CloseIdleConnections()
	base := settledGoroutines(0)

	e.backends["slow"].SetDelay(5 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				body := fmt.Sprintf(`{"d": [{"fast": {"S": [100], "U": ["k%d-%d"], "C": [1]}}]}`, w, i)
				if i%3 == 0 { // a third of the requests time out on "slow"
					body = fmt.Sprintf(`{"d": [{"fast": {"S": [100], "U": ["k%d-%d"], "C": [1]}, "slow": {"S": [5], "U": ["s%d-%d"], "C": [1]}}]}`, w, i, w, i)
				}
				resp, err := e.client.Post(e.url+"/v1/request", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if codes[http.StatusOK] != 128 || codes[http.StatusBadGateway] != 64 {
		t.Fatalf("status codes %v, want 128 × 200 and 64 × 502", codes)
	}
	e.client.CloseIdleConnections()
	if n := settledGoroutines(base); n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after the burst, %d before\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// settledGoroutines waits (up to 5 s) for the goroutine count to reach
// target (or to stop changing when target is 0) and returns it.
func settledGoroutines(target int) int {
	deadline := time.Now().Add(5 * time.Second)
	prev := -1
	for {
		n := runtime.NumGoroutine()
		if (target > 0 && n <= target) || (target == 0 && n == prev) || time.Now().After(deadline) {
			return n
		}
		prev = n
		time.Sleep(50 * time.Millisecond)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	topo, err := config.ParseTopology([]byte(`
backends: [{id: 0, name: a, type: kv, replicas: [{grpc: "127.0.0.1:1"}]}]
app_servers:
  - {id: app0, http: "127.0.0.1:1", cache_mode: none}
`))
	if err != nil {
		t.Fatal(err)
	}
	// The topology reader refuses an unknown policy (tests/config); New checks
	// again for a Config built in code.
	topo.AppServers[0].Dispatch = config.Dispatch{Policy: "nosuch"}
	if _, err := New(Config{Topology: topo, AppServerID: "app9"}); err == nil || !strings.Contains(err.Error(), `"app9"`) || !strings.Contains(err.Error(), "app0") {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := New(Config{Topology: topo, AppServerID: "app0"}); err == nil || !strings.Contains(err.Error(), `dispatch.policy: "nosuch"`) {
		t.Fatalf("unknown policy: %v", err)
	}
	// A backend known by id and name alone (a controller-only topology) is no backend
	// an app server of ours can query.
	ext, err := config.ParseTopology([]byte(`
backends: [{id: 0, name: a}]
app_servers: [{id: app0, http: "127.0.0.1:1", cache_mode: none}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Topology: ext, AppServerID: "app0"}); err == nil || !strings.Contains(err.Error(), `backend "a" has no replicas: bin/appserver sends its queries to them`) {
		t.Fatalf("external backend: %v", err)
	}
}
