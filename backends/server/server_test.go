package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/backends/kv"
	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

type fixture struct {
	srv    *Server
	http   *httptest.Server
	client robinhoodv1.BackendServiceClient
	logs   *bytes.Buffer
}

// start runs a Server with store over real loopback gRPC and HTTP.
func start(t *testing.T, name string, store Store, l capacity.Limits) *fixture {
	t.Helper()
	model, err := capacity.New(l, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, logs}, nil))
	srv, err := New(Options{Name: name, Type: "kv", Store: store, Model: model, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(GRPCServerOptions()...)
	robinhoodv1.RegisterBackendServiceServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(func() { model.Close(); g.Stop() })
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(hs.Close)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxResponseBytes+16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fixture{srv: srv, http: hs, client: robinhoodv1.NewBackendServiceClient(conn), logs: logs}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func memStore(t *testing.T, name string) *kv.Memory {
	m, err := kv.NewMemory(name, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (f *fixture) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, f.http.URL+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) limits(t *testing.T) capacity.Limits {
	t.Helper()
	code, body := f.do(t, "GET", "/admin/limits", "")
	if code != 200 {
		t.Fatalf("GET /admin/limits: %d %s", code, body)
	}
	var l capacity.Limits
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		t.Fatalf("GET /admin/limits body %q: %v", body, err)
	}
	return l
}

// metric returns the value of a counter or gauge with the given labels
// (besides backend), or the sample count of a histogram.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func TestGetReturnsDerivedValues(t *testing.T) {
	f := start(t, "ratings", memStore(t, "ratings"), capacity.Limits{Workers: 2, ExtraLatencyMs: 1})
	keys := []string{"k1", "user:42", "k1", "", "big"}
	sizes := []uint32{12, 1000, 12, 5, 3 << 20}
	resp, err := f.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: keys, Sizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Values) != len(keys) {
		t.Fatalf("%d values for %d keys", len(resp.Values), len(keys))
	}
	for i, k := range keys {
		if !bytes.Equal(resp.Values[i], value.Bytes("ratings", k, int(sizes[i]))) {
			t.Fatalf("values[%d] (key %q) is not value.Bytes", i, k)
		}
	}
	// Every query held its worker for at least the 1 ms extra latency.
	if resp.ServiceUs < uint64(len(keys))*1000 {
		t.Fatalf("service_us = %d, want ≥ %d (5 queries × 1 ms extra latency)", resp.ServiceUs, len(keys)*1000)
	}
	reg := f.srv.Registry()
	if got := metric(t, reg, "backend_queries_served_total"); got != 5 {
		t.Fatalf("served = %v, want 5", got)
	}
	for _, h := range []string{"backend_query_seconds", "backend_queue_seconds", "backend_service_seconds"} {
		if got := metric(t, reg, h); got != 5 {
			t.Fatalf("%s count = %v, want 5", h, got)
		}
	}
	empty, err := f.client.Get(context.Background(), &robinhoodv1.GetRequest{})
	if err != nil || len(empty.Values) != 0 {
		t.Fatalf("empty batch: %v, %d values", err, len(empty.Values))
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestDocumentedExampleOverTheWire(t *testing.T) {
	f := start(t, "catalog", memStore(t, "catalog"), capacity.DefaultLimits())
	resp, err := f.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"k1"}, Sizes: []uint32{12}})
	if err != nil {
		t.Fatal(err)
	}
	if got := hexString(resp.Values[0]); got != "c3173cc3b6b1515004bc6fa8" {
		t.Fatalf("catalog/k1/12 = %s, want the docs/backends.md example", got)
	}
}

