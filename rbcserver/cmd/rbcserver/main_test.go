package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc/rbctest"
)

const pkg = "./rbcserver/cmd/rbcserver"

// started is a running rbcserver binary.
type started struct {
	proc     *testutil.Process
	grpcAddr string
	httpURL  string
	client   robinhoodv1.RBCServiceClient
}

func startBinary(t *testing.T, extra ...string) *started {
	t.Helper()
	bin := testutil.Binary(t, pkg)
	g, h := testutil.FreeAddr(t), testutil.FreeAddr(t)
	// A long window: the test must not depend on how fast it runs.
	args := append([]string{"--grpc-addr", g, "--http-addr", h, "--window", "1h"}, extra...)
	p := testutil.Start(t, bin, args...)
	testutil.WaitHTTP(t, "http://"+h+"/healthz")
	conn, err := grpc.NewClient(g, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &started{proc: p, grpcAddr: g, httpURL: "http://" + h, client: robinhoodv1.NewRBCServiceClient(conn)}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func report(t *testing.T, c robinhoodv1.RBCServiceClient, batches ...*robinhoodv1.ReportRequest) (*robinhoodv1.ReportResponse, error) {
	t.Helper()
	stream, err := c.Report(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if stream.Send(b) != nil {
			break
		}
	}
	return stream.CloseAndRecv()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestBinaryServesReportAndGetRBC(t *testing.T) {
	s := startBinary(t)
	r := rand.New(rand.NewPCG(4, 2))
	var lat, be []uint32
	var batches []*robinhoodv1.ReportRequest
	for range 10 {
		b := &robinhoodv1.ReportRequest{AppServerId: "app0"}
		for range 1000 {
			b.LatencyUs = append(b.LatencyUs, uint32(100+r.IntN(20000)))
			b.BlockingBackend = append(b.BlockingBackend, uint32(r.IntN(6)))
		}
		lat = append(lat, b.LatencyUs...)
		be = append(be, b.BlockingBackend...)
		batches = append(batches, b)
	}
	resp, err := report(t, s.client, batches...)
	if err != nil || resp.GetAcceptedRecords() != 10000 || resp.GetAcceptedBatches() != 10 {
		t.Fatalf("Report: %v, %v; want 10000 records in 10 batches", resp, err)
	}

	got, err := s.client.GetRBC(ctxT(t), &robinhoodv1.GetRBCRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w := rbc.BruteForce(lat, be, rbctest.PaperBand())
	if got.GetWindowRequests() != uint64(w.N) || got.GetLowLatencyUs() != w.Low || got.GetHighLatencyUs() != w.High ||
		got.GetBandRequests() != w.Band || got.GetP50LatencyUs() != w.P50 || got.GetP99LatencyUs() != w.P99 {
		t.Fatalf("GetRBC %v\nwant %+v", got, w)
	}
	for i, b := range got.GetBackends() {
		if c := w.Backends[i]; b.GetBackend() != c.Backend || b.GetBlockingCount() != c.Blocking || b.GetWindowBlocking() != c.Window {
			t.Fatalf("backend entry %d = %v, want %+v", i, b, c)
		}
	}

	// /v1/rbc is the same computation as JSON (its own computed_unix_nanos).
	code, body := httpGet(t, s.httpURL+"/v1/rbc")
	if code != http.StatusOK {
		t.Fatalf("/v1/rbc: %d %s", code, body)
	}
	var fromHTTP robinhoodv1.GetRBCResponse
	if err := protojson.Unmarshal([]byte(body), &fromHTTP); err != nil {
		t.Fatalf("/v1/rbc: %v\n%s", err, body)
	}
	fromHTTP.ComputedUnixNanos = got.ComputedUnixNanos
	if !proto.Equal(&fromHTTP, got) {
		t.Fatalf("/v1/rbc %v\ngRPC %v", &fromHTTP, got)
	}
	if !strings.Contains(body, `"window_requests":"10000"`) || !strings.Contains(body, `"low_pct":98.5`) {
		t.Fatalf("/v1/rbc does not use proto field names: %s", body)
	}

	code, body = httpGet(t, s.httpURL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, name := range []string{
		"rbcserver_records_ingested_total 10000", "rbcserver_batches_total 10", "rbcserver_ring_records 10000",
		"rbcserver_report_streams 0", `rbcserver_records_rejected_total{reason="backend_out_of_range"} 0`,
		"rbcserver_getrbc_compute_seconds_bucket", "rbcserver_getrbc_compute_seconds_count 2",
		`rbcserver_blocking_requests{backend="0"}`, `rbcserver_band_share{backend="5"}`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
	if code, body := httpGet(t, s.httpURL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

func TestBinaryErrorCodes(t *testing.T) {
	s := startBinary(t, "--max-backends", "16")
	ok := &robinhoodv1.ReportRequest{LatencyUs: []uint32{1, 2}, BlockingBackend: []uint32{0, 15}}

	// An out-of-range backend costs its record alone.
	resp, err := report(t, s.client, ok, &robinhoodv1.ReportRequest{LatencyUs: []uint32{1, 2}, BlockingBackend: []uint32{3, 16}})
	if err != nil || resp.GetAcceptedRecords() != 3 || resp.GetRejectedRecords() != 1 {
		t.Errorf("out-of-range backend: %v, %v; want 3 accepted and 1 refused", resp, err)
	}
	_, err = report(t, s.client, &robinhoodv1.ReportRequest{LatencyUs: []uint32{1, 2, 3}, BlockingBackend: []uint32{3}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "latency_us[1] = 2 has no blocking backend") {
		t.Errorf("length mismatch: %v", err)
	}
	big := &robinhoodv1.ReportRequest{
		LatencyUs:       slices.Repeat([]uint32{1 << 31}, 1_700_000),
		BlockingBackend: slices.Repeat([]uint32{1 << 31}, 1_700_000),
	}
	if _, err := report(t, s.client, big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized batch: %v, want ResourceExhausted", err)
	}
	_, err = s.client.GetRBC(ctxT(t), &robinhoodv1.GetRBCRequest{LowPct: 101})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "low_pct = 101 is outside (0, 100]" {
		t.Errorf("bad percentile: %v", err)
	}
	if code, body := httpGet(t, s.httpURL+"/v1/rbc?low_pct=99.9&high_pct=99"); code != http.StatusBadRequest || strings.TrimSpace(body) != "low_pct = 99.9 is above high_pct = 99" {
		t.Errorf("/v1/rbc low > high: %d %q", code, body)
	}
	// The good batch and the good record of the mixed one were stored.
	got, err := s.client.GetRBC(ctxT(t), &robinhoodv1.GetRBCRequest{})
	if err != nil || got.GetWindowRequests() != 3 {
		t.Fatalf("after the rejections: %v, %v; want the 3 good records", got, err)
	}
}

func TestBinaryExitsZeroOnSIGTERMWithOpenStream(t *testing.T) {
	s := startBinary(t, "--shutdown-timeout", "30s")
	stream, err := s.client.Report(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&robinhoodv1.ReportRequest{LatencyUs: []uint32{5}, BlockingBackend: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	// Make sure the batch (and so the stream) reached the server.
	for {
		resp, err := s.client.GetRBC(ctxT(t), &robinhoodv1.GetRBCRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetWindowRequests() == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.proc.Signal(syscall.SIGTERM)
	werr, done := s.proc.Wait(20 * time.Second) // well below --shutdown-timeout: the drain ends the stream
	if !done {
		t.Fatal("rbcserver did not exit within 20 s of SIGTERM with a stream open")
	}
	if werr != nil {
		t.Fatalf("rbcserver exited with %v after SIGTERM, want status 0", werr)
	}
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("open stream ended with %v, want Unavailable", err)
	}
	if out := s.proc.Output(); !strings.Contains(out, `msg="rbcserver stopped" ingested_records=1`) {
		t.Fatalf("no shutdown log line:\n%s", out)
	}
}

func TestBinaryRejectsBadFlags(t *testing.T) {
	bin := testutil.Binary(t, pkg)
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"--ring-size", "0"}, "rbcserver: rbc_server.ring_size (from --ring-size): 0 is out of range [1, 100000000]"},
		{[]string{"--low-pct", "0"}, "rbcserver: rbc_server.low_pct (from --low-pct): 0.0 is out of range (0, 100]"},
		{[]string{"--high-pct", "100.5"}, "rbcserver: rbc_server.high_pct (from --high-pct): 100.5 is out of range (0, 100]"},
		{[]string{"--low-pct", "99.6"}, "rbcserver: rbc_server.low_pct (from --low-pct): 99.6 is above high_pct 99.5"},
		{[]string{"--window", "-1s"}, "rbcserver: rbc_server.window (from --window): must be positive"},
		{[]string{"--max-backends", "0"}, "rbcserver: max_backends: 0 is out of range [1, 65536]"},
		{[]string{"--shutdown-timeout", "0s"}, "rbcserver: --shutdown-timeout 0s must be positive"},
		{[]string{"--window", "soon"}, `rbcserver: rbc_server.window (from --window): "soon" is not a duration`},
		{[]string{"--grpc-addr", "127.0.0.1:99999"}, `rbcserver: rbc_server.grpc (from --grpc-addr): "127.0.0.1:99999" is not a host:port address`},
		{[]string{"--topology", "/nonexistent.yaml"}, "rbcserver: topology: open /nonexistent.yaml"},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"extra"}, `rbcserver: unexpected arguments ["extra"]`},
	}
	for _, tc := range cases {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("rbcserver %v: %v, want exit status 2\n%s", tc.args, err, out)
			continue
		}
		if !strings.Contains(string(out), tc.msg) {
			t.Errorf("rbcserver %v printed %q, want %q", tc.args, out, tc.msg)
		}
	}
}

func TestBinaryFailsWhenThePortIsTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bin := testutil.Binary(t, pkg)
	out, err := exec.Command(bin, "--grpc-addr", l.Addr().String(), "--http-addr", testutil.FreeAddr(t)).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "cannot listen for gRPC") {
		t.Fatalf("rbcserver on a taken port: %v, want exit status 1 and a message\n%s", err, out)
	}
}

// The RBC server starts from the topology's rbc_server block; a flag
// overrides one setting.
func TestBinaryStartsFromTheTopology(t *testing.T) {
	bin := testutil.Binary(t, pkg)
	g, h := testutil.FreeAddr(t), testutil.FreeAddr(t)
	topo := t.TempDir() + "/topology.yaml"
	body := "rbc_server: {grpc: \"" + g + "\", http: \"" + h + "\", window: 1h, low_pct: 90, high_pct: 95}\n" +
		"backends: [{id: 0, name: a, type: kv, replicas: [{grpc: 127.0.0.1:1}]}]\n"
	if err := os.WriteFile(topo, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Start(t, bin, "--topology", topo, "--high-pct", "99")
	testutil.WaitHTTP(t, "http://"+h+"/healthz")
	_, out := httpGet(t, "http://"+h+"/v1/rbc")
	for _, want := range []string{`"low_pct":90`, `"high_pct":99`, `"window_seconds":3600`} {
		if !strings.Contains(strings.ReplaceAll(out, " ", ""), want) {
			t.Fatalf("/v1/rbc = %s; want %s (topology settings with the flag on top)", out, want)
		}
	}
}

// TestBinaryAcceptsGzip sends a gzip-compressed Report and OTLP Export to
// the real binary (another process: a compressor registered in this test
// cannot help it) and checks both are counted. The OTLP specification has
// receivers accept gzip, and the Collector's otlp exporter sends it by
// default.
func TestBinaryAcceptsGzip(t *testing.T) {
	s := startBinary(t, "--otlp-request", "root")
	ctx := ctxT(t)
	gz := grpc.UseCompressor(gzip.Name)
	stream, err := s.client.Report(ctx, gz)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&robinhoodv1.ReportRequest{AppServerId: "app0", LatencyUs: []uint32{100, 200}, BlockingBackend: []uint32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.CloseAndRecv(); err != nil || resp.GetAcceptedRecords() != 2 {
		t.Fatalf("gzip Report: %v, %v", resp, err)
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	span := func(id, parent byte, kind tracepb.Span_SpanKind, end uint64, backend string) *tracepb.Span {
		sp := &tracepb.Span{TraceId: bytes.Repeat([]byte{7}, 16), SpanId: bytes.Repeat([]byte{id}, 8), Kind: kind,
			StartTimeUnixNano: 1, EndTimeUnixNano: end}
		if parent != 0 {
			sp.ParentSpanId = bytes.Repeat([]byte{parent}, 8)
		}
		if backend != "" {
			sp.Attributes = []*commonpb.KeyValue{{Key: "peer.service",
				Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: backend}}}}
		}
		return sp
	}
	req := &collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{
		Spans: []*tracepb.Span{
			span(2, 1, tracepb.Span_SPAN_KIND_CLIENT, 5_000, "3"),
			span(3, 1, tracepb.Span_SPAN_KIND_CLIENT, 9_000, "4"),
			span(1, 0, tracepb.Span_SPAN_KIND_SERVER, 10_000, ""),
		}}}}}}
	if _, err := collectortrace.NewTraceServiceClient(conn).Export(ctx, req, gz); err != nil {
		t.Fatalf("gzip OTLP Export: %v", err)
	}
	got, err := s.client.GetRBC(ctx, &robinhoodv1.GetRBCRequest{})
	if err != nil || got.GetWindowRequests() != 3 {
		t.Fatalf("GetRBC after the gzip calls: %v, %v; want 3 requests (2 reported, 1 from the trace)", got, err)
	}
	if _, body := httpGet(t, s.httpURL+"/metrics"); !strings.Contains(body, `rbcserver_otlp_spans_total{outcome="request"} 1`) {
		t.Fatal("the trace's request was not counted")
	}
}

// TestAnAuthenticatedStrangerMovesNothing: with a topology whose only app
// server is app0, a caller with a valid token that is not an app server of
// the topology (app1: its own token, its own app_server_id) has every record
// refused, so it cannot steer any cache; app0's are taken. OTLP exports are
// taken from --otlp-callers only.
func TestAnAuthenticatedStrangerMovesNothing(t *testing.T) {
	bin := testutil.Binary(t, pkg)
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := auth.WriteDev(secrets, nil, []string{"app0", "app1", "collector"}); err != nil {
		t.Fatal(err)
	}
	g, h := testutil.FreeAddr(t), testutil.FreeAddr(t)
	topo := filepath.Join(dir, "topology.yaml")
	body := fmt.Sprintf(`rbc_server: {grpc: %q, http: %q, window: 1h}
backends: [{id: 0, name: a, type: kv, replicas: [{grpc: "127.0.0.1:1"}]}]
app_servers: [{id: app0, http: "127.0.0.1:1", cache_mode: none}]
auth: {tokens: secrets/tokens, token: "secrets/{id}.token"}
`, g, h)
	if err := os.WriteFile(topo, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Start(t, bin, "--topology", topo)
	testutil.WaitTCP(t, g)
	dial := func(caller string) *grpc.ClientConn {
		c, err := auth.NewClient(auth.ClientOptions{TokenFile: filepath.Join(secrets, caller+auth.DevTokenSuffix)})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(g, c.DialOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	client := func(caller string) robinhoodv1.RBCServiceClient { return robinhoodv1.NewRBCServiceClient(dial(caller)) }
	lat, be := slices.Repeat([]uint32{900_000}, 1500), slices.Repeat([]uint32{0}, 1500)
	_, err := report(t, client("app1"), &robinhoodv1.ReportRequest{AppServerId: "app1", LatencyUs: lat, BlockingBackend: be})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"app1" is not an app server of the topology`) {
		t.Fatalf("app1's records: %v, want PermissionDenied", err)
	}
	if resp, err := report(t, client("app0"), &robinhoodv1.ReportRequest{AppServerId: "app0", LatencyUs: lat[:10], BlockingBackend: be[:10]}); err != nil || resp.GetAcceptedRecords() != 10 {
		t.Fatalf("app0's records: %v, %v", resp, err)
	}
	// An OTLP export from a caller that is not in --otlp-callers (default otlp).
	span := func(id, parent byte, kind tracepb.Span_SpanKind, backend string) *tracepb.Span {
		sp := &tracepb.Span{TraceId: bytes.Repeat([]byte{3}, 16), SpanId: bytes.Repeat([]byte{id}, 8), Kind: kind,
			StartTimeUnixNano: 1, EndTimeUnixNano: 900_000_000}
		if parent != 0 {
			sp.ParentSpanId = bytes.Repeat([]byte{parent}, 8)
			sp.Attributes = []*commonpb.KeyValue{{Key: "peer.service",
				Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: backend}}}}
		}
		return sp
	}
	export := &collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{
		Spans: []*tracepb.Span{span(2, 1, tracepb.Span_SPAN_KIND_CLIENT, "a"), span(1, 0, tracepb.Span_SPAN_KIND_SERVER, "")}}}}}}
	if _, err := collectortrace.NewTraceServiceClient(dial("collector")).Export(ctxT(t), export); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an export from the caller collector: %v, want PermissionDenied", err)
	}
	got, err := client("app0").GetRBC(ctxT(t), &robinhoodv1.GetRBCRequest{})
	if err != nil || got.GetWindowRequests() != 10 {
		t.Fatalf("the window: %v, %v; want app0's 10 records only", got, err)
	}
	// The refused export's spans were never assembled: none is counted as used.
	bearer, err := os.ReadFile(filepath.Join(secrets, "app0"+auth.DevBearerSuffix))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+h+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(bearer)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`rbcserver_otlp_spans_total{outcome="request"} 0`, `rbcserver_otlp_spans_total{outcome="query"} 0`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("/metrics after a refused export lacks %s", want)
		}
	}
}
