package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/robinhoodcache/robinhood/lib/testutil"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc/rbctest"
)

// fakeClock is a settable clock for arrival times and windows.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// harness is one server serving on real loopback listeners.
type harness struct {
	srv    *Server
	clock  *fakeClock
	client robinhoodv1.RBCServiceClient
	conn   *grpc.ClientConn
	http   string // base URL
	stop   func() error
}

func start(t testing.TB, mutate func(*Config)) *harness {
	t.Helper()
	cfg := DefaultConfig()
	clock := newFakeClock()
	cfg.Clock = clock.Now
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, gl, hl, 30*time.Second) }()
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			serveErr = <-served
		})
		return serveErr
	}
	t.Cleanup(func() { _ = stop() })
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &harness{
		srv: srv, clock: clock, conn: conn,
		client: robinhoodv1.NewRBCServiceClient(conn),
		http:   "http://" + hl.Addr().String(),
		stop:   stop,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// report sends batches on one stream and returns the server's response.
func (h *harness) report(t *testing.T, batches ...*robinhoodv1.ReportRequest) (*robinhoodv1.ReportResponse, error) {
	t.Helper()
	stream, err := h.client.Report(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if err := stream.Send(b); err != nil {
			break // the server ended the stream; CloseAndRecv has its status
		}
	}
	return stream.CloseAndRecv()
}

func (h *harness) getRBC(t *testing.T, req *robinhoodv1.GetRBCRequest) *robinhoodv1.GetRBCResponse {
	t.Helper()
	resp, err := h.client.GetRBC(ctxT(t), req)
	if err != nil {
		t.Fatalf("GetRBC(%v): %v", req, err)
	}
	return resp
}

func batch(app string, lat, be []uint32) *robinhoodv1.ReportRequest {
	return &robinhoodv1.ReportRequest{AppServerId: app, LatencyUs: lat, BlockingBackend: be}
}

func randomBatch(r *rand.Rand, n, backends int) *robinhoodv1.ReportRequest {
	lat := make([]uint32, n)
	be := make([]uint32, n)
	for i := range lat {
		be[i] = uint32(r.IntN(backends))
		lat[i] = uint32(math.Exp(7 + 0.5*float64(be[i]%3) + 0.7*r.NormFloat64()))
	}
	return batch("app", lat, be)
}

// want is the expected response for a window, from the brute-force reference.
func want(lat, be []uint32, p rbc.Params) rbc.Result { return rbc.BruteForce(lat, be, p) }

func checkResponse(t *testing.T, got *robinhoodv1.GetRBCResponse, w rbc.Result) {
	t.Helper()
	var backends []rbc.Count
	for _, b := range got.GetBackends() {
		backends = append(backends, rbc.Count{Backend: b.GetBackend(), Blocking: b.GetBlockingCount(), Window: b.GetWindowBlocking()})
	}
	g := rbc.Result{
		N: int(got.GetWindowRequests()), Low: got.GetLowLatencyUs(), High: got.GetHighLatencyUs(),
		P50: got.GetP50LatencyUs(), P99: got.GetP99LatencyUs(), Band: got.GetBandRequests(), Backends: backends,
	}
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Fatalf("GetRBC:\n got %+v\nwant %+v", g, w)
	}
}

func TestReportThenGetRBC(t *testing.T) {
	h := start(t, nil)
	r := rand.New(rand.NewPCG(1, 1))
	var all []*robinhoodv1.ReportRequest
	var lat, be []uint32
	for range 20 {
		b := randomBatch(r, 1+r.IntN(500), 12)
		all = append(all, b)
		lat = append(lat, b.LatencyUs...)
		be = append(be, b.BlockingBackend...)
	}
	resp, err := h.report(t, all...)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAcceptedRecords() != uint64(len(lat)) || resp.GetAcceptedBatches() != 20 {
		t.Fatalf("ReportResponse %v, want %d records in 20 batches", resp, len(lat))
	}
	got := h.getRBC(t, &robinhoodv1.GetRBCRequest{})
	checkResponse(t, got, want(lat, be, rbctest.PaperBand()))
	if got.GetWindowSeconds() != 5 || got.GetLowPct() != 98.5 || got.GetHighPct() != 99.5 {
		t.Fatalf("echoed parameters %v/%v/%v, want the defaults 5/98.5/99.5", got.GetWindowSeconds(), got.GetLowPct(), got.GetHighPct())
	}
	if got.GetComputedUnixNanos() != h.clock.Now().UnixNano() {
		t.Fatalf("computed_unix_nanos %d, want the clock's %d", got.GetComputedUnixNanos(), h.clock.Now().UnixNano())
	}
	// Other parameters, on the same records.
	got = h.getRBC(t, &robinhoodv1.GetRBCRequest{LowPct: 90, HighPct: 99})
	checkResponse(t, got, want(lat, be, rbc.Params{LowPct: 90, HighPct: 99}))
	got = h.getRBC(t, &robinhoodv1.GetRBCRequest{HighPct: 100})
	checkResponse(t, got, want(lat, be, rbc.Params{LowPct: 98.5, HighPct: 100}))
}