func TestGetRejectsBadBatches(t *testing.T) {
	f := start(t, "b", memStore(t, "b"), capacity.DefaultLimits())
	cases := []struct {
		req  *robinhoodv1.GetRequest
		want string
	}{
		{&robinhoodv1.GetRequest{Keys: []string{"a", "b"}, Sizes: []uint32{1}}, "2 keys, 1 sizes"},
		{&robinhoodv1.GetRequest{Keys: []string{"a", "big"}, Sizes: []uint32{1, MaxValueBytes + 1}}, `sizes[1] = 67108865 (key "big")`},
		{&robinhoodv1.GetRequest{Keys: []string{strings.Repeat("k", MaxKeyBytes+1)}, Sizes: []uint32{1}}, "keys[0] is 65537 bytes"},
		{&robinhoodv1.GetRequest{Keys: make([]string, 9), Sizes: []uint32{MaxValueBytes, MaxValueBytes, MaxValueBytes, MaxValueBytes, MaxValueBytes, MaxValueBytes, MaxValueBytes, MaxValueBytes, MaxValueBytes}}, "split the batch"},
	}
	for _, c := range cases {
		_, err := f.client.Get(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want InvalidArgument mentioning %q", err, c.want)
		}
	}
	if got := metric(t, f.srv.Registry(), "backend_queries_served_total"); got != 0 {
		t.Fatalf("a rejected batch served %v queries", got)
	}
	if got := metric(t, f.srv.Registry(), "backend_batches_refused_total"); got != float64(len(cases)) {
		t.Fatalf("backend_batches_refused_total %v, want %d", got, len(cases))
	}
}

// The 167-byte attack: 8 values of 64 MiB each is within the per-value limit but
// 512 MiB in all; the default batch limit (16 MiB) refuses it before anything
// is allocated, so the heap does not grow. A legitimate large batch is served,
// and its memory goes back to the operating system after the answer.
func TestLargeBatchesAreRefusedAndMemoryReturned(t *testing.T) {
	f := start(t, "b", memStore(t, "b"), capacity.Limits{Workers: 8})
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	before := heap()
	sizes := make([]uint32, 8)
	for i := range sizes {
		sizes[i] = MaxValueBytes
	}
	for range 4 { // four at once reached 2 GB before the limit
		_, err := f.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"a", "b", "c", "d", "e", "f", "g", "h"}, Sizes: sizes})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "more than the batch limit of 16777216 bytes (--max-batch-bytes)") {
			t.Fatalf("8 × 64 MiB: %v, want InvalidArgument naming --max-batch-bytes", err)
		}
	}
	if grew := int64(heap()) - int64(before); grew > 8<<20 {
		t.Fatalf("refusing the batches grew the heap by %d MiB", grew>>20)
	}
	// A legitimate large batch (48 MiB under a 64 MiB limit) is served; once its
	// answer is gone the server hands the memory back to the operating system
	// (without that, the Go runtime keeps it mapped for minutes).
	model, _ := capacity.New(capacity.Limits{Workers: 8}, 1, nil)
	big, err := New(Options{Name: "big", Store: memStore(t, "big"), Model: model, MaxBatchBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	held := func() int64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapSys - ms.HeapReleased)
	}
	runtime.GC()
	debug.FreeOSMemory()
	base := held()
	resp, err := big.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"x", "y", "z"}, Sizes: []uint32{16 << 20, 16 << 20, 16 << 20}})
	if err != nil || len(resp.Values) != 3 || len(resp.Values[2]) != 16<<20 {
		t.Fatalf("48 MiB batch: %v", err)
	}
	if held()-base < 40<<20 {
		t.Fatalf("the answer did not take its memory (%d MiB held)", (held()-base)>>20)
	}
	resp = nil
	deadline := time.Now().Add(3 * time.Second)
	for held()-base > 8<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("3 s after a 48 MiB answer the process still holds %d MiB more than before", (held()-base)>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := New(Options{Name: "x", Store: memStore(t, "x"), Model: f.srv.model, MaxBatchBytes: MaxResponseBytes + 1}); err == nil {
		t.Fatal("a batch limit above the response limit was accepted")
	}
}

