package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadExample(t *testing.T) {
	top, err := LoadTopology(filepath.Join("..", "..", "examples", "topology.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Backends) != 3 || len(top.AppServers) != 1 {
		t.Fatalf("got %d backends, %d app servers", len(top.Backends), len(top.AppServers))
	}
	a, ok := top.AppServer("app0")
	if !ok {
		t.Fatal("app0 missing")
	}
	if got := a.Partitions["ratings"]; got.Addr != "127.0.0.1:11212" || got.InitialMB != 64 {
		t.Fatalf("long partition form: %+v", got)
	}
	if got := a.Partitions["catalog"]; got.Addr != "127.0.0.1:11211" || got.InitialMB != 0 {
		t.Fatalf("short partition form: %+v", got)
	}
	if time.Duration(a.BackendTimeout) != time.Second {
		t.Fatalf("backend_timeout %v", a.BackendTimeout)
	}
	if a.Controller["policy"] != "robinhood" {
		t.Fatalf("controller block not kept: %v", a.Controller)
	}
	b, ok := top.BackendByName("recommender")
	if !ok || b.ID != 2 {
		t.Fatalf("BackendByName: %+v %v", b, ok)
	}
}

// The shared invalid examples in tests/topology/invalid: every file must be
// rejected, and the error must contain the text of its "# expect:" line. The
// Python controller runs the same files.
func TestInvalidExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "tests", "topology", "invalid", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid examples found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			for _, line := range strings.Split(string(b), "\n") {
				if s, ok := strings.CutPrefix(line, "# expect-go: "); ok {
					want = s
				}
			}
			if want == "" {
				t.Skip("no # expect-go: line (checked by the controller only)")
			}
			_, err = ParseTopology(b)
			if err == nil {
				t.Fatalf("accepted an invalid topology")
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not contain %q", err, want)
			}
		})
	}
}
