package trace

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// zeros is an endless stream of zero bytes (/dev/zero) that counts what was
// read from it.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n += int64(len(p))
	return len(p), nil
}

func TestLineReaderSplitsLines(t *testing.T) {
	lr := NewLineReader(strings.NewReader("a\r\n\nbc\nlast"))
	var got []string
	for {
		b, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	if strings.Join(got, "|") != "a||bc|last" || lr.Line() != 4 {
		t.Fatalf("lines %q, line %d", got, lr.Line())
	}
}

func TestLineReaderRefusesAnEndlessLineAfterABoundedRead(t *testing.T) {
	z := &zeros{}
	lr := NewLineReader(z)
	_, err := lr.Next()
	var long *LineTooLongError
	if !errors.As(err, &long) || long.Line != 1 {
		t.Fatalf("err %v, want a LineTooLongError for line 1", err)
	}
	if !strings.Contains(err.Error(), "line 1: longer than 8388608 bytes") || !strings.Contains(err.Error(), "not a trace") {
		t.Fatalf("message %q", err)
	}
	if z.n > MaxLineBytes+2<<20 {
		t.Fatalf("read %d bytes of an endless line; the bound is %d", z.n, MaxLineBytes)
	}
}

func TestLineReaderAcceptsALineOfExactlyTheBound(t *testing.T) {
	line := strings.Repeat("x", MaxLineBytes)
	lr := NewLineReader(strings.NewReader(line + "\r\n" + line + "x\n"))
	b, err := lr.Next()
	if err != nil || len(b) != MaxLineBytes {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	if _, err := lr.Next(); err == nil || !strings.Contains(err.Error(), "line 2: longer than") {
		t.Fatalf("a line one byte over the bound: %v", err)
	}
}