func TestCallerGivingUpLeavesTheQueue(t *testing.T) {
	f := start(t, "b", memStore(t, "b"), capacity.Limits{Workers: 1, ExtraLatencyMs: 60_000})
	holdCtx, releaseHolder := context.WithCancel(context.Background())
	holder := make(chan error, 1)
	go func() {
		_, err := f.client.Get(holdCtx, &robinhoodv1.GetRequest{Keys: []string{"h"}, Sizes: []uint32{1}})
		holder <- err
	}()
	reg := f.srv.Registry()
	waitFor(t, func() bool { return metric(t, reg, "backend_in_service") == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := f.client.Get(ctx, &robinhoodv1.GetRequest{Keys: []string{"a", "b", "c"}, Sizes: []uint32{1, 1, 1}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("queued call past its deadline: %v", err)
	}
	waitFor(t, func() bool { return metric(t, reg, "backend_queries_cancelled_total") == 3 })
	if q := metric(t, reg, "backend_queue_length"); q != 0 {
		t.Fatalf("queue length %v after the caller gave up, want 0", q)
	}
	releaseHolder()
	if err := <-holder; status.Code(err) != codes.Canceled {
		t.Fatalf("holder: %v", err)
	}
	waitFor(t, func() bool { return metric(t, reg, "backend_in_service") == 0 })
	if got := metric(t, reg, "backend_queries_served_total"); got != 0 {
		t.Fatalf("served %v, want 0", got)
	}
}

func TestQueueLimitRejectsWithResourceExhausted(t *testing.T) {
	f := start(t, "b", memStore(t, "b"), capacity.Limits{Workers: 1, ExtraLatencyMs: 60_000, QueueLimit: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	reg := f.srv.Registry()
	for i, want := range []float64{1, 1} { // one in service, then one queued
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.client.Get(ctx, &robinhoodv1.GetRequest{Keys: []string{"x"}, Sizes: []uint32{1}})
		}()
		waitFor(t, func() bool {
			if i == 0 {
				return metric(t, reg, "backend_in_service") == want
			}
			return metric(t, reg, "backend_queue_length") == want
		})
	}
	_, err := f.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"y", "z"}, Sizes: []uint32{1, 1}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "queue_limit is 1") {
		t.Fatalf("Get on a full queue: %v", err)
	}
	if got := metric(t, reg, "backend_queries_rejected_total"); got != 2 {
		t.Fatalf("rejected = %v, want 2", got)
	}
	cancel()
}

func TestDataPathErrorIsUnavailable(t *testing.T) {
	proc, addr := testutil.Redis(t)
	store, err := kv.NewRedis(context.Background(), "b", kv.RedisOptions{Addr: addr, PoolSize: 2, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f := start(t, "b", store, capacity.Limits{Workers: 2})
	if _, err := f.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"k"}, Sizes: []uint32{3}}); err != nil {
		t.Fatal(err)
	}
	proc.Kill()
	_, err = f.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"k", "j"}, Sizes: []uint32{3, 4}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "redis") {
		t.Fatalf("Get with Redis gone: %v", err)
	}
	if got := metric(t, f.srv.Registry(), "backend_query_errors_total"); got < 1 {
		t.Fatalf("errors = %v, want ≥ 1", got)
	}
}

func TestAdminPartialUpdate(t *testing.T) {
	start0 := capacity.Limits{Workers: 4, Rate: 0, ExtraLatencyMs: 2, HiccupProb: 0, HiccupMs: 0}
	f := start(t, "b", memStore(t, "b"), start0)
	if got := f.limits(t); got != start0 {
		t.Fatalf("GET = %+v, want %+v", got, start0)
	}
	code, body := f.do(t, "PUT", "/admin/limits", `{"rate": 250, "hiccup_prob": 0.05, "hiccup_ms": 40}`)
	if code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	want := capacity.Limits{Workers: 4, Rate: 250, ExtraLatencyMs: 2, HiccupProb: 0.05, HiccupMs: 40}
	var got capacity.Limits
	json.Unmarshal([]byte(body), &got)
	if got != want || f.limits(t) != want {
		t.Fatalf("after PUT: response %+v, GET %+v, want %+v", got, f.limits(t), want)
	}
	reg := f.srv.Registry()
	for field, v := range map[string]float64{"workers": 4, "rate": 250, "extra_latency_ms": 2, "hiccup_prob": 0.05, "hiccup_ms": 40, "queue_limit": 0} {
		if m := metric(t, reg, "backend_limit", "limit", field); m != v {
			t.Errorf("backend_limit{limit=%q} = %v, want %v", field, m, v)
		}
	}
	logs := f.logs.String()
	if strings.Count(logs, "limits changed") != 1 || !strings.Contains(logs, "rate=0→250") || !strings.Contains(logs, "hiccup_ms=0→40") {
		t.Fatalf("want one log line with the changes, got:\n%s", logs)
	}
}

