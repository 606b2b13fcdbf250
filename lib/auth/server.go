package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// ServerOptions are the security flags every server takes.
type ServerOptions struct {
	// TokenFile lists the callers the server accepts (--auth-token-file);
	// empty turns authentication off.
	TokenFile string
	// TLSCert and TLSKey are the server's certificate chain and key (PEM);
	// empty serves plain text.
	TLSCert, TLSKey string
	// TLSClientCA, when set, makes every client present a certificate
	// signed by one of its CAs (mutual TLS).
	TLSClientCA string
	// Insecure allows a non-loopback listener without authentication.
	Insecure bool
}

// Register adds --auth-token-file, --tls-cert, --tls-key, --tls-client-ca
// and --insecure to fs.
func (o *ServerOptions) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.TokenFile, "auth-token-file", o.TokenFile, "callers accepted: a `file` of \"name token\" lines; every call but health checks then needs 'authorization: Bearer TOKEN' (docs/security.md); SIGHUP re-reads it")
	fs.StringVar(&o.TLSCert, "tls-cert", o.TLSCert, "serve TLS with this certificate chain (PEM `file`; with --tls-key); SIGHUP re-reads it")
	fs.StringVar(&o.TLSKey, "tls-key", o.TLSKey, "the private key (PEM `file`) of --tls-cert")
	fs.StringVar(&o.TLSClientCA, "tls-client-ca", o.TLSClientCA, "require client certificates signed by a CA of this PEM `file` (mutual TLS; needs --tls-cert)")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "allow listening on a non-loopback address without --auth-token-file (anyone who reaches it may call everything)")
}

// Validate checks that the flags go together.
func (o ServerOptions) Validate() error {
	switch {
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	case o.TLSClientCA != "" && o.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
	}
	return nil
}