func TestEmptyWindowIsAllZero(t *testing.T) {
	h := start(t, nil)
	got := h.getRBC(t, &robinhoodv1.GetRBCRequest{})
	if got.GetWindowRequests() != 0 || len(got.GetBackends()) != 0 || got.GetLowLatencyUs() != 0 ||
		got.GetHighLatencyUs() != 0 || got.GetBandRequests() != 0 || got.GetP99LatencyUs() != 0 {
		t.Fatalf("empty window: %v, want zero counts", got)
	}
}

func TestWindowExpiresWithTheClock(t *testing.T) {
	h := start(t, nil) // default window 5 s
	first := batch("a", []uint32{100, 200, 300}, []uint32{0, 1, 2})
	second := batch("b", []uint32{1000, 2000}, []uint32{3, 3})
	if _, err := h.report(t, first); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(3 * time.Second)
	if _, err := h.report(t, second); err != nil {
		t.Fatal(err)
	}
	n := func(req *robinhoodv1.GetRBCRequest) uint64 { return h.getRBC(t, req).GetWindowRequests() }

	if got := n(&robinhoodv1.GetRBCRequest{}); got != 5 {
		t.Fatalf("at +3 s the 5 s window holds %d records, want 5", got)
	}
	h.clock.Advance(2 * time.Second) // first batch is exactly 5 s old: still in
	if got := n(&robinhoodv1.GetRBCRequest{}); got != 5 {
		t.Fatalf("at +5 s the 5 s window holds %d records, want 5 (arrival ≥ now − window)", got)
	}
	h.clock.Advance(time.Millisecond)
	got := h.getRBC(t, &robinhoodv1.GetRBCRequest{})
	checkResponse(t, got, want(second.LatencyUs, second.BlockingBackend, rbctest.PaperBand()))
	if got := n(&robinhoodv1.GetRBCRequest{WindowSeconds: 10}); got != 5 {
		t.Fatalf("a 10 s window holds %d records, want 5", got)
	}
	if got := n(&robinhoodv1.GetRBCRequest{WindowSeconds: 0.5}); got != 0 {
		t.Fatalf("a 0.5 s window holds %d records, want 0", got)
	}
	h.clock.Advance(time.Hour)
	if got := n(&robinhoodv1.GetRBCRequest{}); got != 0 {
		t.Fatalf("an hour later the window holds %d records, want 0", got)
	}
	if got := n(&robinhoodv1.GetRBCRequest{WindowSeconds: 1e300}); got != 5 {
		t.Fatalf("an unbounded window holds %d records, want all 5", got)
	}
}

