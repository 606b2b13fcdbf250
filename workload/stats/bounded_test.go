package stats

import (
	"errors"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// zeros is an endless stream of zero bytes (/dev/zero) that counts what was
// read from it.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n += int64(len(p))
	return len(p), nil
}

// An input that is not a trace — an endless line — is refused after a
// bounded read, skip-bad or not, with the line's number.
func TestEndlessLineIsRefusedWithBoundedMemory(t *testing.T) {
	for _, skip := range []bool{false, true} {
		z := &zeros{}
		_, err := Read(z, Options{SkipBad: skip, Workers: 2})
		var long *trace.LineTooLongError
		if !errors.As(err, &long) || long.Line != 1 {
			t.Fatalf("skip-bad %v: err %v, want a LineTooLongError for line 1", skip, err)
		}
		if z.n > trace.MaxLineBytes+4*chunkSize {
			t.Fatalf("read %d bytes of an endless line; the bound is %d", z.n, trace.MaxLineBytes)
		}
	}
}

func TestTooLongLineAfterGoodLinesNamesItsLine(t *testing.T) {
	good := `{"t": 0, "d": [{"a": {"S": [1], "U": ["k"], "C": [1]}}]}` + "\n"
	in := strings.Repeat(good, 3) + strings.Repeat(" ", trace.MaxLineBytes+1) + "\n" + good
	_, err := Read(strings.NewReader(in), Options{Workers: 2})
	if err == nil || !strings.Contains(err.Error(), "line 4: longer than") {
		t.Fatalf("err %v, want line 4 named", err)
	}
}