func TestAdminRejectsAndChangesNothing(t *testing.T) {
	start0 := capacity.Limits{Workers: 3, Rate: 100, ExtraLatencyMs: 1, HiccupProb: 0.1, HiccupMs: 5}
	f := start(t, "b", memStore(t, "b"), start0)
	cases := []struct{ body, want string }{
		{`{"workers": 0}`, "workers"},
		{`{"workers": -2}`, "-2"},
		{`{"workers": 1.5}`, "1.5"},
		{`{"workers": "8"}`, `"8"`},
		{`{"rate": -1}`, "rate"},
		{`{"extra_latency_ms": -5}`, "extra_latency_ms"},
		{`{"hiccup_prob": 1.2}`, "hiccup_prob"},
		{`{"hiccup_prob": -0.1}`, "hiccup_prob"},
		{`{"hiccup_ms": -1}`, "hiccup_ms"},
		{`{"queue_limit": -1}`, "queue_limit"},
		{`{"workers": 8, "hiccup_prob": 7}`, "hiccup_prob"}, // nothing applied, not even workers
		{`{"latency": 5}`, "unknown field"},
		{`{"workers": 8`, "malformed JSON"},
		{`not json`, "malformed JSON"},
		{`[]`, "malformed JSON"},
		{``, "malformed JSON"},
	}
	for _, c := range cases {
		code, body := f.do(t, "PUT", "/admin/limits", c.body)
		var e struct{ Error string }
		json.Unmarshal([]byte(body), &e)
		if code != 400 || !strings.Contains(e.Error, c.want) {
			t.Errorf("PUT %s: %d %s, want 400 mentioning %q", c.body, code, body, c.want)
		}
		if got := f.limits(t); got != start0 {
			t.Fatalf("PUT %s changed the limits to %+v", c.body, got)
		}
	}
	if code, _ := f.do(t, "PUT", "/admin/limits", `{"rate": 1, "pad": "`+strings.Repeat("x", MaxAdminBody)+`"}`); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d", code)
	}
	if code, _ := f.do(t, "POST", "/admin/limits", `{"rate": 1}`); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", code)
	}
	if f.limits(t) != start0 || strings.Contains(f.logs.String(), "limits changed") {
		t.Fatal("a rejected update changed or logged something")
	}
}

func TestHealthzAndMetricsEndpoints(t *testing.T) {
	f := start(t, "ratings", memStore(t, "ratings"), capacity.DefaultLimits())
	if code, body := f.do(t, "GET", "/healthz", ""); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	code, body := f.do(t, "GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	for _, name := range []string{
		`backend_queue_length{backend="ratings"}`, `backend_in_service{backend="ratings"}`,
		`backend_queries_served_total{backend="ratings"}`, `backend_queries_cancelled_total{backend="ratings"}`,
		`backend_query_seconds_bucket{backend="ratings"`, `backend_queue_seconds_count{backend="ratings"}`,
		`backend_service_seconds_sum{backend="ratings"}`, `backend_limit{backend="ratings",limit="workers"} 8`,
		`backend_limit{backend="ratings",limit="hiccup_ms"} 0`,
	} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	f.srv.SetDraining(true)
	if code, _ := f.do(t, "GET", "/healthz", ""); code != 503 {
		t.Fatalf("healthz while draining: %d", code)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