// IsLoopback reports whether a listen address (host:port) is reachable
// from this machine only: "localhost" or a loopback IP. An empty host,
// 0.0.0.0, :: or any other name is not (names are not resolved: a service
// name resolves to an interface others reach).
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// CheckExposure refuses a listener that others can reach while
// authentication is off, unless insecure is set. listeners maps a flag name
// (--grpc-addr) to its address.
func CheckExposure(listeners map[string]string, authOn, insecure bool) error {
	if authOn || insecure {
		return nil
	}
	var bad []string
	for flag, addr := range listeners {
		if !IsLoopback(addr) {
			bad = append(bad, fmt.Sprintf("%s %s", flag, addr))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("%s: not a loopback address and no --auth-token-file: anyone who reaches it could steer the caches; give --auth-token-file (docs/security.md) or --insecure to serve it unauthenticated", strings.Join(bad, ", "))
}

// Guard is a server's security: the token verifier and the TLS
// configuration, both re-read by Reload.
type Guard struct {
	opts   ServerOptions
	tokens atomic.Pointer[Tokens]
	tls    *serverTLS
	log    *slog.Logger
}

// NewGuard loads the files of o and applies the exposure rule to the
// listeners (flag name → address).
func NewGuard(o ServerOptions, listeners map[string]string, log *slog.Logger) (*Guard, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := CheckExposure(listeners, o.TokenFile != "", o.Insecure); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	g := &Guard{opts: o, log: log}
	if o.TokenFile != "" {
		t, err := LoadTokens(o.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--auth-token-file: %w", err)
		}
		g.tokens.Store(t)
	}
	if o.TLSCert != "" {
		s, err := newServerTLS(o.TLSCert, o.TLSKey, o.TLSClientCA)
		if err != nil {
			return nil, err
		}
		g.tls = s
	}
	return g, nil
}

// AuthOn reports whether calls need a token.
func (g *Guard) AuthOn() bool { return g != nil && g.opts.TokenFile != "" }

// TLSOn reports whether the listeners serve TLS.
func (g *Guard) TLSOn() bool { return g != nil && g.tls != nil }

// Describe is the start-up log's summary: "tokens+mtls", "tls", "none"...
func (g *Guard) Describe() string {
	var parts []string
	if g.AuthOn() {
		parts = append(parts, fmt.Sprintf("tokens(%d)", g.tokens.Load().Len()))
	}
	if g.TLSOn() {
		if g.opts.TLSClientCA != "" {
			parts = append(parts, "mtls")
		} else {
			parts = append(parts, "tls")
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// Reload re-reads the token file and the certificate. A file that no
// longer reads keeps the old setting and is returned as the error.
func (g *Guard) Reload() error {
	var errs []error
	if g.AuthOn() {
		if t, err := LoadTokens(g.opts.TokenFile); err != nil {
			errs = append(errs, fmt.Errorf("--auth-token-file: %w", err))
		} else {
			g.tokens.Store(t)
		}
	}
	if g.TLSOn() {
		if err := g.tls.reload(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ReloadOnHUP re-reads the files on every SIGHUP until ctx ends.
func (g *Guard) ReloadOnHUP(ctx context.Context) {
	if !g.AuthOn() && !g.TLSOn() {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				if err := g.Reload(); err != nil {
					g.log.Error("SIGHUP: keeping the previous credentials", "err", err)
				} else {
					g.log.Info("SIGHUP: credentials re-read", "security", g.Describe())
				}
			}
		}
	}()
}

// callerKey keys the caller's name in a request context.
type callerKey struct{}

// Caller returns the name of the authenticated caller of a request (the
// token's name), or false when authentication is off.
func Caller(ctx context.Context) (string, bool) {
	n, ok := ctx.Value(callerKey{}).(string)
	return n, ok
}

// WithCaller returns ctx with an authenticated caller (for tests of
// handlers that read Caller).
func WithCaller(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callerKey{}, name)
}

// bearer extracts the token of an "authorization: Bearer TOKEN" value.
func bearer(v string) (string, bool) {
	const p = "bearer "
	if len(v) <= len(p) || !strings.EqualFold(v[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(v[len(p):]), true
}

// authenticate checks a presented authorization value.
func (g *Guard) authenticate(values []string) (string, error) {
	if len(values) == 0 {
		return "", errors.New("missing 'authorization: Bearer TOKEN'")
	}
	tok, ok := bearer(values[0])
	if !ok {
		return "", errors.New("the authorization value is not 'Bearer TOKEN'")
	}
	name, ok := g.tokens.Load().Verify(tok)
	if !ok {
		return "", errors.New("the bearer token is not valid")
	}
	return name, nil
}

// openMethod reports whether anyone may call a gRPC method: the health
// service, for probes.
func openMethod(full string) bool {
	return strings.HasPrefix(full, "/grpc.health.v1.Health/")
}

func (g *Guard) check(ctx context.Context, method string) (context.Context, error) {
	if openMethod(method) {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	name, err := g.authenticate(md.Get("authorization"))
	if err != nil {
		return ctx, status.Errorf(codes.Unauthenticated, "%s: %v", method, err)
	}
	return WithCaller(ctx, name), nil
}

type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w wrappedStream) Context() context.Context { return w.ctx }

// GRPCOptions are the server options of the guard: TLS credentials and the
// token interceptors (every method but the health service needs a token).
func (g *Guard) GRPCOptions() []grpc.ServerOption {
	var out []grpc.ServerOption
	if g.TLSOn() {
		out = append(out, grpc.Creds(credentials.NewTLS(g.tls.cfg)))
	}
	if g.AuthOn() {
		out = append(out,
			// Before the stream exists: a call without a valid token is refused on
			// its headers, before any of its message is read or decoded (a 63 MB
			// request from a stranger costs its headers only). The interceptors
			// below then put the caller in the handler's context.
			grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
				if openMethod(info.FullMethodName) {
					return ctx, nil
				}
				if _, err := g.authenticate(info.Header.Get("authorization")); err != nil {
					return ctx, status.Errorf(codes.Unauthenticated, "%s: %v", info.FullMethodName, err)
				}
				return ctx, nil
			}),
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				ctx, err := g.check(ctx, info.FullMethod)
				if err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				ctx, err := g.check(ss.Context(), info.FullMethod)
				if err != nil {
					return err
				}
				return h(srv, wrappedStream{ss, ctx})
			}),
		)
	}
	return out
}

// OpenPaths are the HTTP paths anyone may read: liveness and readiness.
var OpenPaths = []string{"/healthz"}

// HTTP wraps h: every path but OpenPaths needs, with mutual TLS, a verified
// client certificate (403 otherwise: the HTTP listener asks for one without
// requiring it, so that a Kubernetes probe, which presents none, reads
// /healthz) and, with authentication on, a valid bearer token (401 with a
// WWW-Authenticate header otherwise); the caller's name is in the request
// context.
func (g *Guard) HTTP(h http.Handler) http.Handler {
	mtls := g.TLSOn() && g.tls.cfg.ClientAuth == tls.RequireAndVerifyClientCert
	if !g.AuthOn() && !mtls {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range OpenPaths {
			if r.URL.Path == p {
				h.ServeHTTP(w, r)
				return
			}
		}
		if mtls && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			http.Error(w, "a client certificate is required (mutual TLS): only /healthz answers without one",
				http.StatusForbidden)
			return
		}
		if !g.AuthOn() {
			h.ServeHTTP(w, r)
			return
		}
		name, err := g.authenticate(r.Header.Values("Authorization"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="robinhood"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), name)))
	})
}

// Listener wraps an HTTP listener in TLS when the guard has a certificate.
func (g *Guard) Listener(l net.Listener) net.Listener {
	if !g.TLSOn() {
		return l
	}
	cfg := g.tls.cfg.Clone()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	if cfg.ClientAuth == tls.RequireAndVerifyClientCert {
		// Verified when given; HTTP (Guard.HTTP) requires it on every path but
		// /healthz, which a kubelet probes without a certificate.
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tls.NewListener(l, cfg)
}
