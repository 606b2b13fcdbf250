package mrc

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/lib/trace"
)

// EachRequest calls f for every line of a trace file, in order; a malformed
// line is an error naming its line number, and so is a line longer than
// trace.MaxLineBytes (a file that is not a trace, such as /dev/zero, is
// refused after reading at most that much of it).
func EachRequest(path string, f func(*trace.Request)) error {
	file, err := safefile.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	lr := trace.NewLineReader(file)
	for {
		b, err := lr.Next()
		if err == io.EOF {
			return nil
		}
		var long *trace.LineTooLongError
		if errors.As(err, &long) {
			return fmt.Errorf("%s: %w", path, err) // it names the line
		}
		if err != nil {
			return fmt.Errorf("%s: reading line %d: %w", path, lr.Line()+1, err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		req, perr := trace.Parse(b)
		if perr != nil {
			return fmt.Errorf("%s: line %d: %w", path, lr.Line(), perr)
		}
		f(req)
	}
}

// FromFile computes the curves of a trace file. Sampled mode reads the file
// twice: first for the heavy hitters (HeavyKeys per backend), then for the
// curves.
func FromFile(path string, o Options, heavyKeys int) ([]Curve, error) {
	if o.SampleRate > 0 && o.SampleRate < 1 && heavyKeys > 0 {
		hh := NewHeavyHitters(heavyKeys)
		if err := EachRequest(path, hh.Add); err != nil {
			return nil, err
		}
		o.Always = hh.Contains
	}
	b, err := New(o)
	if err != nil {
		return nil, err
	}
	if err := EachRequest(path, b.Add); err != nil {
		return nil, err
	}
	return b.Curves(), nil
}
