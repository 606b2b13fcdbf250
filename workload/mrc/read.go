package mrc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// EachRequest calls f for every line of a trace file, in order; a malformed
// line is an error naming its line number.
func EachRequest(path string, f func(*trace.Request)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	r := bufio.NewReaderSize(file, 1<<20)
	for line := 1; ; line++ {
		b, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			req, perr := trace.Parse(b)
			if perr != nil {
				return fmt.Errorf("%s: line %d: %w", path, line, perr)
			}
			f(req)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
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
