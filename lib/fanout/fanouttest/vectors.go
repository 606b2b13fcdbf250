// Package fanouttest reads the shared blocking-backend vectors
// (tests/vectors/blocking.json), for the tests of every Go implementation
// that names a request's blocking backend.
package fanouttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// Call is one batch of a vector case.
type Call struct {
	Backend int    `json:"backend"`
	End     *int64 `json:"end"` // nil: the batch has no end
	Failed  bool   `json:"failed"`
	Empty   bool   `json:"empty"`
}

// Case is one vector: calls and the expected blocking backend (nil: none).
type Case struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Calls       []Call `json:"calls"`
	Expect      struct {
		Blocking *int `json:"blocking"`
		Failed   bool `json:"failed"`
	} `json:"expect"`
}

// Load reads the vectors from the repository (testutil.RepoRoot); it
// fails the test when they are missing.
func Load(t testing.TB) []Case {
	t.Helper()
	dir := testutil.RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(dir, "tests", "vectors", "blocking.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Schema string `json:"schema"`
		Cases  []Case `json:"cases"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v.Schema != "robinhood-blocking/v1" || len(v.Cases) < 10 {
		t.Fatalf("blocking vectors: schema %q with %d cases", v.Schema, len(v.Cases))
	}
	return v.Cases
}
