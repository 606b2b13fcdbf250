package auth

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ClientOptions are a caller's credentials.
type ClientOptions struct {
	// TokenFile is the caller's own token file (one "name token" line);
	// empty sends no token.
	TokenFile string
	// CA verifies the servers' certificates; empty dials plain text.
	CA string
	// Cert and Key are presented to servers that ask (mutual TLS).
	Cert, Key string
	// ServerName overrides the name the servers' certificates are checked
	// against (default: the host of the address dialled).
	ServerName string
}

// Client holds a caller's credentials for gRPC and HTTP.
type Client struct {
	cred *fileCredential
	tls  *tls.Config
}

// NewClient reads the files of o. The zero options give a client that
// sends nothing and dials plain text.
func NewClient(o ClientOptions) (*Client, error) {
	c := &Client{}
	if o.TokenFile != "" {
		f, err := newFileCredential(o.TokenFile)
		if err != nil {
			return nil, err
		}
		c.cred = f
	}
	if o.CA != "" {
		if (o.Cert == "") != (o.Key == "") {
			return nil, fmt.Errorf("a client certificate needs its key: cert %q, key %q", o.Cert, o.Key)
		}
		t, err := clientTLS(o.CA, o.Cert, o.Key, o.ServerName)
		if err != nil {
			return nil, err
		}
		c.tls = t
	}
	return c, nil
}

// Name is the caller's name in its token file ("" without one).
func (c *Client) Name() string {
	if c == nil || c.cred == nil {
		return ""
	}
	e, _ := c.cred.current()
	return e.Name
}

// DialOptions are the transport credentials (TLS or plain text) and the
// per-call token of the client.
func (c *Client) DialOptions() []grpc.DialOption {
	if c == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	var out []grpc.DialOption
	if c.tls != nil {
		out = append(out, grpc.WithTransportCredentials(credentials.NewTLS(c.tls)))
	} else {
		out = append(out, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.cred != nil {
		out = append(out, grpc.WithPerRPCCredentials(c.cred))
	}
	return out
}

// TLSConfig is a copy of the client's TLS configuration, nil when it dials
// plain text: for a connection the caller makes itself (a memcached's TLS
// port).
func (c *Client) TLSConfig() *tls.Config {
	if c == nil || c.tls == nil {
		return nil
	}
	return c.tls.Clone()
}

// Scheme is "https" with TLS, else "http".
func (c *Client) Scheme() string {
	if c != nil && c.tls != nil {
		return "https"
	}
	return "http"
}

// Transport wraps base (nil: a clone of http.DefaultTransport) so that
// requests carry the token and TLS uses the client's configuration.
func (c *Client) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	if c == nil {
		return base
	}
	if t, ok := base.(*http.Transport); ok && c.tls != nil {
		t = t.Clone()
		t.TLSClientConfig = c.tls.Clone()
		base = t
	}
	if c.cred == nil {
		return base
	}
	return roundTripper{base: base, cred: c.cred}
}

type roundTripper struct {
	base http.RoundTripper
	cred *fileCredential
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	e, err := r.cred.current()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+e.Token)
	return r.base.RoundTrip(req)
}

// fileCredential is a caller's token, re-read when its file changes
// (checked at most once a second), so that a rotated token is picked up
// without a restart.
type fileCredential struct {
	path string

	mu      sync.Mutex
	entry   Entry
	mod     time.Time
	size    int64
	checked time.Time
}

func newFileCredential(path string) (*fileCredential, error) {
	f := &fileCredential{path: path}
	e, err := LoadCredential(path)
	if err != nil {
		return nil, err
	}
	f.entry = e
	if st, err := os.Stat(path); err == nil {
		f.mod, f.size = st.ModTime(), st.Size()
	}
	f.checked = time.Now()
	return f, nil
}

// current returns the token, re-reading the file when it changed. A file
// that no longer reads keeps the last good token.
func (f *fileCredential) current() (Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if now.Sub(f.checked) < time.Second {
		return f.entry, nil
	}
	f.checked = now
	st, err := os.Stat(f.path)
	if err != nil || (st.ModTime().Equal(f.mod) && st.Size() == f.size) {
		return f.entry, nil
	}
	if e, err := LoadCredential(f.path); err == nil {
		f.entry, f.mod, f.size = e, st.ModTime(), st.Size()
	}
	return f.entry, nil
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (f *fileCredential) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	e, err := f.current()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + e.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials:
// tokens may travel in plain text on loopback (docs/security.md says when
// that is acceptable).
func (f *fileCredential) RequireTransportSecurity() bool { return false }

// ExpandID replaces "{id}" in a topology path with the caller's id.
func ExpandID(path, id string) string { return strings.ReplaceAll(path, "{id}", id) }
