// Package shadow estimates, without changing memcached, how many of a cache
// partition's misses more space would have turned into hits: Cliffhanger's
// shadow-queue hits (Cidon et al., NSDI 2016), computed from the app
// server's own view of the partition (docs/algorithms.md, "Shadow hits").
//
// memcached does not say which keys it evicts, so the model replays what the
// app server sees — every cacheable query, hit or miss, with its object's
// size — through an LRU stack (lib/stackdist). memcached keeps less than its
// limit (slab pages, item headers) and evicts per slab class, so its
// effective size is not the limit: the model tracks it as the stack
// distance E at which an LRU would hit as often as the real cache does (a
// quantile estimate nudged by every query: up when the real cache hit
// beyond E, down when it missed within E). A miss at a distance in
// (E, E + shadow] would have hit with shadow more bytes: a shadow hit.
//
// The model also counts every query's distance in limit bytes — its stack
// distance scaled by limit/E, so that a partition with a limit of x bytes
// hits the queries at most x away — into a histogram (Distances): the
// partition's miss-ratio curve around and well beyond its size, sent with
// the statistics (docs/protocol.md, "Per-backend statistics with the
// batches"; lib/model.CurveFromDistances reads it as a curve).
package shadow

import (
	"github.com/robinhoodcache/robinhood/lib/loghist"
	"github.com/robinhoodcache/robinhood/lib/model"
	"github.com/robinhoodcache/robinhood/lib/stackdist"
)

// step is the relative change of the effective-size estimate per
// disagreeing query: small enough to average over thousands of queries,
// large enough to follow a resize within seconds at a few hundred queries/s.
const step = 0.002

// Model is one partition's shadow model. Not safe for concurrent use.
type Model struct {
	stack     *stackdist.Stack   // keys by name (New)
	ids       *stackdist.IDStack // keys by id (NewByID)
	shadow    int64
	effective float64
	limit     int64
	// Distances, when set, counts every query's distance in limit bytes,
	// in model.DistanceUnit (a first access, or one deeper than the model
	// remembers: model.Never). Safe to drain while the model observes.
	Distances *loghist.Histogram
	// scale is the sizes' scale (a simulated miniature's sample rate):
	// distances are counted as distance / scale.
	scale float64
}

// New returns a model counting shadow hits within shadowBytes beyond the
// partition's effective size; it remembers objects up to maxDepth bytes deep.
func New(shadowBytes, maxDepth int64) *Model {
	return &Model{stack: stackdist.New(maxDepth), shadow: shadowBytes, scale: 1}
}

// Scale has the model count distances of a miniature whose sizes are
// scale times the full system's (the simulator's sample rate) in the full
// system's bytes.
func (m *Model) Scale(scale float64) { m.scale = scale }

// Shadow is the shadow region's size in bytes.
func (m *Model) Shadow() int64 { return m.shadow }

// Effective is the current estimate of the partition's effective size.
func (m *Model) Effective() int64 { return int64(m.effective) }

// NewByID is New for keys named by dense non-negative ids (the simulator's
// interned keys): ObserveID instead of Observe.
func NewByID(shadowBytes, maxDepth int64) *Model {
	return &Model{ids: stackdist.NewIDs(maxDepth), shadow: shadowBytes, scale: 1}
}

// Objects is the number of objects the model holds.
func (m *Model) Objects() int {
	if m.ids != nil {
		return m.ids.Len()
	}
	return m.stack.Len()
}

// Observe records one cacheable query of a key of size bytes, whether the
// real cache hit it, and the partition's current limit (0: unknown); it
// reports whether the query was a shadow hit.
func (m *Model) Observe(key string, size int64, hit bool, limit int64) bool {
	d, cold := m.stack.Access(key, size, size)
	return m.observe(d, cold, hit, limit)
}

// ObserveID is Observe of a model made by NewByID.
func (m *Model) ObserveID(id int32, size int64, hit bool, limit int64) bool {
	d, cold := m.ids.Access(id, size, size)
	return m.observe(d, cold, hit, limit)
}

func (m *Model) observe(d int64, cold, hit bool, limit int64) bool {
	if limit <= 0 {
		return false
	}
	if limit != m.limit { // a resize (or the first limit): move the estimate with it
		if m.limit == 0 || m.effective == 0 {
			m.effective = float64(limit)
		} else {
			m.effective *= float64(limit) / float64(m.limit)
		}
		m.limit = limit
	}
	if m.Distances != nil {
		v := model.Never
		if !cold {
			v = float64(d) * float64(limit) / m.effective / m.scale / model.DistanceUnit
		}
		m.Distances.Observe(v)
	}
	if cold {
		return false
	}
	within := float64(d) <= m.effective
	switch {
	case hit && !within:
		m.effective *= 1 + step
	case !hit && within:
		m.effective *= 1 - step
	}
	return !hit && float64(d) > m.effective && float64(d) <= m.effective+float64(m.shadow)
}
