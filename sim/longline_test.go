package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// The simulator's trace reader refuses a line longer than the bound instead
// of buffering it: a file that is not a trace costs bounded memory.
func TestTraceSourceRefusesALineLongerThanTheBound(t *testing.T) {
	p := filepath.Join(t.TempDir(), "long.jsonl")
	ok := `{"t": 0, "ts_ms": 0, "d": [{"a": {"S": [1], "U": ["k"], "C": [1]}}]}` + "\n"
	if err := os.WriteFile(p, []byte(ok+"\n"+strings.Repeat("x", trace.MaxLineBytes+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := openTrace(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer src.f.Close()
	if _, _, err := src.next(); err != nil {
		t.Fatal(err)
	}
	_, _, err = src.next()
	var long *trace.LineTooLongError
	if !errors.As(err, &long) || long.Line != 3 {
		t.Fatalf("got %v, want line 3 too long (line 2 is blank)", err)
	}
}
