package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"

	"github.com/robinhoodcache/robinhood/lib/safefile"
)

// MaxPEMBytes bounds a certificate, key or CA bundle file (a system's whole
// CA bundle is about 200 KB): a larger one is refused by its size, unread.
const MaxPEMBytes = 1 << 20

// certPool reads a PEM bundle of CA certificates; what names the setting
// for the error.
func certPool(what, path string) (*x509.CertPool, error) {
	b, err := safefile.ReadFile(path, MaxPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", what, path)
	}
	return p, nil
}

// loadKeyPair reads a certificate chain and its key; the error names both
// files.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	if err := CheckSecretFile(keyFile); err != nil {
		return nil, fmt.Errorf("TLS key: %w", err)
	}
	certPEM, err := safefile.ReadFile(certFile, MaxPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %v", err)
	}
	keyPEM, err := safefile.ReadFile(keyFile, MaxPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("TLS key: %v", err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s: %v", certFile, keyFile, err)
	}
	return &c, nil
}

// serverTLS is a server's TLS configuration whose certificate can be
// replaced while it serves (Reload): new handshakes use the new one.
type serverTLS struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
	cfg               *tls.Config
}

func newServerTLS(certFile, keyFile, clientCA string) (*serverTLS, error) {
	s := &serverTLS{certFile: certFile, keyFile: keyFile}
	if err := s.reload(); err != nil {
		return nil, err
	}
	s.cfg = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
	if clientCA != "" {
		pool, err := certPool("--tls-client-ca", clientCA)
		if err != nil {
			return nil, err
		}
		s.cfg.ClientCAs = pool
		s.cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return s, nil
}

func (s *serverTLS) reload() error {
	c, err := loadKeyPair(s.certFile, s.keyFile)
	if err != nil {
		return err
	}
	s.cert.Store(c)
	return nil
}

// clientTLS is a client's TLS configuration: servers are verified against
// the CA bundle; a certificate is presented when one is given (mutual TLS).
func clientTLS(ca, certFile, keyFile, serverName string) (*tls.Config, error) {
	pool, err := certPool("tls.ca", ca)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
	if certFile != "" {
		c, err := loadKeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{*c}
	}
	return cfg, nil
}