// A batch that waited in transit (a paused server, a reconnect) is filed at
// the time its client cut it, clamped to the window and never before what the
// ring already holds (it keeps arrival order); one without a send time, or
// from a clock ahead of the server's, at its arrival.
func TestLateBatchesLandInTheirWindow(t *testing.T) {
	h := start(t, nil)                // window 5 s
	h.clock.Advance(10 * time.Second) // nothing is filed before the server started
	now := h.clock.Now()
	at := func(b *robinhoodv1.ReportRequest, d time.Duration) *robinhoodv1.ReportRequest {
		b.SentUnixNano = now.Add(d).UnixNano()
		return b
	}
	batches := []*robinhoodv1.ReportRequest{
		at(batch("a", []uint32{100}, []uint32{0}), -time.Hour), // filed at the window's edge
		at(batch("a", []uint32{200, 300}, []uint32{1, 1}), -3*time.Second),
		at(batch("a", []uint32{400}, []uint32{2}), -2*time.Second),
		at(batch("b", []uint32{500}, []uint32{3}), time.Minute), // a clock ahead: now
		batch("b", []uint32{600}, []uint32{3}),                  // no send time: now
	}
	if _, err := h.report(t, batches...); err != nil {
		t.Fatal(err)
	}
	n := func(w float64) uint64 {
		return h.getRBC(t, &robinhoodv1.GetRBCRequest{WindowSeconds: w}).GetWindowRequests()
	}
	for _, c := range []struct {
		window float64
		want   uint64
	}{{1, 2}, {2.5, 3}, {4, 5}, {5, 6}} {
		if got := n(c.window); got != c.want {
			t.Errorf("the last %g s hold %d records, want %d", c.window, got, c.want)
		}
	}
	if body := get(t, h.http+"/metrics", http.StatusOK); !strings.Contains(body, "rbcserver_late_batches_total 3\n") {
		t.Error("/metrics lacks rbcserver_late_batches_total 3")
	}
}

func TestRingKeepsTheNewestRecords(t *testing.T) {
	h := start(t, func(c *Config) { c.RingSize, c.MaxBatchFraction = 4, 1 })
	if _, err := h.report(t,
		batch("a", []uint32{1, 2, 3}, []uint32{0, 0, 0}),
		batch("a", []uint32{4, 5, 6}, []uint32{1, 1, 1}),
	); err != nil {
		t.Fatal(err)
	}
	got := h.getRBC(t, &robinhoodv1.GetRBCRequest{LowPct: 1, HighPct: 100})
	checkResponse(t, got, want([]uint32{3, 4, 5, 6}, []uint32{0, 1, 1, 1}, rbc.Params{LowPct: 1, HighPct: 100}))
}

