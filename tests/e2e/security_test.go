package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// TestSecuredStack runs the request path with every listener on TLS with
// client certificates and every call authenticated by a bearer token, all
// taken from the topology's auth and tls blocks: the app server reaches its
// backend and the RBC server with app0's token, the operator reaches the app
// server and the backend's admin API with its own, and nothing answers
// without one.
func TestSecuredStack(t *testing.T) {
	rbcBin := testutil.Binary(t, "./rbcserver/cmd/rbcserver")
	backendBin := testutil.Binary(t, "./backends/cmd/backend")
	appBin := testutil.Binary(t, "./appserver/cmd/appserver")
	dir := t.TempDir()
	if err := auth.WriteDev(filepath.Join(dir, "secrets"), nil, []string{"app0", "app1", "operator"}); err != nil {
		t.Fatal(err)
	}
	_, mc := testutil.Memcached(t, 16)
	rbcGRPC, rbcHTTP := testutil.FreeAddr(t), testutil.FreeAddr(t)
	beGRPC, beHTTP, appHTTP := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
	topo := fmt.Sprintf(`rbc_server: {grpc: %q, http: %q}
backends:
  - {id: 0, name: ratings, type: kv, replicas: [{grpc: %q, http: %q}]}
app_servers:
  - {id: app0, http: %q, cache_mode: partitioned, cache_budget_mb: 16, partitions: {ratings: %q}, controller: {min_partition_mb: 8}}
auth: {tokens: secrets/tokens, token: "secrets/{id}.token"}
tls: {ca: secrets/ca.pem, cert: secrets/cert.pem, key: secrets/key.pem, client_auth: true}
`, rbcGRPC, rbcHTTP, beGRPC, beHTTP, appHTTP, mc)
	topoPath := filepath.Join(dir, "topology.yaml")
	if err := os.WriteFile(topoPath, []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	rbc := testutil.Start(t, rbcBin, "--topology", topoPath)
	testutil.Start(t, backendBin, "--topology", topoPath, "--id", "ratings")
	testutil.Start(t, appBin, "--topology", topoPath, "--id", "app0")

	sec := func(caller string) *auth.Client {
		o := auth.ClientOptions{CA: filepath.Join(dir, "secrets", auth.DevCA),
			Cert: filepath.Join(dir, "secrets", auth.DevCert), Key: filepath.Join(dir, "secrets", auth.DevKey)}
		if caller != "" {
			o.TokenFile = filepath.Join(dir, "secrets", caller+".token")
		}
		c, err := auth.NewClient(o)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	op, anon := sec("operator"), sec("")
	opHTTP := &http.Client{Transport: op.Transport(nil), Timeout: 10 * time.Second}
	anonHTTP := &http.Client{Transport: anon.Transport(nil), Timeout: 10 * time.Second}
	get := func(c *http.Client, method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, base := range []string{"https://" + rbcHTTP, "https://" + beHTTP, "https://" + appHTTP} {
		deadline := time.Now().Add(15 * time.Second)
		for {
			if code, _ := get(anonHTTP, "GET", base+"/healthz", ""); code == 200 {
				break // health checks need no token
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/healthz did not answer 200 over TLS within 15 s", base)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Plain HTTP to a TLS listener gets nowhere.
	if code, _ := get(&http.Client{Timeout: 2 * time.Second}, "GET", "http://"+rbcHTTP+"/healthz", ""); code == 200 {
		t.Fatal("plain HTTP served by a TLS listener")
	}

	// The app server: 401 without a token; with one, the request runs
	// through the backend (tokens, mTLS) and is reported to the RBC server.
	req := fmt.Sprintf(`{"t": 1, "d": [{%s}]}`, queryJSON("ratings", []string{"k1", "k2"}, []int{100, 200}, 1))
	if code, body := get(anonHTTP, "POST", "https://"+appHTTP+"/v1/request", req); code != 401 || !strings.Contains(body, "Bearer") {
		t.Fatalf("request without a token: %d %q", code, body)
	}
	for i := 0; i < 20; i++ {
		if code, body := get(opHTTP, "POST", "https://"+appHTTP+"/v1/request", req); code != 200 {
			t.Fatalf("request with the operator's token: %d %q", code, body)
		}
	}

	// The RBC server: GetRBC without a token is Unauthenticated; with one
	// it counts the app server's records.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(c *auth.Client) pb.RBCServiceClient {
		conn, err := grpc.NewClient(rbcGRPC, c.DialOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewRBCServiceClient(conn)
	}
	if _, err := dial(anon).GetRBC(ctx, &pb.GetRBCRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetRBC without a token: %v", err)
	}
	rbcOp := dial(op)
	for {
		r, err := rbcOp.GetRBC(ctx, &pb.GetRBCRequest{WindowSeconds: 600})
		if err != nil {
			t.Fatalf("GetRBC with a token: %v", err)
		}
		if r.GetWindowRequests() >= 20 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the app server's records did not reach the RBC server (window has %d)", r.GetWindowRequests())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A token speaks for its own app server only.
	st, err := dial(sec("app1")).Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&pb.ReportRequest{AppServerId: "app0", LatencyUs: []uint32{1}, BlockingBackend: []uint32{0}})
	if _, err := st.CloseAndRecv(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `app_server_id "app0" is not the caller of this token ("app1")`) {
		t.Fatalf("a report for another app server: %v", err)
	}
	st, _ = dial(anon).Report(ctx)
	st.Send(&pb.ReportRequest{AppServerId: "app0", LatencyUs: []uint32{1}, BlockingBackend: []uint32{0}})
	if _, err := st.CloseAndRecv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a report without a token: %v", err)
	}
	if v := testutil.MetricClient(t, opHTTP, "https://"+rbcHTTP, `rbcserver_batches_rejected_total{reason="caller_mismatch"}`); v != 1 {
		t.Fatalf("caller_mismatch rejections: %v", v)
	}

	// The backend's admin API: refused without a token, nothing changes.
	admin := "https://" + beHTTP + "/admin/limits"
	if code, _ := get(anonHTTP, "PUT", admin, `{"workers": 1}`); code != 401 {
		t.Fatalf("PUT /admin/limits without a token: %d", code)
	}
	if code, body := get(opHTTP, "GET", admin, ""); code != 200 || strings.Contains(body, `"workers":1,`) {
		t.Fatalf("limits after a refused PUT: %d %s", code, body)
	}
	if code, body := get(opHTTP, "PUT", admin, `{"workers": 3}`); code != 200 {
		t.Fatalf("PUT /admin/limits with a token: %d %s", code, body)
	}
	if code, _ := get(anonHTTP, "GET", "https://"+beHTTP+"/metrics", ""); code != 401 {
		t.Fatalf("/metrics without a token: %d", code)
	}
	if !strings.Contains(rbc.Output(), "security=tokens(3)+mtls") {
		t.Fatalf("the RBC server's start-up log does not say its security:\n%s", rbc.Output())
	}
}

// TestExposedListenersNeedAuth: every server refuses a non-loopback address
// without a token file, exit status 2 and one line naming the address, and
// serves it with --insecure.
func TestExposedListenersNeedAuth(t *testing.T) {
	rbcBin := testutil.Binary(t, "./rbcserver/cmd/rbcserver")
	backendBin := testutil.Binary(t, "./backends/cmd/backend")
	appBin := testutil.Binary(t, "./appserver/cmd/appserver")
	dir := t.TempDir()
	topoPath := filepath.Join(dir, "topology.yaml")
	os.WriteFile(topoPath, []byte(`backends: [{id: 0, name: ratings, type: kv, replicas: [{grpc: "127.0.0.1:1"}]}]
app_servers: [{id: app0, http: "0.0.0.0:0", cache_mode: none}]
`), 0o644)
	for _, c := range []struct {
		name string
		bin  string
		args []string
		msg  string
	}{
		{"rbcserver", rbcBin, []string{"--grpc-addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0"}, "rbcserver: --grpc-addr 0.0.0.0:0: not a loopback address and no --auth-token-file"},
		{"backend", backendBin, []string{"--type", "kv", "--name", "a", "--grpc-addr", "127.0.0.1:0", "--http-addr", ":0"}, "backend: --http-addr :0: not a loopback address"},
		{"appserver", appBin, []string{"--topology", topoPath, "--id", "app0"}, "appserver: --http-addr 0.0.0.0:0: not a loopback address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testutil.Start(t, c.bin, c.args...)
			err, exited := p.Wait(10 * time.Second)
			if !exited || p.Cmd.ProcessState.ExitCode() != 2 || !strings.Contains(p.Output(), c.msg) || !strings.Contains(p.Output(), "--insecure") {
				t.Fatalf("exited %v (%v, code %d), output:\n%s", exited, err, p.Cmd.ProcessState.ExitCode(), p.Output())
			}
			p = testutil.Start(t, c.bin, append(c.args, "--insecure")...)
			if _, exited := p.Wait(time.Second); exited {
				t.Fatalf("with --insecure it exited:\n%s", p.Output())
			}
		})
	}
}
