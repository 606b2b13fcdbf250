package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/backends/load"
	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

func TestParseConfig(t *testing.T) {
	ok := func(args ...string) settings {
		t.Helper()
		c, err := parseConfig(args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return c
	}
	c := ok("--type", "sql", "--name", "catalog", "--workers", "3", "--rate", "250", "--hiccup-prob", "0.01", "--hiccup-ms", "50", "--rows", "10")
	if c.Limits.Workers != 3 || c.Limits.Rate != 250 || c.Limits.HiccupProb != 0.01 || c.Limits.HiccupMs != 50 || c.Rows != 10 {
		t.Fatalf("parsed %+v", c)
	}
	if !strings.Contains(c.DB, "robinhood-backend-catalog") {
		t.Fatalf("default --db %q is not named after the backend", c.DB)
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--name", "x"}, "--type is required"},
		{[]string{"--type", "nosql", "--name", "x"}, `backend.type (from --type): "nosql" is not one of kv, sql, compute`},
		{[]string{"--type", "kv"}, "--name is required"},
		{[]string{"--type", "kv", "--name", "a/b"}, `backend.name (from --name): "a/b" must be`},
		{[]string{"--type", "kv", "--name", "x", "--workers", "0"}, "--workers"},
		{[]string{"--type", "kv", "--name", "x", "--rate", "-1"}, "--rate"},
		{[]string{"--type", "kv", "--name", "x", "--extra-latency-ms", "-1"}, "--extra-latency-ms"},
		{[]string{"--type", "kv", "--name", "x", "--hiccup-prob", "1.5"}, "--hiccup-prob"},
		{[]string{"--type", "kv", "--name", "x", "--hiccup-ms", "-3"}, "--hiccup-ms"},
		{[]string{"--type", "kv", "--name", "x", "--queue-limit", "-3"}, "--queue-limit"},
		{[]string{"--type", "kv", "--name", "x", "--rows", "5"}, `backend.sql (from --rows): options of a sql backend, but type is "kv"`},
		{[]string{"--type", "sql", "--name", "x", "--redis", "127.0.0.1:6379"}, `backend.kv (from --redis): options of a kv backend, but type is "sql"`},
		{[]string{"--type", "sql", "--name", "x", "--matrix-size", "8"}, `backend.compute (from --matrix-size): options of a compute backend`},
		{[]string{"--type", "sql", "--name", "x", "--rows", "0"}, "--rows"},
		{[]string{"--type", "compute", "--name", "x", "--matrix-size", "5000"}, "--matrix-size"},
		{[]string{"--type", "kv", "--name", "x", "--max-bytes", "-1"}, "--max-bytes"},
		{[]string{"--type", "kv", "--name", "x", "--redis", "nohost"}, "--redis"},
		{[]string{"--type", "kv", "--name", "x", "--grpc-addr", "localhost"}, "--grpc-addr"},
		{[]string{"--type", "kv", "--name", "x", "--grpc-addr", ":1", "--http-addr", ":1"}, "different ports"},
		{[]string{"--type", "kv", "--name", "x", "--log-level", "loud"}, "--log-level"},
		{[]string{"--type", "kv", "--name", "x", "extra"}, "unexpected argument"},
		{[]string{"--type", "kv", "--name", "x", "--workers", "0"}, "backend.limits.workers (from --workers): 0 is out of range [1, 1000000]"},
		{[]string{"--id", "x"}, "--id and --replica need --topology"},
		{[]string{"--topology", "/nonexistent.yaml", "--id", "x"}, "topology: open /nonexistent.yaml"},
	}
	for _, b := range bad {
		_, err := parseConfig(b.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: error %v, want one mentioning %q", b.args, err, b.want)
		}
	}
}

func TestBadFlagsExitWithStatus2(t *testing.T) {
	bin := testutil.Binary(t, "./backends/cmd/backend")
	for _, args := range [][]string{
		{"--type", "kv", "--name", "x", "--workers", "0"},
		{"--type", "kv", "--name", "x", "--no-such-flag"},
	} {
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("%v: exit %v, want status 2; output:\n%s", args, err, out)
		}
		if !bytes.Contains(out, []byte("workers")) && !bytes.Contains(out, []byte("no-such-flag")) {
			t.Fatalf("%v: output does not name the flag:\n%s", args, out)
		}
	}
}

type proc struct {
	p        *testutil.Process
	grpcAddr string
	httpAddr string
	conn     *grpc.ClientConn
	client   robinhoodv1.BackendServiceClient
}

