package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	"google.golang.org/grpc"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc/rbctest"
)

// TestCollectorPipeline runs a real OpenTelemetry Collector, built with the
// Collector's own builder from deploy/otel/builder.yaml, with exactly the
// configuration the docs show (deploy/otel/collector.yaml): the OpenTelemetry
// Go SDK exports to it, and its otlp exporter (gzip by default, TLS, a
// bearer token) sends to a real RBC server, whose counts must equal the
// ones the traces describe. It runs twice: with TLS, the Collector's
// certificate variables unset, and with mutual TLS (docs/security.md's
// client_auth: true), the server requiring the certificate the Collector
// presents from ROBINHOOD_CERT and ROBINHOOD_KEY. Building the Collector
// takes about a minute and a half, so `make collector-check` builds it and
// runs this test with ROBINHOOD_OTELCOL set; without it the test is skipped.
func TestCollectorPipeline(t *testing.T) {
	otelcol := os.Getenv("ROBINHOOD_OTELCOL")
	if otelcol == "" {
		t.Skip("ROBINHOOD_OTELCOL is not set: make collector-check builds the Collector and runs this test")
	}
	for _, mutual := range []bool{false, true} {
		name := map[bool]string{false: "tls", true: "mutual-tls"}[mutual]
		t.Run(name, func(t *testing.T) { collectorPipeline(t, otelcol, mutual) })
	}
}

func collectorPipeline(t *testing.T, otelcol string, mutual bool) {
	root := testutil.RepoRoot(t)
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := auth.WriteDev(secrets, nil, []string{"collector", "operator"}); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(secrets, name) }
	rbcGRPC, rbcHTTP := testutil.FreeAddr(t), testutil.FreeAddr(t)
	args := []string{"--grpc-addr", rbcGRPC, "--http-addr", rbcHTTP, "--window", "1h",
		"--auth-token-file", file(auth.DevTokens), "--tls-cert", file(auth.DevCert), "--tls-key", file(auth.DevKey)}
	var env []string // ROBINHOOD_CERT and ROBINHOOD_KEY unset, as without client_auth
	reader := auth.ClientOptions{CA: file(auth.DevCA), TokenFile: file("operator" + auth.DevTokenSuffix)}
	if mutual {
		args = append(args, "--tls-client-ca", file(auth.DevCA))
		env = []string{"ROBINHOOD_CERT=" + file(auth.DevCert), "ROBINHOOD_KEY=" + file(auth.DevKey)}
		reader.Cert, reader.Key = file(auth.DevCert), file(auth.DevKey)
	}
	testutil.Start(t, testutil.Binary(t, "./rbcserver/cmd/rbcserver"), args...)
	testutil.WaitTCP(t, rbcGRPC)
	token, err := os.ReadFile(file("collector" + auth.DevBearerSuffix))
	if err != nil {
		t.Fatal(err)
	}
	otlpAddr := testutil.FreeAddr(t)
	env = append(env, "OTLP_GRPC_ENDPOINT="+otlpAddr, "ROBINHOOD_RBC="+rbcGRPC,
		"ROBINHOOD_CA="+file(auth.DevCA), "ROBINHOOD_TOKEN="+strings.TrimSpace(string(token)))
	col := testutil.StartEnv(t, env, otelcol, "--config", filepath.Join(root, "deploy", "otel", "collector.yaml"))
	testutil.WaitTCP(t, otlpAddr)

	const n = 2000
	lat, be := collectorTraces(t, otlpAddr, n)
	want := rbc.BruteForce(lat, be, rbctest.PaperBand())

	// Read the RBC as the operator, over TLS with its token (and its
	// certificate under mutual TLS).
	c, err := auth.NewClient(reader)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(rbcGRPC, c.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRBCServiceClient(conn)
	var got *pb.GetRBCResponse
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err = client.GetRBC(ctx, &pb.GetRBCRequest{})
		cancel()
		if err == nil && got.GetWindowRequests() >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || got.GetWindowRequests() != n {
		t.Fatalf("the RBC server has %d requests (%v), want %d; the Collector said:\n%s", got.GetWindowRequests(), err, n,
			col.Output())
	}
	if got.GetLowLatencyUs() != want.Low || got.GetHighLatencyUs() != want.High || got.GetBandRequests() != want.Band {
		t.Fatalf("band [%d, %d] with %d requests, want [%d, %d] with %d", got.GetLowLatencyUs(), got.GetHighLatencyUs(),
			got.GetBandRequests(), want.Low, want.High, want.Band)
	}
	for i, b := range got.GetBackends() {
		if w := want.Backends[i]; b.GetBackend() != w.Backend || b.GetBlockingCount() != w.Blocking {
			t.Fatalf("backend %d: %v, want %+v", i, b, w)
		}
	}
}

// collectorTraces exports n requests through the SDK to endpoint and returns
// the records they describe: each request's latency and the backend of the
// query that ended last.
func collectorTraces(t *testing.T, endpoint string, n int) (lat, be []uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(50*time.Millisecond), sdktrace.WithBlocking()), // drop nothing
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("shop"))))
	tr := tp.Tracer("collector-test")
	rng := rand.New(rand.NewPCG(7, 7))
	base := time.Now().Add(-time.Minute)
	for i := range n {
		t0 := base.Add(time.Duration(i) * time.Millisecond)
		ctxR, req := tr.Start(context.Background(), "GET /item", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(t0))
		lastEnd, last := time.Duration(-1), uint32(0)
		for q := range 3 {
			end := time.Duration(1+rng.IntN(100_000)) * time.Microsecond
			_, qs := tr.Start(ctxR, "query", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(t0),
				trace.WithAttributes(attribute.String("peer.service", strconv.Itoa(q))))
			qs.End(trace.WithTimestamp(t0.Add(end)))
			if end > lastEnd {
				lastEnd, last = end, uint32(q)
			}
		}
		total := lastEnd + 100*time.Microsecond
		req.End(trace.WithTimestamp(t0.Add(total)))
		lat, be = append(lat, uint32(total.Microseconds())), append(be, last)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return lat, be
}
