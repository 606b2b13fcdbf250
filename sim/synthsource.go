package sim

import (
	"fmt"
	"time"

	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// synthSource draws the requests from the workload generator in process:
// the requests `tracegen synth` with the same options would write, without
// the file (a paper-scale run's trace would be hundreds of gigabytes).
type synthSource struct {
	g *synth.Generator
	n int64
	traceFeed
}

func newSynthSource(o synth.Options) (*synthSource, error) {
	g, err := synth.New(o)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	return &synthSource{g: g}, nil
}

func (t *synthSource) next() (*trace.Request, time.Duration, error) {
	r := t.g.Next()
	t.n++
	return copyRequest(r), t.timing.Offset(r.TsMs), nil
}

func (t *synthSource) feed() *traceFeed { return &t.traceFeed }
func (t *synthSource) where() string    { return fmt.Sprintf("generated request %d", t.n) }
func (t *synthSource) close()           {}

// copyRequest is a request the generator will not reuse (key strings are
// immutable and shared).
func copyRequest(r *trace.Request) *trace.Request {
	c := *r
	c.Layers = make([]trace.Layer, len(r.Layers))
	for i, layer := range r.Layers {
		out := make(trace.Layer, len(layer))
		for j, q := range layer {
			out[j] = trace.BackendQueries{Backend: q.Backend, Keys: append([]string(nil), q.Keys...),
				Sizes: append([]int64(nil), q.Sizes...), Cacheable: append([]bool(nil), q.Cacheable...),
				IDs: append([]int32(nil), q.IDs...)}
		}
		c.Layers[i] = out
	}
	return &c
}
