// Package auth is the project's authentication and transport security
// (docs/security.md): bearer tokens per caller, read from token files, TLS
// and mutual TLS from PEM files, checked by gRPC interceptors and HTTP
// middleware on the servers and sent by the clients. Servers refuse to
// listen on a non-loopback address without tokens unless told --insecure.
//
// A token file has one "name token" pair per line; blank lines and lines
// starting with '#' are ignored. A server's file lists every caller it
// accepts (a name may appear on two lines while a token is rotated); a
// caller's own file holds its one line.
package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"

	"github.com/robinhoodcache/robinhood/lib/safefile"
)

// MaxTokenFileBytes bounds a token file (a line a caller, so thousands of
// callers): a larger one is refused by its size, unread.
const MaxTokenFileBytes = 1 << 20

// MinTokenLen is the shortest token accepted: 16 characters of the bearer
// token alphabet (about 96 bits when random).
const MinTokenLen = 16

var (
	namePattern  = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	tokenPattern = regexp.MustCompile(`^[A-Za-z0-9._~+/-]+=*$`) // RFC 6750 b64token
)

// Tokens maps bearer tokens to the names of their callers. The zero value
// accepts nothing; a nil *Tokens means authentication is off.
type Tokens struct {
	byHash map[[32]byte]string
	names  map[string]bool
}

// Entry is one line of a token file.
type Entry struct {
	Name, Token string
}

// ParseTokens reads a token file's text; the error names the file (src),
// the line and what is wrong with it, never the token itself.
func ParseTokens(src string, b []byte) ([]Entry, error) {
	var out []Entry
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 2:
			return nil, fmt.Errorf("%s:%d: want \"name token\", found %d fields", src, n, len(f))
		case !namePattern.MatchString(f[0]):
			return nil, fmt.Errorf("%s:%d: name %q must be 1-64 characters of letters, digits, '_', '.', '-'", src, n, f[0])
		case len(f[1]) < MinTokenLen:
			return nil, fmt.Errorf("%s:%d: the token of %q has %d characters; at least %d are required", src, n, f[0], len(f[1]), MinTokenLen)
		case !tokenPattern.MatchString(f[1]):
			return nil, fmt.Errorf("%s:%d: the token of %q has characters outside A-Z a-z 0-9 - . _ ~ + / (and trailing =)", src, n, f[0])
		}
		if prev, dup := seen[f[1]]; dup {
			return nil, fmt.Errorf("%s:%d: the token of %q is the same as on line %d: every caller needs its own", src, n, f[0], prev)
		}
		seen[f[1]] = n
		out = append(out, Entry{Name: f[0], Token: f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", src, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no \"name token\" line", src)
	}
	return out, nil
}

// NewTokens returns the verifier of entries.
func NewTokens(entries []Entry) *Tokens {
	t := &Tokens{byHash: map[[32]byte]string{}, names: map[string]bool{}}
	for _, e := range entries {
		t.byHash[sha256.Sum256([]byte(e.Token))] = e.Name
		t.names[e.Name] = true
	}
	return t
}

// LoadTokens reads a server's token file.
func LoadTokens(path string) (*Tokens, error) {
	if err := CheckSecretFile(path); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	b, err := safefile.ReadFile(path, MaxTokenFileBytes)
	if err != nil {
		return nil, fmt.Errorf("token file: %v", err)
	}
	e, err := ParseTokens(path, b)
	if err != nil {
		return nil, err
	}
	return NewTokens(e), nil
}

// Verify returns the caller's name for a presented token. The token is
// hashed before the lookup: how long the lookup takes depends on the hash,
// which says nothing about how much of a token an attacker got right.
func (t *Tokens) Verify(token string) (string, bool) {
	if t == nil || token == "" {
		return "", false
	}
	name, ok := t.byHash[sha256.Sum256([]byte(token))]
	return name, ok
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byHash)
}

// LoadCredential reads a caller's own token file: exactly one "name token"
// line.
func LoadCredential(path string) (Entry, error) {
	if err := CheckSecretFile(path); err != nil {
		return Entry{}, fmt.Errorf("token file: %w", err)
	}
	b, err := safefile.ReadFile(path, MaxTokenFileBytes)
	if err != nil {
		return Entry{}, fmt.Errorf("token file: %v", err)
	}
	e, err := ParseTokens(path, b)
	if err != nil {
		return Entry{}, err
	}
	if len(e) != 1 {
		return Entry{}, fmt.Errorf("%s: a caller's token file holds one \"name token\" line, this one has %d", path, len(e))
	}
	return e[0], nil
}
