package sim

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/lib/hashing"
	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/lib/trace"
)

// traceSource reads the trace's requests with their send offsets.
type traceSource struct {
	sample uint64 // keep a query when its key's hash is below it (0: every query)
	f      *os.File
	lr     *trace.LineReader
	line   int64
	traceFeed
}

// traceFeed is what the run's summary says about its request source.
type traceFeed struct {
	timing replay.Timing
	ended  bool
}

func (f *traceFeed) feed() *traceFeed { return f }

// source is where requests come from: a trace file, or the generator in
// process (synthSource).
type source interface {
	// next returns the next request and its send offset, io.EOF at the
	// end; the request is the caller's.
	next() (*trace.Request, time.Duration, error)
	feed() *traceFeed
	// where names the last request for errors ("trace line 7").
	where() string
	close()
}

func openTrace(path string, sample float64) (*traceSource, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	t := &traceSource{f: f, lr: trace.NewLineReader(f)}
	if sample < 1 {
		t.sample = uint64(sample * math.MaxUint64)
	}
	return t, nil
}

// keyHash is FNV-1a over the backend's name, a zero byte and the key: the
// spatial sample keeps a key on every request or on none.
func keyHash(backend, key string) uint64 {
	// FNV's low bits mix poorly into the high ones: finish with a
	// multiply-xorshift so the threshold test is uniform.
	return hashing.Fmix64Half(hashing.FNV1aAdd(hashing.FNV1aSep(hashing.FNV1a(backend)), key))
}

// keep drops the queries outside the sample; it reports whether any is left.
func (t *traceSource) keep(req *trace.Request) bool {
	n := 0
	layers := req.Layers[:0]
	for _, layer := range req.Layers {
		out := layer[:0]
		for _, q := range layer {
			j := 0
			for i, k := range q.Keys {
				if keyHash(q.Backend, k) < t.sample {
					q.Keys[j], q.Sizes[j], q.Cacheable[j] = k, q.Sizes[i], q.Cacheable[i]
					j++
				}
			}
			if j > 0 {
				q.Keys, q.Sizes, q.Cacheable = q.Keys[:j], q.Sizes[:j], q.Cacheable[:j]
				out = append(out, q)
				n += j
			}
		}
		if len(out) > 0 {
			layers = append(layers, out)
		}
	}
	req.Layers = layers
	return n > 0
}

func (t *traceSource) close() { t.f.Close() }

func (t *traceSource) where() string { return fmt.Sprintf("trace line %d", t.line) }

// next returns the next request and its send offset, io.EOF at the end.
func (t *traceSource) next() (*trace.Request, time.Duration, error) {
	for {
		b, err := t.lr.Next() // bounded: a line longer than trace.MaxLineBytes is an error
		if err != nil {
			if err == io.EOF {
				t.ended = true
			}
			return nil, 0, err
		}
		t.line = t.lr.Line()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		req, perr := trace.Parse(b)
		if perr != nil {
			return nil, 0, fmt.Errorf("trace line %d: %w", t.line, perr)
		}
		if !req.HasTs {
			return nil, 0, fmt.Errorf("trace line %d: no ts_ms (the simulator replays the trace's own times)", t.line)
		}
		off := t.timing.Offset(req.TsMs)
		if t.sample > 0 && !t.keep(req) {
			continue
		}
		return req, off, nil
	}
}
