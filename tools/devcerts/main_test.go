package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/auth"
)

// TestWritesBothTokenForms: every caller gets CALLER.token ("name token",
// what the project's clients read) and CALLER.bearer (the same token alone
// and a newline, what Prometheus's credentials_file and curl send), both
// private, and the servers' file accepts that token as the caller.
func TestWritesBothTokenForms(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	var out, errb bytes.Buffer
	if rc := run([]string{"--out", dir, "--callers", "app0, operator,prometheus"}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errb.String())
	}
	if !strings.Contains(out.String(), "CALLER.bearer") {
		t.Errorf("the summary line does not name the bearer files: %q", out.String())
	}
	servers, err := auth.LoadTokens(filepath.Join(dir, auth.DevTokens))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"app0", "operator", "prometheus"} {
		e, err := auth.LoadCredential(filepath.Join(dir, c+auth.DevTokenSuffix))
		if err != nil || e.Name != c {
			t.Fatalf("%s.token: %+v %v", c, e, err)
		}
		p := filepath.Join(dir, c+auth.DevBearerSuffix)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != e.Token+"\n" {
			t.Errorf("%s.bearer holds %d bytes, want the token of %s.token and a newline", c, len(b), c)
		}
		if name, ok := servers.Verify(strings.TrimSpace(string(b))); !ok || name != c {
			t.Errorf("the servers' file does not accept %s.bearer as %s (got %q)", c, c, name)
		}
		for _, f := range []string{p, filepath.Join(dir, c+auth.DevTokenSuffix)} {
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
			}
		}
	}
	if rc := run([]string{"--out", dir, "--callers", "bad name"}, &out, &errb); rc != 1 {
		t.Errorf("a bad caller name: exit %d", rc)
	}
	if rc := run(nil, &out, &errb); rc != 2 {
		t.Errorf("no --out: exit %d", rc)
	}
}
