package auth

import "github.com/robinhoodcache/robinhood/lib/config"

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
