package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// FromTopology fills the options a server's flags left unset (set holds
// the flags given) from the topology's auth and tls blocks: its token file,
// its certificate, and with tls.client_auth the CA its clients' certificates
// must chain to.
func (o ServerOptions) FromTopology(t *config.Topology, set map[string]bool) ServerOptions {
	if t == nil {
		return o
	}
	if t.Auth != nil && !set["auth-token-file"] {
		o.TokenFile = t.Auth.Tokens
	}
	if t.TLS != nil {
		if !set["tls-cert"] {
			o.TLSCert = t.TLS.Cert
		}
		if !set["tls-key"] {
			o.TLSKey = t.TLS.Key
		}
		if t.TLS.ClientAuth && !set["tls-client-ca"] {
			o.TLSClientCA = t.TLS.CA
		}
	}
	return o
}

// ClientOptionsFromTopology are the credentials of caller (an app server's
// id, or "operator" for the tools) in the topology: its token file (auth.token
// with {id} replaced) and the TLS settings.
func ClientOptionsFromTopology(t *config.Topology, caller string) ClientOptions {
	var o ClientOptions
	if t == nil {
		return o
	}
	if t.Auth != nil {
		o.TokenFile = ExpandID(t.Auth.Token, caller)
	}
	if t.TLS != nil {
		o.CA = t.TLS.CA
		if t.TLS.ClientAuth {
			o.Cert, o.Key = t.TLS.Cert, t.TLS.Key
		}
	}
	return o
}

// ClientFromTopology is NewClient(ClientOptionsFromTopology(t, caller)).
func ClientFromTopology(t *config.Topology, caller string) (*Client, error) {
	return NewClient(ClientOptionsFromTopology(t, caller))
}

// Operator is the caller id of the tools (replay, the scenario driver) in
// the topology's auth.token path.
const Operator = "operator"

// CheckTopologyFiles reads every file a topology names as the components
// read it — auth.tokens (the servers' token file), auth.token for each app
// server and the operator, the tls block's CA, certificate and key, every
// partition's password_file — and returns what is wrong with each, naming
// the field: a named pipe, a device, a file over its bound, a file shared
// with others (CheckSecretFile), one that does not parse. A file absent on
// this machine is not checked (topocheck often runs where the secrets are
// not); absent lists them. The paths are as the topology has them
// (config.LoadTopology makes them relative to its folder).
func CheckTopologyFiles(t *config.Topology) (problems []error, absent []string) {
	here := func(path string) bool {
		_, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			absent = append(absent, path)
			return false
		}
		return true // any other error is the reader's to name
	}
	check := func(field string, err error) {
		if err != nil && field != "" {
			err = fmt.Errorf("%s: %w", field, err)
		}
		if err != nil {
			problems = append(problems, err)
		}
	}
	if a := t.Auth; a != nil {
		if here(a.Tokens) {
			_, err := LoadTokens(a.Tokens)
			check("auth.tokens", err)
		}
		callers := []string{Operator}
		for _, app := range t.AppServers {
			callers = append(callers, app.ID)
		}
		seen := map[string]bool{}
		for _, c := range callers {
			if p := ExpandID(a.Token, c); !seen[p] && here(p) {
				seen[p] = true
				_, err := LoadCredential(p)
				check(fmt.Sprintf("auth.token (%s)", c), err)
			}
		}
	}
	if tl := t.TLS; tl != nil {
		if here(tl.CA) {
			_, err := certPool("tls.ca", tl.CA)
			check("", err)
		}
		if cert, key := here(tl.Cert), here(tl.Key); cert && key {
			_, err := loadKeyPair(tl.Cert, tl.Key)
			check("tls.cert, tls.key", err)
		}
	}
	for _, app := range t.AppServers {
		for _, name := range slices.Sorted(maps.Keys(app.Partitions)) {
			if p := app.Partitions[name]; p.PasswordFile != "" && here(p.PasswordFile) {
				_, err := p.Password()
				check(fmt.Sprintf("app_servers.%s.partitions.%s", app.ID, name), err)
			}
		}
	}
	return problems, absent
}
