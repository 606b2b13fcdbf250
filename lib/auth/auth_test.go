package auth

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// TestTokenVectors runs the shared token-file vectors (tests/vectors/auth).
func TestTokenVectors(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testutil.RepoRoot(t), "tests", "vectors", "auth", "*.tokens"))
	if len(files) < 5 {
		t.Fatalf("only %d vectors", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, _ := os.ReadFile(f)
			first, _, _ := strings.Cut(string(b), "\n")
			expect, ok := strings.CutPrefix(first, "# expect: ")
			if !ok {
				t.Fatalf("no '# expect:' line")
			}
			entries, err := ParseTokens(f, b)
			if names, ok := strings.CutPrefix(expect, "ok "); ok {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				var got []string
				for _, e := range entries {
					got = append(got, e.Name)
				}
				if strings.Join(got, ",") != names {
					t.Fatalf("names %v, want %s", got, names)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), expect) {
				t.Fatalf("error %v, want one containing %q", err, expect)
			}
			for _, e := range entries {
				if strings.Contains(err.Error(), e.Token) {
					t.Fatalf("the error shows a token")
				}
			}
		})
	}
}

func TestVerify(t *testing.T) {
	tok := NewTokens([]Entry{{"app0", "aaaaaaaaaaaaaaaaaaaa"}, {"app0", "bbbbbbbbbbbbbbbbbbbb"}, {"op", "cccccccccccccccccccc"}})
	for in, want := range map[string]string{"aaaaaaaaaaaaaaaaaaaa": "app0", "bbbbbbbbbbbbbbbbbbbb": "app0", "cccccccccccccccccccc": "op"} {
		if got, ok := tok.Verify(in); !ok || got != want {
			t.Errorf("Verify(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "aaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaa", "AAAAAAAAAAAAAAAAAAAA"} {
		if _, ok := tok.Verify(bad); ok {
			t.Errorf("Verify(%q) accepted", bad)
		}
	}
	var none *Tokens
	if _, ok := none.Verify("aaaaaaaaaaaaaaaaaaaa"); ok {
		t.Error("a nil verifier accepted a token")
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.9.9.9:1": true, "[::1]:7070": true, "localhost:7070": true, "LOCALHOST:1": true,
		":7070": false, "0.0.0.0:7070": false, "[::]:7070": false, "10.0.0.1:7070": false, "rbc:7070": false, "garbage": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

func TestExposure(t *testing.T) {
	err := CheckExposure(map[string]string{"--grpc-addr": "0.0.0.0:7070", "--http-addr": "127.0.0.1:7071"}, false, false)
	if err == nil || !strings.Contains(err.Error(), "--grpc-addr 0.0.0.0:7070: not a loopback address") || strings.Contains(err.Error(), "--http-addr") {
		t.Fatalf("got %v", err)
	}
	if CheckExposure(map[string]string{"--grpc-addr": ":7070"}, true, false) != nil {
		t.Fatal("auth on: refused")
	}
	if CheckExposure(map[string]string{"--grpc-addr": ":7070"}, false, true) != nil {
		t.Fatal("--insecure: refused")
	}
	if _, err := NewGuard(ServerOptions{TLSCert: "x"}, nil, nil); err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key go together") {
		t.Fatalf("got %v", err)
	}
	if _, err := NewGuard(ServerOptions{TLSClientCA: "x"}, nil, nil); err == nil || !strings.Contains(err.Error(), "--tls-client-ca needs --tls-cert") {
		t.Fatalf("got %v", err)
	}
	if _, err := NewGuard(ServerOptions{TokenFile: "/nonexistent"}, nil, nil); err == nil || !strings.Contains(err.Error(), "--auth-token-file") {
		t.Fatalf("got %v", err)
	}
}

// serveGuarded starts a real gRPC server with the guard's options (the
// health service, open, and test.Who/Am, which answers the caller's name)
// and an HTTP server behind the guard that answers the caller's name.
func serveGuarded(t *testing.T, g *Guard) (grpcAddr, httpAddr string) {
	t.Helper()
	gs := grpc.NewServer(g.GRPCOptions()...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	am := func(ctx context.Context, _ any) (any, error) {
		name, _ := Caller(ctx)
		return &healthpb.HealthCheckRequest{Service: name}, nil
	}
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Who",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Am", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(healthpb.HealthCheckRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			if ic == nil {
				return am(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Who/Am"}, am)
		}}},
	}, struct{}{})
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := Caller(r.Context())
		io.WriteString(w, "caller="+name)
	}))}
	go hs.Serve(g.Listener(hl))
	t.Cleanup(func() { hs.Close() })
	return gl.Addr().String(), hl.Addr().String()
}

