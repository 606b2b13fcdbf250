package sim

import (
	"fmt"
	"time"

	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// synthSource draws the requests `tracegen synth` with the same options
// would write from the generator in process, without the file. The
// generator does not depend on the run: with a producer, a goroutine draws
// and copies them in batches ahead of the run, in the same order.
type synthSource struct {
	g *synth.Generator
	n int64
	traceFeed

	batches chan []*trace.Request // the producer's, in order
	stop    chan struct{}
	batch   []*trace.Request
	taken   int
}

// requestBatch is how many requests the producer hands over at once, and
// requestBatches how many batches it may be ahead.
const (
	requestBatch   = 256
	requestBatches = 8
)

func newSynthSource(o synth.Options, producer bool) (*synthSource, error) {
	g, err := synth.New(o)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	t := &synthSource{g: g}
	if producer {
		t.batches = make(chan []*trace.Request, requestBatches)
		t.stop = make(chan struct{})
		go t.produce()
	}
	return t, nil
}

func (t *synthSource) produce() {
	defer close(t.batches)
	for {
		b := make([]*trace.Request, requestBatch)
		for i := range b {
			b[i] = copyRequest(t.g.Next())
		}
		select {
		case t.batches <- b:
		case <-t.stop:
			return
		}
	}
}

func (t *synthSource) next() (*trace.Request, time.Duration, error) {
	var r *trace.Request
	if t.batches == nil {
		r = copyRequest(t.g.Next())
	} else {
		if t.taken == len(t.batch) {
			t.batch, t.taken = <-t.batches, 0
		}
		r = t.batch[t.taken]
		t.batch[t.taken] = nil
		t.taken++
	}
	t.n++
	return r, t.timing.Offset(r.TsMs), nil
}

func (t *synthSource) where() string { return fmt.Sprintf("generated request %d", t.n) }

// close stops the producer.
func (t *synthSource) close() {
	if t.stop != nil {
		close(t.stop)
		for range t.batches { // let it see the stop
		}
		t.stop = nil
	}
}

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
