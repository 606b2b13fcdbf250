package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/lib/trace"
)

// preflightLines is how many lines are fully validated before the run
// starts.
const preflightLines = 1000

// lineReader yields the non-blank lines of a trace file, rewinding on demand.
type lineReader struct {
	path string
	f    *os.File
	lr   *trace.LineReader // bounded: a line longer than trace.MaxLineBytes is an error
	line int64             // number of the last line returned
}

func openLines(path string) (*lineReader, error) {
	f, err := safefile.Open(path)
	if errors.Is(err, safefile.ErrNotRegular) {
		return nil, fmt.Errorf("trace: %w (replay reads it more than once: a pre-flight check, then the run, and again with --loop)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return &lineReader{path: path, f: f, lr: trace.NewLineReader(f)}, nil
}

// next returns the next non-blank line (a fresh slice without the newline),
// or io.EOF.
func (r *lineReader) next() ([]byte, error) {
	for {
		b, err := r.lr.Next()
		if err == io.EOF {
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", r.path, err)
		}
		r.line = r.lr.Line()
		if len(bytes.TrimSpace(b)) > 0 {
			return append([]byte(nil), b...), nil
		}
	}
}

func (r *lineReader) rewind() error {
	if _, err := r.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("trace %s: %w", r.path, err)
	}
	r.lr = trace.NewLineReader(r.f)
	r.line = 0
	return nil
}

func (r *lineReader) close() { r.f.Close() }

// preflight fully validates the first lines of the trace: they parse, name
// only backends of the topology, and carry ts_ms when the schedule needs it.
func preflight(path string, topo *config.Topology, needTs bool) error {
	lr, err := openLines(path)
	if err != nil {
		return err
	}
	defer lr.close()
	n := 0
	for ; n < preflightLines; n++ {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		r, err := trace.Parse(b)
		if err != nil {
			return fmt.Errorf("trace %s line %d: %v", path, lr.line, err)
		}
		if needTs && !r.HasTs {
			return fmt.Errorf("trace %s line %d: no ts_ms; replay a trace without arrival times with --rate", path, lr.line)
		}
		for _, l := range r.Layers {
			for _, q := range l {
				if _, ok := topo.BackendByName(q.Backend); !ok {
					return fmt.Errorf("trace %s line %d: backend %q is not in the topology", path, lr.line, q.Backend)
				}
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("trace %s: no requests", path)
	}
	return nil
}

// item is one request to send.
type item struct {
	body   []byte
	offset time.Duration // send time from the start of the run
}

// schedule turns trace lines into timed items. In rate mode arrivals are
// Poisson at rate (seeded) and lines are sent as they come; in trace mode
// each line is due at its ts_ms minus the first line's (ts_ms must be
// non-decreasing: an earlier one is sent with the previous line and counted
// as out of order). With loop the trace restarts at its end; in trace mode
// each pass is shifted by the trace's span plus its mean gap.
type schedule struct {
	lr    *lineReader
	rate  float64
	rng   *rand.Rand
	loop  bool
	until time.Duration // 0: no limit

	now    float64 // rate mode: ms
	timing Timing
	lastTs float64 // trace mode: the last ts_ms read
	count  int64   // lines in the current pass
	shift  float64 // trace mode: ms added by earlier passes

	Loops int
	Ended bool // the trace ended before until
}

// OutOfOrder counts lines sent earlier than their time said (after an
// earlier line with a later time).
func (s *schedule) OutOfOrder() int64 { return s.timing.OutOfOrder }

// Timing turns the ts_ms of successive trace lines into send offsets from
// the start of the run: the first line is due at once, each line ts_ms − the
// first's later, and a line whose time is before the previous line's is due
// with it (counted in OutOfOrder). The replayer and the simulator share it.
type Timing struct {
	first      float64
	started    bool
	prev       time.Duration
	OutOfOrder int64
}

// Start sets the first line's ts_ms.
func (t *Timing) Start(ts float64) { t.first, t.started = ts, true }

// Offset is the send offset of the next line (the first one given starts
// the timing).
func (t *Timing) Offset(ts float64) time.Duration {
	if !t.started {
		t.Start(ts)
	}
	return t.order(t.offset(ts, 0))
}

func (t *Timing) offset(ts, shift float64) time.Duration {
	return time.Duration((ts - t.first + shift) * float64(time.Millisecond))
}

func (t *Timing) order(off time.Duration) time.Duration {
	if off < t.prev {
		t.OutOfOrder++
		off = t.prev
	}
	t.prev = off
	return off
}

func tsOf(b []byte) (float64, error) {
	var w struct {
		TsMs *float64 `json:"ts_ms"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return 0, err
	}
	if w.TsMs == nil {
		return 0, errors.New("no ts_ms")
	}
	if *w.TsMs < 0 || math.IsNaN(*w.TsMs) {
		return 0, fmt.Errorf("ts_ms %v is negative", *w.TsMs)
	}
	return *w.TsMs, nil
}

// next returns the next item, io.EOF at the end of the schedule.
func (s *schedule) next() (item, error) {
	for {
		b, err := s.lr.next()
		if err == io.EOF {
			if !s.loop || s.count == 0 {
				s.Ended = true
				return item{}, io.EOF
			}
			if s.rate == 0 {
				span := s.lastTs - s.timing.first
				gap := 1.0 // ms, for a one-line trace
				if s.count > 1 && span > 0 {
					gap = span / float64(s.count-1)
				}
				s.shift += span + gap
			}
			s.Loops++
			s.count = 0
			if err := s.lr.rewind(); err != nil {
				return item{}, err
			}
			continue
		}
		if err != nil {
			return item{}, err
		}
		var off time.Duration
		if s.rate > 0 {
			s.now += s.rng.ExpFloat64() / s.rate * 1000
			off = time.Duration(s.now * float64(time.Millisecond))
		} else {
			ts, err := tsOf(b)
			if err != nil {
				return item{}, fmt.Errorf("trace %s line %d: %v", s.lr.path, s.lr.line, err)
			}
			if s.count == 0 && s.Loops == 0 {
				s.timing.Start(ts)
			}
			s.lastTs = ts
			off = s.timing.offset(ts, s.shift)
		}
		s.count++
		off = s.timing.order(off)
		if s.until > 0 && off >= s.until {
			return item{}, io.EOF
		}
		return item{body: b, offset: off}, nil
	}
}
