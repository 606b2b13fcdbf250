package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/robinhoodcache/robinhood/lib/testutil"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/otlp"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc/rbctest"
)

// TestOTLPTracesFromTheRealSDK sends traces from the OpenTelemetry Go SDK
// through its OTLP/gRPC exporter (batched, so a request's query spans and
// its server span often come in different exports) and checks the RBC
// exactly against the records the traces describe: uncompressed, and gzip
// compressed as the OpenTelemetry Collector's otlp exporter sends by default
// (the OTLP specification has receivers accept both). In this process the
// exporter registers gzip itself, so only the binary's test
// (cmd/rbcserver, TestBinaryAcceptsGzip) shows the server accepts it alone.
func TestOTLPTracesFromTheRealSDK(t *testing.T) {
	for _, compression := range []string{"none", "gzip"} {
		t.Run(compression, func(t *testing.T) {
			opts := []otlptracegrpc.Option{}
			if compression != "none" {
				opts = append(opts, otlptracegrpc.WithCompressor(compression))
			}
			otlpFromTheSDK(t, opts...)
		})
	}
}

func otlpFromTheSDK(t *testing.T, opts ...otlptracegrpc.Option) {
	names := map[string]uint32{"catalog": 0, "ratings": 1, "reviews": 2}
	h := start(t, func(c *Config) { c.OTLP = otlp.Config{Backends: names} })
	ctx := ctxT(t)
	addr := strings.TrimPrefix(h.conn.Target(), "passthrough:///")
	exp, err := otlptracegrpc.New(ctx, append([]otlptracegrpc.Option{otlptracegrpc.WithEndpoint(addr),
		otlptracegrpc.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithMaxExportBatchSize(7), sdktrace.WithBatchTimeout(20*time.Millisecond), sdktrace.WithBlocking()),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("shop"))),
	)
	tr := tp.Tracer("test")
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Add(-time.Minute)
	var lat, be []uint32
	want := map[string]int{}
	backendNames := []string{"catalog", "ratings", "reviews"}
	for i := range 600 {
		t0 := base.Add(time.Duration(i) * time.Millisecond)
		ctxR, req := tr.Start(context.Background(), "GET /item", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(t0))
		// An internal span: neither a request nor a query.
		_, in := tr.Start(ctxR, "render", trace.WithTimestamp(t0))
		in.End(trace.WithTimestamp(t0.Add(time.Microsecond)))
		want["other"]++
		nq := 3
		if i%100 == 7 {
			nq = 0 // a request without queries is not recorded
		}
		lastEnd, last := time.Duration(-1), ""
		for q := range nq {
			name := backendNames[q]
			key := "peer.service"
			if q == 2 && i%3 == 0 {
				key = "server.address" // the second attribute, when the first is absent
			}
			if i%50 == 11 && q == 1 {
				name = "mystery" // a backend the topology does not know
			}
			end := time.Duration(1+rng.IntN(200_000)) * time.Microsecond
			_, qs := tr.Start(ctxR, "query "+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(t0),
				trace.WithAttributes(attribute.String(key, name)))
			qs.End(trace.WithTimestamp(t0.Add(end)))
			if end > lastEnd {
				lastEnd, last = end, name
			}
			if name == "mystery" {
				want["unknown_backend"]++
			} else {
				want["query"]++
			}
		}
		total := lastEnd + time.Duration(rng.IntN(500))*time.Microsecond
		if nq == 0 {
			total = time.Millisecond
		}
		req.End(trace.WithTimestamp(t0.Add(total)))
		switch {
		case nq == 0:
			want["no_queries"]++
		case last == "mystery":
			want["unattributed"]++
		default:
			want["request"]++
			lat = append(lat, uint32(total.Microseconds()))
			be = append(be, names[last])
		}
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ref := rbc.BruteForce(lat, be, rbctest.PaperBand())
	got, err := h.client.GetRBC(ctx, &robinhoodv1.GetRBCRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetWindowRequests() != uint64(ref.N) || got.GetBandRequests() != ref.Band ||
		got.GetLowLatencyUs() != ref.Low || got.GetHighLatencyUs() != ref.High {
		t.Fatalf("window %d band %d [%d, %d], want %d %d [%d, %d]", got.GetWindowRequests(), got.GetBandRequests(),
			got.GetLowLatencyUs(), got.GetHighLatencyUs(), ref.N, ref.Band, ref.Low, ref.High)
	}
	gotCounts := map[uint32]uint64{}
	for _, b := range got.GetBackends() {
		if b.GetBlockingCount() > 0 {
			gotCounts[b.GetBackend()] = b.GetBlockingCount()
		}
	}
	wantCounts := map[uint32]uint64{}
	for _, c := range ref.Backends {
		if c.Blocking > 0 {
			wantCounts[c.Backend] = c.Blocking
		}
	}
	if len(gotCounts) != len(wantCounts) {
		t.Fatalf("blocking counts %v, want %v", gotCounts, wantCounts)
	}
	for k, v := range wantCounts {
		if gotCounts[k] != v {
			t.Fatalf("blocking counts %v, want %v", gotCounts, wantCounts)
		}
	}
	page := get(t, h.http+"/metrics", 200)
	for outcome, n := range want {
		line := `rbcserver_otlp_spans_total{outcome="` + outcome + `"} ` + strconv.Itoa(n)
		if !strings.Contains(page, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	if !slices.Contains(testutil.ReflectedServices(t, h.conn), "opentelemetry.proto.collector.trace.v1.TraceService") {
		t.Error("reflection does not list the OTLP trace service")
	}
}

// tracesWithRemoteParents is n requests as an application behind a gateway
// exports them: each server span has a parent from another process (the
// propagated traceparent), with two client spans under it.
func tracesWithRemoteParents(n int) *collectortrace.ExportTraceServiceRequest {
	var spans []*tracepb.Span
	for i := range n {
		tid := make([]byte, 16)
		binary.BigEndian.PutUint64(tid[8:], uint64(i+1))
		id := func(b byte) []byte { return []byte{b, 0, 0, 0, 0, 0, 0, byte(i)} }
		attr := func(v string) []*commonpb.KeyValue {
			return []*commonpb.KeyValue{{Key: "peer.service", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}}
		}
		spans = append(spans,
			&tracepb.Span{TraceId: tid, SpanId: id(2), ParentSpanId: id(1), Kind: tracepb.Span_SPAN_KIND_CLIENT,
				StartTimeUnixNano: 1000, EndTimeUnixNano: 5000, Attributes: attr("catalog")},
			&tracepb.Span{TraceId: tid, SpanId: id(3), ParentSpanId: id(1), Kind: tracepb.Span_SPAN_KIND_CLIENT,
				StartTimeUnixNano: 1000, EndTimeUnixNano: 9000, Attributes: attr("ratings")},
			&tracepb.Span{TraceId: tid, SpanId: id(1), ParentSpanId: id(9), Kind: tracepb.Span_SPAN_KIND_SERVER,
				StartTimeUnixNano: 0, EndTimeUnixNano: 10_000})
	}
	return &collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}
}

// A server span with a parent (a gateway propagated a traceparent) is a
// request by default; in root mode it is not, and once almost every span
// is unusable the server says so in its log and in not_request.
func TestOTLPServerSpansWithARemoteParent(t *testing.T) {
	names := map[string]uint32{"catalog": 0, "ratings": 1}
	for _, mode := range []otlp.Mode{otlp.ModeServer, otlp.ModeRoot} {
		var logs bytes.Buffer
		h := start(t, func(c *Config) {
			c.OTLP = otlp.Config{Mode: mode, Backends: names}
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		tc := collectortrace.NewTraceServiceClient(h.conn)
		if _, err := tc.Export(ctxT(t), tracesWithRemoteParents(1200)); err != nil {
			t.Fatal(err)
		}
		got, err := h.client.GetRBC(ctxT(t), &robinhoodv1.GetRBCRequest{})
		if err != nil {
			t.Fatal(err)
		}
		page := get(t, h.http+"/metrics", 200)
		warned := strings.Contains(logs.String(), "almost every span is unusable")
		switch mode {
		case otlp.ModeServer:
			if got.GetWindowRequests() != 1200 || warned || !strings.Contains(page, `rbcserver_otlp_spans_total{outcome="request"} 1200`) {
				t.Fatalf("server mode: %d requests, warned %v", got.GetWindowRequests(), warned)
			}
		case otlp.ModeRoot:
			if got.GetWindowRequests() != 0 || !warned || !strings.Contains(page, `rbcserver_otlp_spans_total{outcome="not_request"} 1200`) {
				t.Fatalf("root mode: %d requests, warned %v, log %s", got.GetWindowRequests(), warned, logs.String())
			}
		}
	}
}
