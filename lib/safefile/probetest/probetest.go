// Package probetest makes the shared hostile-input probes
// (tests/vectors/probes.json: a FIFO, /dev/zero, a sparse 2 GB file, bombs)
// for the Go tests of the readers that must survive them.
package probetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// Probe is one hostile input, made at Path.
type Probe struct {
	Name string `json:"name"`
	// Kind is "file" (the wrong kind of file: every reader refuses it) or
	// "content" (a regular file of hostile text).
	Kind string `json:"kind"`
	Make string `json:"make"`
	// Refused is why a "file" probe is refused: not_regular, too_large,
	// missing.
	Refused string `json:"refused"`
	Text    string `json:"text"`
	Count   int    `json:"count"`
	Bytes   int64  `json:"bytes"`
	Given   string `json:"path"`
	// Path is where the probe was made (Given for a "path" probe).
	Path string `json:"-"`
}

// Make reads the probes and makes each in a fresh folder of the test; the
// test fails when the list is missing or a probe cannot be made.
func Make(t testing.TB) []Probe {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "tests", "vectors", "probes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Schema string  `json:"schema"`
		Probes []Probe `json:"probes"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v.Schema != "robinhood-probes/v1" || len(v.Probes) < 8 {
		t.Fatalf("probes: schema %q with %d probes", v.Schema, len(v.Probes))
	}
	dir := t.TempDir()
	for i := range v.Probes {
		p := &v.Probes[i]
		p.Path = filepath.Join(dir, p.Name)
		switch p.Make {
		case "fifo":
			err = syscall.Mkfifo(p.Path, 0o600)
		case "path":
			p.Path = p.Given
		case "folder":
			err = os.Mkdir(p.Path, 0o700)
		case "sparse":
			err = os.WriteFile(p.Path, nil, 0o600) // 0600: a secret's mode, so readers reach the size check
			if err == nil {
				err = os.Truncate(p.Path, p.Bytes)
			}
		case "missing":
		case "text":
			err = os.WriteFile(p.Path, []byte(p.Text), 0o600)
		case "repeat":
			err = os.WriteFile(p.Path, []byte(strings.Repeat(p.Text, p.Count)), 0o600)
		default:
			t.Fatalf("probe %s: unknown make %q", p.Name, p.Make)
		}
		if err != nil {
			t.Fatalf("probe %s: %v", p.Name, err)
		}
	}
	return v.Probes
}
