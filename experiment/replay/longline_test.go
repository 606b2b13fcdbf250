package replay

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// A file that is not a trace (one endless line) is refused after at most
// trace.MaxLineBytes of it, on every pass (the pre-flight check and the run).
func TestALineLongerThanTheBoundIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "long.jsonl")
	ok := `{"t": 0, "d": [{"a": {"S": [1], "U": ["k"], "C": [1]}}]}` + "\n"
	if err := os.WriteFile(p, []byte(ok+strings.Repeat("x", trace.MaxLineBytes+1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lr, err := openLines(p)
	if err != nil {
		t.Fatal(err)
	}
	defer lr.close()
	for pass := 0; pass < 2; pass++ {
		if b, err := lr.next(); err != nil || !strings.HasPrefix(string(b), `{"t": 0`) {
			t.Fatalf("pass %d, line 1: %q %v", pass, b, err)
		}
		_, err = lr.next()
		var long *trace.LineTooLongError
		if !errors.As(err, &long) || long.Line != 2 || !strings.Contains(err.Error(), "not a trace") {
			t.Fatalf("pass %d, line 2: %v", pass, err)
		}
		if err := lr.rewind(); err != nil {
			t.Fatal(err)
		}
	}
}