func startBackend(t *testing.T, args ...string) *proc {
	t.Helper()
	bin := testutil.Binary(t, "./backends/cmd/backend")
	g, h := testutil.FreeAddr(t), testutil.FreeAddr(t)
	p := testutil.Start(t, bin, append([]string{"--grpc-addr", g, "--http-addr", h}, args...)...)
	testutil.WaitHTTP(t, "http://"+h+"/healthz")
	conn, err := grpc.NewClient(g, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(600<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &proc{p: p, grpcAddr: g, httpAddr: h, conn: conn, client: robinhoodv1.NewBackendServiceClient(conn)}
}

func (p *proc) get(t *testing.T, keys []string, sizes []uint32) *robinhoodv1.GetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := p.client.Get(ctx, &robinhoodv1.GetRequest{Keys: keys, Sizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (p *proc) http(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+p.httpAddr+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBinaryServesEveryType(t *testing.T) {
	_, redisAddr := testutil.Redis(t)
	cases := []struct {
		name string
		args []string
	}{
		{"kv", []string{"--type", "kv", "--name", "ratings", "--max-bytes", "1000000"}},
		{"kv-redis", []string{"--type", "kv", "--name", "ratings", "--redis", redisAddr}},
		{"sql", []string{"--type", "sql", "--name", "catalog", "--rows", "2000", "--db", filepath.Join(t.TempDir(), "catalog.db")}},
		{"compute", []string{"--type", "compute", "--name", "recommender", "--matrix-size", "24"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := startBackend(t, append(c.args, "--workers", "4")...)
			name := c.args[3]
			keys := []string{"k1", "user:1", "k1", "item/9", ""}
			sizes := []uint32{12, 23 << 10, 12, 1, 77}
			resp := p.get(t, keys, sizes)
			for i, k := range keys {
				if !bytes.Equal(resp.Values[i], value.Bytes(name, k, int(sizes[i]))) {
					t.Fatalf("values[%d] (key %q) is not value.Bytes(%s, …)", i, k, name)
				}
			}
			// Standard health service and reflection.
			hc, err := healthpb.NewHealthClient(p.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "robinhood.v1.BackendService"})
			if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health: %v %v", hc, err)
			}
			if svcs := listServices(t, p.conn); !strings.Contains(svcs, "robinhood.v1.BackendService") || !strings.Contains(svcs, "grpc.health.v1.Health") {
				t.Fatalf("reflection lists %s", svcs)
			}
			if code, body := p.http(t, "GET", "/metrics", ""); code != 200 ||
				!strings.Contains(body, fmt.Sprintf(`backend_queries_served_total{backend=%q} 5`, name)) ||
				!strings.Contains(body, fmt.Sprintf(`backend_info{backend=%q,type=%q} 1`, name, c.args[1])) {
				t.Fatalf("/metrics: %d\n%s", code, grepLines(body, "backend_"))
			}
			p.p.Signal(syscall.SIGTERM)
			err, done := p.p.Wait(10 * time.Second)
			if !done || err != nil {
				t.Fatalf("after SIGTERM: exited=%v err=%v\n%s", done, err, p.p.Output())
			}
		})
	}
}

func listServices(t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	return strings.Join(testutil.ReflectedServices(t, conn), ",")
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) && !strings.Contains(l, "_bucket") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The same offered load sees a much higher median latency once the admin
// API lowers the rate below it: work really queues.
func TestLoweringRateRaisesLatencyUnderSameLoad(t *testing.T) {
	p := startBackend(t, "--type", "kv", "--name", "ratings", "--workers", "8")
	cfg := load.Config{
		Rate: 200, Batch: 2, Warmup: 100 * time.Millisecond, Duration: time.Second,
		Keys: 1000, Size: 100, Timeout: 20 * time.Second, Poisson: true, Seed: 3,
		MaxInFlight: 10_000, Verify: "ratings",
	}
	fast, err := load.Run(context.Background(), p.client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := p.http(t, "PUT", "/admin/limits", `{"rate": 100}`); code != 200 || !strings.Contains(body, `"rate":100`) {
		t.Fatalf("PUT rate: %d %s", code, body)
	}
	slow, err := load.Run(context.Background(), p.client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("median call latency: rate unlimited %v, rate 100/s %v (offered 200 queries/s)", fast.Latency.P50, slow.Latency.P50)
	if fast.Failed+slow.Failed > 0 || fast.OK == 0 || slow.OK == 0 {
		t.Fatalf("calls failed: fast %+v slow %+v", fast, slow)
	}
	if slow.Latency.P50 < 5*fast.Latency.P50 {
		t.Fatalf("median latency %v at rate 100 is not well above %v unlimited", slow.Latency.P50, fast.Latency.P50)
	}
	if slow.QueueUsMean < 5*fast.QueueUsMean || slow.QueueUsMean == 0 {
		t.Fatalf("reported queueing %.0f µs/query at rate 100 vs %.0f unlimited", slow.QueueUsMean, fast.QueueUsMean)
	}
}

// SIGTERM lets queued and in-service queries finish within the timeout; the
// process then exits 0.
func TestShutdownDrainsQueuedWork(t *testing.T) {
	p := startBackend(t, "--type", "kv", "--name", "b", "--workers", "1", "--extra-latency-ms", "150")
	var wg sync.WaitGroup
	var callErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, callErr = p.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"a", "b", "c"}, Sizes: []uint32{1, 1, 1}})
	}()
	waitMetric(t, p, `backend_queue_length{backend="b"} 2`)
	p.p.Signal(syscall.SIGTERM)
	wg.Wait()
	if callErr != nil {
		t.Fatalf("a call queued before SIGTERM failed: %v", callErr)
	}
	if err, done := p.p.Wait(10 * time.Second); !done || err != nil {
		t.Fatalf("exit after drain: %v %v", done, err)
	}
}

func TestShutdownTimeoutFailsLeftoverWork(t *testing.T) {
	p := startBackend(t, "--type", "kv", "--name", "b", "--workers", "1", "--extra-latency-ms", "60000", "--shutdown-timeout", "200ms")
	errc := make(chan error, 1)
	go func() {
		_, err := p.client.Get(context.Background(), &robinhoodv1.GetRequest{Keys: []string{"a", "b"}, Sizes: []uint32{1, 1}})
		errc <- err
	}()
	waitMetric(t, p, `backend_queue_length{backend="b"} 1`)
	p.p.Signal(syscall.SIGTERM)
	if err := <-errc; status.Code(err) == codes.OK {
		t.Fatal("a call that could not finish within the shutdown timeout succeeded")
	}
	if err, done := p.p.Wait(10 * time.Second); !done || err != nil {
		t.Fatalf("exit after timeout: %v %v", done, err)
	}
}

func waitMetric(t *testing.T, p *proc, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, body := p.http(t, "GET", "/metrics", ""); strings.Contains(body, line+"\n") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("metric %q not seen within 10 s", line)
}

// A backend starts from the topology: its type, limits and options from
// its block, its addresses from the replica, flags on top.
func TestParseConfigFromTopology(t *testing.T) {
	topo := filepath.Join(t.TempDir(), "topology.yaml")
	body := `backends:
  - {id: 0, name: db, type: sql, seed: 5, limits: {workers: 3, rate: 100}, sql: {rows: 50},
     replicas: [{grpc: "127.0.0.1:7301", http: "127.0.0.1:7302"}, {grpc: "127.0.0.1:7303", http: "127.0.0.1:7304"}]}
  - {id: 1, name: mem, type: kv, replicas: [{grpc: "127.0.0.1:7305"}]}
  - {id: 2, name: mm, type: compute, compute: {matrix_size: 32}, replicas: [{grpc: "127.0.0.1:7306"}]}
  - {id: 3, name: ext}
  - {id: 4, name: untyped, replicas: [{grpc: "127.0.0.1:7307"}]}
`
	if err := os.WriteFile(topo, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"--topology", topo, "--id", "db", "--replica", "1", "--rate", "200"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != "sql" || c.Name != "db" || c.Limits.Workers != 3 || c.Limits.Rate != 200 || c.Rows != 50 ||
		c.GRPCAddr != "127.0.0.1:7303" || c.HTTPAddr != "127.0.0.1:7304" || c.Seed != 6 {
		t.Fatalf("parsed %+v", c)
	}
	c, err = parseConfig([]string{"--topology", topo, "--id", "mem"}, io.Discard)
	if err != nil || c.MaxBytes != 256<<20 || c.Limits.Workers != 8 || c.HTTPAddr != "127.0.0.1:7200" {
		t.Fatalf("defaults from the schema: %+v %v", c, err)
	}
	if c, err = parseConfig([]string{"--topology", topo, "--id", "mm"}, io.Discard); err != nil || c.MatrixSize != 32 {
		t.Fatalf("compute options from the topology: %+v %v", c, err)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--topology", topo, "--id", "nope"}, `--id: "nope" is not a backend`},
		{[]string{"--topology", topo, "--id", "db", "--replica", "2"}, "--replica: 2 is not a replica of backend db (it has 2)"},
		{[]string{"--topology", topo, "--id", "db", "--workers", "0"}, "backends[0].limits.workers (from --workers): 0 is out of range"},
		{[]string{"--topology", topo}, "--id is required with --topology"},
		{[]string{"--topology", topo, "--id", "ext"}, "backends[3]: backend ext has no replicas: bin/backend serves one of them"},
		{[]string{"--topology", topo, "--id", "untyped"}, "backends[4].type: bin/backend needs the backend's data path"},
	} {
		if _, err := parseConfig(bad.args, io.Discard); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want %q", bad.args, err, bad.want)
		}
	}
}