func TestInvalidBatchIsRejectedWhole(t *testing.T) {
	h := start(t, nil)
	good := batch("a", []uint32{10, 20}, []uint32{1, 2})
	cases := []struct {
		name   string
		bad    *robinhoodv1.ReportRequest
		msg    string
		reason string
	}{
		{"latency without backend", batch("a", []uint32{1, 2, 77}, []uint32{0, 1}),
			"latency_us has 3 entries but blocking_backend has 2: latency_us[2] = 77 has no blocking backend", ReasonLengthMismatch},
		{"backend without latency", batch("a", []uint32{1}, []uint32{0, 9}),
			"blocking_backend has 2 entries but latency_us has 1: blocking_backend[1] = 9 has no latency", ReasonLengthMismatch},
	}
	stored := uint64(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A good batch, then the bad one, then a good one that is never read.
			_, err := h.report(t, good, tc.bad, good)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("error %v, want InvalidArgument containing %q", err, tc.msg)
			}
			stored += 2 // the first good batch stays
			if got := h.getRBC(t, &robinhoodv1.GetRBCRequest{}).GetWindowRequests(); got != stored {
				t.Fatalf("window holds %d records, want %d: the bad batch must change nothing", got, stored)
			}
		})
	}
	body := get(t, h.http+"/metrics", http.StatusOK)
	for _, line := range []string{
		`rbcserver_batches_rejected_total{reason="length_mismatch"} 2`,
		`rbcserver_records_rejected_total{reason="length_mismatch"} 5`,
		`rbcserver_records_ingested_total 4`,
		`rbcserver_batches_total 2`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func TestMaxBackendsFlagBoundsIDs(t *testing.T) {
	h := start(t, func(c *Config) { c.MaxBackends = 4 })
	if _, err := h.report(t, batch("a", []uint32{1, 2, 3, 4}, []uint32{0, 1, 2, 3})); err != nil {
		t.Fatalf("ids below --max-backends rejected: %v", err)
	}
	resp, err := h.report(t, batch("a", []uint32{1, 2}, []uint32{4, 3}))
	if err != nil || resp.GetAcceptedRecords() != 1 || resp.GetRejectedRecords() != 1 {
		t.Fatalf("id 4 with --max-backends 4: %v, %v; want it refused alone", resp, err)
	}
}

// One record with a bad backend costs that record only: the rest of its
// batch and the stream go on; the response and the metrics count it.
func TestOutOfRangeRecordsAreRefusedAlone(t *testing.T) {
	h := start(t, nil)
	resp, err := h.report(t,
		batch("a", []uint32{10, 20}, []uint32{1, 2}),
		batch("a", []uint32{1, 2, 3, 4}, []uint32{0, 1023, 5000, 70000}),
		batch("a", []uint32{30}, []uint32{3}))
	if err != nil || resp.GetAcceptedRecords() != 5 || resp.GetRejectedRecords() != 2 || resp.GetAcceptedBatches() != 3 {
		t.Fatalf("got %v, %v; want 5 records accepted in 3 batches and 2 refused", resp, err)
	}
	if got := h.getRBC(t, &robinhoodv1.GetRBCRequest{}).GetWindowRequests(); got != 5 {
		t.Fatalf("window holds %d records, want 5", got)
	}
	body := get(t, h.http+"/metrics", http.StatusOK)
	for _, line := range []string{`rbcserver_records_rejected_total{reason="backend_out_of_range"} 2`, `rbcserver_records_ingested_total 5`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// A stream that ends in an error says in its trailers how many of its
// records were stored and refused before it, so a client counts exactly
// what it lost.
func TestAStreamEndingInAnErrorCountsInItsTrailers(t *testing.T) {
	h := start(t, nil)
	stream, err := h.client.Report(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*robinhoodv1.ReportRequest{
		batch("a", []uint32{10, 20, 30}, []uint32{1, 2, 5000}),
		batch("a", []uint32{1, 2}, []uint32{0}), // arrays of different length: the stream ends
	} {
		if err := stream.Send(b); err != nil {
			break
		}
	}
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", err)
	}
	tr := stream.Trailer()
	if got := tr.Get(TrailerAccepted); len(got) != 1 || got[0] != "2" {
		t.Errorf("%s = %v, want 2", TrailerAccepted, got)
	}
	if got := tr.Get(TrailerRejected); len(got) != 1 || got[0] != "1" {
		t.Errorf("%s = %v, want 1", TrailerRejected, got)
	}
}

func TestOversizedMessageIsResourceExhausted(t *testing.T) {
	h := start(t, nil)
	// 1.7 M records with 5-byte varints: about 17 MB on the wire.
	n := 1_700_000
	lat := slices.Repeat([]uint32{math.MaxUint32}, n)
	be := slices.Repeat([]uint32{math.MaxUint32}, n)
	big := batch("a", lat, be)
	if size := proto.Size(big); size <= MaxMessageBytes {
		t.Fatalf("test batch is only %d bytes", size)
	}
	_, err := h.report(t, big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("error %v, want ResourceExhausted", err)
	}
	if got := h.getRBC(t, &robinhoodv1.GetRBCRequest{}).GetWindowRequests(); got != 0 {
		t.Fatalf("window holds %d records after an oversized batch, want 0", got)
	}
	if body := get(t, h.http+"/metrics", http.StatusOK); !strings.Contains(body, `rbcserver_batches_rejected_total{reason="too_large"} 1`) {
		t.Error("too_large rejection not counted")
	}
}

func TestBadGetRBCParameters(t *testing.T) {
	h := start(t, nil)
	cases := []struct {
		req *robinhoodv1.GetRBCRequest
		msg string
	}{
		{&robinhoodv1.GetRBCRequest{LowPct: 120}, "low_pct = 120 is outside (0, 100]"},
		{&robinhoodv1.GetRBCRequest{LowPct: -1}, "low_pct = -1 is outside (0, 100]"},
		{&robinhoodv1.GetRBCRequest{HighPct: 100.01}, "high_pct = 100.01 is outside (0, 100]"},
		{&robinhoodv1.GetRBCRequest{LowPct: 99.6}, "low_pct = 99.6 is above high_pct = 99.5"},
		{&robinhoodv1.GetRBCRequest{LowPct: 50, HighPct: 40}, "low_pct = 50 is above high_pct = 40"},
		{&robinhoodv1.GetRBCRequest{WindowSeconds: -1}, "window_seconds = -1 must be a finite number ≥ 0"},
		{&robinhoodv1.GetRBCRequest{WindowSeconds: math.Inf(1)}, "window_seconds = +Inf must be a finite number ≥ 0"},
		{&robinhoodv1.GetRBCRequest{HighPct: math.NaN()}, "high_pct = NaN is outside (0, 100]"},
	}
	for _, tc := range cases {
		_, err := h.client.GetRBC(ctxT(t), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.msg) {
			t.Errorf("GetRBC(%v): %v, want InvalidArgument %q", tc.req, err, tc.msg)
			continue
		}
		// The HTTP endpoint answers 400 with the same message.
		q := url.Values{}
		for name, v := range map[string]float64{"window_seconds": tc.req.WindowSeconds, "low_pct": tc.req.LowPct, "high_pct": tc.req.HighPct} {
			if v != 0 {
				q.Set(name, fmt.Sprint(v))
			}
		}
		body := get(t, h.http+"/v1/rbc?"+q.Encode(), http.StatusBadRequest)
		if strings.TrimSpace(body) != status.Convert(err).Message() {
			t.Errorf("/v1/rbc?%s: %q, want the gRPC message %q", q.Encode(), body, status.Convert(err).Message())
		}
	}
}

func TestHTTPQueryErrors(t *testing.T) {
	h := start(t, nil)
	for query, msg := range map[string]string{
		"window_seconds=abc": `window_seconds = "abc" is not a number`,
		"window=10":          `unknown query parameter "window" (accepted: window_seconds, low_pct, high_pct)`,
	} {
		if body := get(t, h.http+"/v1/rbc?"+query, http.StatusBadRequest); strings.TrimSpace(body) != msg {
			t.Errorf("/v1/rbc?%s: %q, want %q", query, body, msg)
		}
	}
	resp, err := http.Post(h.http+"/v1/rbc", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/rbc: %s, want 405", resp.Status)
	}
}

func TestHTTPSnapshotEqualsGRPC(t *testing.T) {
	h := start(t, nil)
	r := rand.New(rand.NewPCG(2, 2))
	if _, err := h.report(t, randomBatch(r, 3000, 5), randomBatch(r, 3000, 5)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"", "window_seconds=2.5&low_pct=95&high_pct=99"} {
		body := get(t, h.http+"/v1/rbc?"+q, http.StatusOK)
		var fromHTTP robinhoodv1.GetRBCResponse
		if err := protojson.Unmarshal([]byte(body), &fromHTTP); err != nil {
			t.Fatalf("/v1/rbc?%s is not a GetRBCResponse: %v\n%s", q, err, body)
		}
		vals, _ := url.ParseQuery(q)
		req := &robinhoodv1.GetRBCRequest{}
		fmt.Sscan(vals.Get("window_seconds"), &req.WindowSeconds)
		fmt.Sscan(vals.Get("low_pct"), &req.LowPct)
		fmt.Sscan(vals.Get("high_pct"), &req.HighPct)
		fromGRPC := h.getRBC(t, req) // the clock stands still: same snapshot
		if !proto.Equal(&fromHTTP, fromGRPC) {
			t.Fatalf("/v1/rbc?%s:\n%v\ngRPC:\n%v", q, &fromHTTP, fromGRPC)
		}
	}
}

func TestHTTPJSONUsesProtoNamesAndEmitsZeros(t *testing.T) {
	h := start(t, nil)
	var doc map[string]any
	if err := json.Unmarshal([]byte(get(t, h.http+"/v1/rbc", http.StatusOK)), &doc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"backends", "window_requests", "low_latency_us", "high_latency_us",
		"computed_unix_nanos", "band_requests", "window_seconds", "low_pct", "high_pct",
		"p50_latency_us", "p99_latency_us"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("JSON snapshot of an empty window lacks %q: %v", key, doc)
		}
	}
	if doc["window_requests"] != "0" { // proto3 JSON: 64-bit integers are strings
		t.Errorf("window_requests = %#v, want \"0\"", doc["window_requests"])
	}
}

func TestMetricsHoldTheDefaultSnapshot(t *testing.T) {
	h := start(t, nil)
	// 200 records; the band P98.5–P99.5 is ranks 197…199: latencies 197…199,
	// all blocked by backend 7; the rest by backend 2.
	lat := make([]uint32, 200)
	be := make([]uint32, 200)
	for i := range lat {
		lat[i] = uint32(i + 1)
		be[i] = 2
		if lat[i] >= 197 && lat[i] <= 199 {
			be[i] = 7
		}
	}
	if _, err := h.report(t, batch("a", lat, be)); err != nil {
		t.Fatal(err)
	}
	h.getRBC(t, &robinhoodv1.GetRBCRequest{})
	h.getRBC(t, &robinhoodv1.GetRBCRequest{LowPct: 1}) // not the defaults: does not touch the gauges
	body := get(t, h.http+"/metrics", http.StatusOK)
	for _, line := range []string{
		`rbcserver_blocking_requests{backend="7"} 3`,
		`rbcserver_blocking_requests{backend="2"} 0`,
		`rbcserver_band_share{backend="7"} 1`,
		`rbcserver_band_share{backend="2"} 0`,
		`rbcserver_records_ingested_total 200`,
		`rbcserver_ring_records 200`,
		`rbcserver_report_streams 0`,
		`rbcserver_getrbc_compute_seconds_count 2`,
		`rbcserver_window_requests 200`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, "\n"+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// When the window empties, stale backends disappear from the gauges.
	h.clock.Advance(time.Minute)
	h.getRBC(t, &robinhoodv1.GetRBCRequest{WindowSeconds: 5}) // explicit defaults count too
	body = get(t, h.http+"/metrics", http.StatusOK)
	if strings.Contains(body, "rbcserver_blocking_requests{") || !strings.Contains(body, "rbcserver_window_requests 0\n") {
		t.Errorf("after the window emptied /metrics still has per-backend gauges:\n%s", grep(body, "rbcserver_"))
	}
}

func TestHealthAndReflection(t *testing.T) {
	h := start(t, nil)
	if body := get(t, h.http+"/healthz", http.StatusOK); body != "ok\n" {
		t.Fatalf("/healthz: %q", body)
	}
	hc := healthpb.NewHealthClient(h.conn)
	for _, svc := range []string{"", "robinhood.v1.RBCService"} {
		resp, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v, %v", svc, resp, err)
		}
	}
	names := testutil.ReflectedServices(t, h.conn)
	for _, want := range []string{"robinhood.v1.RBCService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
	h.srv.Drain()
	get(t, h.http+"/healthz", http.StatusServiceUnavailable)
	resp2, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp2.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after Drain: %v, %v; want NOT_SERVING", resp2, err)
	}
}

func TestShutdownEndsOpenStreams(t *testing.T) {
	h := start(t, nil)
	stream, err := h.client.Report(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(batch("a", []uint32{1}, []uint32{0})); err != nil {
		t.Fatal(err)
	}
	// Wait until the server has stored the batch, so the stream is open.
	for h.srv.ring.Len() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := h.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	_, err = stream.CloseAndRecv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "shutting down") {
		t.Fatalf("open stream ended with %v, want Unavailable from the drain (not a hard stop)", err)
	}
}

func TestConcurrentReportsAndQueries(t *testing.T) {
	h := start(t, func(c *Config) { c.RingSize = 5000 })
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			stream, err := h.client.Report(context.Background())
			if err != nil {
				fail(err)
				return
			}
			for range 50 {
				if err := stream.Send(randomBatch(r, 200, 8)); err != nil {
					break
				}
			}
			if resp, err := stream.CloseAndRecv(); err != nil || resp.GetAcceptedRecords() != 50*200 {
				fail(fmt.Errorf("stream %d: %v, %v", w, resp, err))
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			resp, err := h.client.GetRBC(context.Background(), &robinhoodv1.GetRBCRequest{})
			if err != nil {
				fail(err)
				return
			}
			var sum uint64
			for _, b := range resp.GetBackends() {
				sum += b.GetWindowBlocking()
			}
			if sum != resp.GetWindowRequests() || resp.GetWindowRequests() > 5000 {
				fail(fmt.Errorf("inconsistent snapshot: window %d, per-backend sum %d", resp.GetWindowRequests(), sum))
				return
			}
		}
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := h.getRBC(t, &robinhoodv1.GetRBCRequest{}).GetWindowRequests(); got != 5000 {
		t.Fatalf("window holds %d records, want the full ring of 5000", got)
	}
}

func TestConfigValidation(t *testing.T) {
	base := DefaultConfig()
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	cases := []struct {
		mutate func(*Config)
		msg    string
	}{
		{func(c *Config) { c.RingSize = 0 }, "ring_size: 0 is out of range [1, 100000000]"},
		{func(c *Config) { c.Window = 0 }, "window: must be positive"},
		{func(c *Config) { c.LowPct = 0 }, "low_pct: 0.0 is out of range (0, 100]"},
		{func(c *Config) { c.HighPct = 101 }, "high_pct: 101.0 is out of range (0, 100]"},
		{func(c *Config) { c.LowPct, c.HighPct = 99, 98 }, "low_pct: 99.0 is above high_pct 98.0"},
		{func(c *Config) { c.MaxBackends = 0 }, "max_backends: 0 is out of range [1, 65536]"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || err.Error() != tc.msg {
			t.Errorf("Validate() = %v, want %q", err, tc.msg)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New accepted an invalid config (%s)", tc.msg)
		}
	}
}

func get(t *testing.T, url string, wantStatus int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("GET %s: %s, want %d\n%s", url, resp.Status, wantStatus, body)
	}
	return string(body)
}

func grep(text, prefix string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// One reporter cannot take over the window: beyond MaxAppShare × the mean of
// the others its records are thinned (its stream goes on, nothing refused),
// so what it holds stays within the bound; a batch over MaxBatchFraction of
// the ring is still refused whole.
// With two reporters the bound still bounds: one may hold 2 × the other's
// records, two thirds of the window (a share of a "fair share" that counts
// the reporter itself would allow 100%).
func TestTwoReportersAreBoundedToo(t *testing.T) {
	h := start(t, func(c *Config) { c.RingSize, c.MaxAppShare = 1000, 2 })
	h.clock.Advance(10 * time.Second)
	lat, be := make([]uint32, 20), make([]uint32, 20)
	if _, err := h.report(t, batch("honest", lat, be)); err != nil {
		t.Fatal(err)
	}
	lat, be = make([]uint32, 40), make([]uint32, 40)
	if _, err := h.report(t, batch("evil", lat, be)); err != nil {
		t.Fatalf("2 × the other's records: %v", err)
	}
	more := make([]uint32, 60)
	if resp, err := h.report(t, batch("evil", more[:1], more[:1]), batch("evil", more, more)); err != nil || resp.GetAcceptedRecords() != 61 {
		t.Fatalf("more records: %v, %v (thinned, not refused: accepted)", resp, err)
	}
	if got := h.getRBC(t, &robinhoodv1.GetRBCRequest{}).GetWindowRequests(); got != 60 {
		t.Fatalf("window %d, want 60: evil holds at most two thirds", got)
	}
}

func TestOneReporterCannotFillTheWindow(t *testing.T) {
	h := start(t, func(c *Config) { c.RingSize, c.MaxAppShare = 1000, 2 })
	h.clock.Advance(10 * time.Second)
	ones := func(n int, be uint32) ([]uint32, []uint32) {
		lat, b := make([]uint32, n), make([]uint32, n)
		for i := range lat {
			lat[i], b[i] = 1000, be
		}
		return lat, b
	}
	for _, app := range []string{"a", "b", "c"} {
		lat, be := ones(20, 0)
		if _, err := h.report(t, batch(app, lat, be)); err != nil {
			t.Fatal(err)
		}
	}
	// 60 records from 3 app servers. "evil", a fourth, may hold at most 2 ×
	// the mean of the others' (2 × 60/3 = 40): its first 30 are stored, of 31
	// more only 10 (the bound), the rest thinned; its streams go on.
	lat, be := ones(30, 7)
	if _, err := h.report(t, batch("evil", lat, be)); err != nil {
		t.Fatalf("30 records within the share: %v", err)
	}
	lat, be = ones(31, 7)
	if _, err := h.report(t, batch("evil", lat, be)); err != nil {
		t.Fatalf("beyond the share: %v (thinned, not refused)", err)
	}
	rbc := h.getRBC(t, &robinhoodv1.GetRBCRequest{})
	if got := rbc.GetWindowRequests(); got != 100 {
		t.Fatalf("the window holds %d records, want 100 (evil's 40 and the others' 60)", got)
	}
	for _, b := range rbc.GetBackends() {
		if b.GetBackend() == 7 && b.GetWindowBlocking() != 40 {
			t.Fatalf("evil's backend blocks %d records of the window, want its bound 40", b.GetWindowBlocking())
		}
	}
	// A batch over 1/16 of the ring (62 records) is refused whatever the share.
	lat, be = ones(63, 0)
	if _, err := h.report(t, batch("a", lat, be)); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "more than 0.0625 of the ring") {
		t.Fatalf("a 63-record batch: %v", err)
	}
	body := get(t, h.http+"/metrics", http.StatusOK)
	for _, line := range []string{`rbcserver_app_records_thinned_total{app_server="evil"} 21`, `rbcserver_app_records_refused_total{app_server="a"} 63`,
		`rbcserver_batches_rejected_total{reason="share"} 1`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	// Once the window moves on, the share is free again.
	h.clock.Advance(6 * time.Second)
	for _, app := range []string{"a", "b", "c"} {
		lat, be := ones(20, 0)
		if _, err := h.report(t, batch(app, lat, be)); err != nil {
			t.Fatal(err)
		}
	}
	lat, be = ones(40, 7)
	if _, err := h.report(t, batch("evil", lat, be)); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if got := h.getRBC(t, &robinhoodv1.GetRBCRequest{}).GetWindowRequests(); got != 100 {
		t.Fatalf("after the window: %d records, want 100 (evil's 40 kept whole)", got)
	}
	if _, err := New(Config{RingSize: 10, Window: time.Second, StatsRetention: time.Second, LowPct: 98.5, HighPct: 99.5, MaxBackends: 8, MaxAppShare: 0.5, MaxBatchFraction: 0.1}); err == nil ||
		!strings.Contains(err.Error(), "max_app_share") {
		t.Fatalf("max_app_share 0.5: %v", err)
	}
}

// An uneven fleet with the default bound (4): two app servers split 85/15,
// batch after batch, as a canary or a larger instance does. Nothing is
// refused; the larger one's records weigh 4 × the other's (60 of every 75
// stored, thinned evenly over each batch: its fastest and slowest requests
// both stay), the smaller one's are all kept.
func TestAnUnevenFleetIsWeighedNotRefused(t *testing.T) {
	h := start(t, nil)
	h.clock.Advance(10 * time.Second)
	const rounds = 20
	for round := range rounds {
		for _, app := range []struct {
			name string
			n    int
			be   uint32
		}{{"big", 850, 1}, {"small", 150, 2}} {
			lat, be := make([]uint32, app.n), make([]uint32, app.n)
			for i := range lat {
				lat[i], be[i] = uint32(1+i), app.be
			}
			if _, err := h.report(t, batch(app.name, lat, be)); err != nil {
				t.Fatalf("round %d, %s: %v", round, app.name, err)
			}
		}
		h.clock.Advance(100 * time.Millisecond)
	}
	rbc := h.getRBC(t, &robinhoodv1.GetRBCRequest{})
	var big, small uint64
	for _, b := range rbc.GetBackends() {
		switch b.GetBackend() {
		case 1:
			big = b.GetWindowBlocking()
		case 2:
			small = b.GetWindowBlocking()
		}
	}
	if small != rounds*150 || big < 4*small-850 || big > 4*small {
		t.Fatalf("stored: big %d, small %d; want small whole (%d) and big at 4 × it", big, small, rounds*150)
	}
	body := get(t, h.http+"/metrics", http.StatusOK)
	if !strings.Contains(body, `rbcserver_app_records_thinned_total{app_server="big"} `) || strings.Contains(body, `rbcserver_app_records_thinned_total{app_server="small"}`) ||
		strings.Contains(body, `rbcserver_app_records_refused_total{app_server=`) {
		t.Fatalf("/metrics: %s", grep(body, "rbcserver_app_records"))
	}
}

// thin keeps records evenly spread over a batch, the slowest and fastest
// ends included when enough are kept.
func TestThinKeepsAnEvenSpread(t *testing.T) {
	lat := make([]uint32, 10)
	for i := range lat {
		lat[i] = uint32(i)
	}
	for keep, want := range map[int][]uint32{10: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 5: {1, 3, 5, 7, 9}, 2: {2, 7}, 1: {5}, 0: {}} {
		l := append([]uint32(nil), lat...)
		got, be := thin(l, append([]uint32(nil), lat...), keep)
		if !slices.Equal(got, want) || !slices.Equal(be, want) {
			t.Errorf("keep %d: %v %v, want %v", keep, got, be, want)
		}
	}
}