// who calls test.Who/Am through interceptors (the guard's unary one runs
// for hand-registered services too).
func who(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	out := new(healthpb.HealthCheckRequest)
	err := conn.Invoke(ctx, "/test.Who/Am", &healthpb.HealthCheckRequest{}, out)
	return out.GetService(), err
}

func TestGuardTokensAndTLS(t *testing.T) {
	dir := t.TempDir()
	if err := WriteDev(dir, nil, []string{"app0", "operator"}); err != nil {
		t.Fatal(err)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	for _, mtls := range []bool{false, true} {
		name := "tls"
		if mtls {
			name = "mtls"
		}
		t.Run(name, func(t *testing.T) {
			opts := ServerOptions{TokenFile: p(DevTokens), TLSCert: p(DevCert), TLSKey: p(DevKey)}
			if mtls {
				opts.TLSClientCA = p(DevCA)
			}
			g, err := NewGuard(opts, map[string]string{"--grpc-addr": "127.0.0.1:0"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ga, ha := serveGuarded(t, g)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			copts := ClientOptions{TokenFile: p("app0.token"), CA: p(DevCA)}
			if mtls {
				copts.Cert, copts.Key = p(DevCert), p(DevKey)
			}
			good, err := NewClient(copts)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(ga, good.DialOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if got, err := who(ctx, conn); err != nil || got != "app0" {
				t.Fatalf("with the app0 token: %q %v", got, err)
			}
			// No token: Unauthenticated; health stays open.
			bare := copts
			bare.TokenFile = ""
			nc, _ := NewClient(bare)
			conn2, _ := grpc.NewClient(ga, nc.DialOptions()...)
			defer conn2.Close()
			if _, err := who(ctx, conn2); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "missing 'authorization: Bearer TOKEN'") {
				t.Fatalf("without a token: %v", err)
			}
			if _, err := healthpb.NewHealthClient(conn2).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("health without a token: %v", err)
			}
			// A wrong token.
			bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer xxxxxxxxxxxxxxxxxxxxxxxx")
			if _, err := who(bad, conn2); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "not valid") {
				t.Fatalf("wrong token: %v", err)
			}
			// Plain text against TLS fails.
			plain, _ := grpc.NewClient(ga, (*Client)(nil).DialOptions()...)
			defer plain.Close()
			short, c2 := context.WithTimeout(ctx, time.Second)
			if _, err := who(short, plain); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("plain text against TLS: %v", err)
			}
			c2()
			if mtls { // TLS without a client certificate fails the handshake
				nocert := copts
				nocert.Cert, nocert.Key = "", ""
				nc3, _ := NewClient(nocert)
				conn3, _ := grpc.NewClient(ga, nc3.DialOptions()...)
				defer conn3.Close()
				short, c3 := context.WithTimeout(ctx, 2*time.Second)
				if _, err := who(short, conn3); err == nil {
					t.Fatal("mTLS: a client without a certificate was served")
				}
				c3()
			}

			// HTTP: 401 without a token, the caller's name with one.
			hc := &http.Client{Transport: good.Transport(nil), Timeout: 5 * time.Second}
			resp, err := hc.Get("https://" + ha + "/v1/rbc")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "caller=app0" {
				t.Fatalf("HTTP with a token: %d %q", resp.StatusCode, body)
			}
			anon := &http.Client{Transport: nc.Transport(nil), Timeout: 5 * time.Second}
			if mtls {
				anon = &http.Client{Transport: (&Client{tls: good.tls}).Transport(nil), Timeout: 5 * time.Second}
			}
			for path, want := range map[string]int{"/v1/rbc": 401, "/metrics": 401, "/healthz": 200} {
				resp, err := anon.Get("https://" + ha + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("HTTP %s without a token: %d, want %d", path, resp.StatusCode, want)
				}
				if want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			}
		})
	}
}

