package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DevFiles are the files WriteDev writes, relative to its folder.
const (
	DevCA     = "ca.pem"
	DevCert   = "cert.pem"
	DevKey    = "key.pem"
	DevTokens = "tokens"
	// DevTokenSuffix names a caller's own token file, CALLER.token: one
	// "name token" line, what the project's clients read (--token-file,
	// the topology's auth.token).
	DevTokenSuffix = ".token"
	// DevBearerSuffix names the same token alone, CALLER.bearer: the token
	// and a newline, for tools that send a file's whole content as the
	// bearer token (Prometheus's credentials_file, curl with
	// "Authorization: Bearer $(cat CALLER.bearer)").
	DevBearerSuffix = ".bearer"
)

// NewToken returns a random token: 32 bytes, base64url (43 characters).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// WriteDev writes a self-contained set of credentials into dir for a test
// or a first deployment (docs/security.md): a CA (ca.pem), one certificate
// for every server and client (cert.pem, key.pem; valid for hosts,
// localhost and the loopback addresses, for server and client
// authentication, one year), the servers' token file (tokens) with a random
// token per caller, and each caller's own token twice: CALLER.token (its
// "name token" line, for the project's clients) and CALLER.bearer (the bare
// token, for Prometheus and curl). Secrets are written with mode 0600.
func WriteDev(dir string, hosts, callers []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "robinhood dev CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "robinhood"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	write := func(name string, mode os.FileMode, b []byte) error {
		return os.WriteFile(filepath.Join(dir, name), b, mode)
	}
	if err := write(DevCA, 0o644, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})); err != nil {
		return err
	}
	if err := write(DevCert, 0o644, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return err
	}
	if err := write(DevKey, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	var all strings.Builder
	all.WriteString("# name token: the callers the servers accept (docs/security.md)\n")
	for _, c := range callers {
		if !namePattern.MatchString(c) {
			return fmt.Errorf("caller %q must be 1-64 characters of letters, digits, '_', '.', '-'", c)
		}
		tok, err := NewToken()
		if err != nil {
			return err
		}
		line := c + " " + tok + "\n"
		all.WriteString(line)
		if err := write(c+DevTokenSuffix, 0o600, []byte(line)); err != nil {
			return err
		}
		if err := write(c+DevBearerSuffix, 0o600, []byte(tok+"\n")); err != nil {
			return err
		}
	}
	return write(DevTokens, 0o600, []byte(all.String()))
}