// TestRotation: a second token for a name is accepted after a reload, the
// client picks up its rewritten file, and the old token is refused once it
// is removed.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	srvFile, cliFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "app0.token")
	old, neu := "oldoldoldoldoldoldold", "newnewnewnewnewnewnew"
	os.WriteFile(srvFile, []byte("app0 "+old+"\n"), 0o600)
	os.WriteFile(cliFile, []byte("app0 "+old+"\n"), 0o600)
	g, err := NewGuard(ServerOptions{TokenFile: srvFile}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(ClientOptions{TokenFile: cliFile})
	if err != nil {
		t.Fatal(err)
	}
	check := func(want bool) {
		t.Helper()
		md, _ := c.cred.GetRequestMetadata(context.Background())
		tok, _ := bearer(md["authorization"])
		if _, ok := g.tokens.Load().Verify(tok); ok != want {
			t.Fatalf("token %q accepted = %v, want %v", tok, ok, want)
		}
	}
	check(true)
	os.WriteFile(srvFile, []byte("app0 "+old+"\napp0 "+neu+"\n"), 0o600)
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cliFile, []byte("app0 "+neu+"\n"), 0o600)
	c.cred.mu.Lock()
	c.cred.checked = time.Time{} // as if a second had passed
	c.cred.mu.Unlock()
	check(true)
	os.WriteFile(srvFile, []byte("app0 "+neu+"\n"), 0o600)
	g.Reload()
	check(true)
	if _, ok := g.tokens.Load().Verify(old); ok {
		t.Fatal("the old token is still accepted")
	}
	// A broken file keeps the previous tokens.
	os.WriteFile(srvFile, []byte("app0 short\n"), 0o600)
	if err := g.Reload(); err == nil {
		t.Fatal("a broken token file reloaded")
	}
	check(true)
}

// A token file or TLS key its group or others may read is refused, as ssh
// refuses such a private key; AllowSharedEnv=1 accepts it (logged).
func TestASecretOthersCanReadIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := WriteDev(dir, nil, []string{"app0"}); err != nil {
		t.Fatal(err)
	}
	tokens, key := filepath.Join(dir, DevTokens), filepath.Join(dir, DevKey)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		for _, f := range []string{tokens, key} {
			if err := os.Chmod(f, mode); err != nil {
				t.Fatal(err)
			}
		}
		want := fmt.Sprintf("is readable by group or others (mode %04o): run chmod 600", mode)
		if _, err := LoadTokens(tokens); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("tokens at %04o: %v", mode, err)
		}
		if _, err := LoadCredential(filepath.Join(dir, "app0"+DevTokenSuffix)); err != nil {
			t.Errorf("the caller's own file, still 0600: %v", err)
		}
		if _, err := loadKeyPair(filepath.Join(dir, DevCert), key); err == nil || !strings.Contains(err.Error(), "TLS key: "+key+" "+want[:len("is readable")]) {
			t.Errorf("key at %04o: %v", mode, err)
		}
	}
	t.Setenv(AllowSharedEnv, "1")
	if _, err := LoadTokens(tokens); err != nil {
		t.Errorf("with %s=1: %v", AllowSharedEnv, err)
	}
	if _, err := loadKeyPair(filepath.Join(dir, DevCert), key); err != nil {
		t.Errorf("key with %s=1: %v", AllowSharedEnv, err)
	}
}
