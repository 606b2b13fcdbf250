// Package mrc computes miss-ratio curves: for each backend of a trace, the
// miss ratio of an LRU cache of its objects as a function of the cache's
// size in bytes (docs/algorithms.md, "Miss-ratio curves").
//
// The cache model: per backend, an LRU cache holding the cacheable objects
// (C = 1) by key, each charged its size S (no per-item overhead), with a
// capacity in bytes. Every cacheable query is an access; a first access is a
// (cold) miss; an object larger than the cache never hits; an access with a
// new size re-charges the object with it.
//
// Exact mode computes every access's byte stack distance — the object's size
// plus the sizes of the distinct objects accessed since its previous access
// — in one pass (lib/stackdist: a Fenwick tree over access times, O(log n)
// per access), so one pass gives the curve at every size: an access hits in a cache of c
// bytes iff its distance is at most c. This equals an LRU simulation as long
// as no object shrinks between two of its accesses (a shrunk object makes
// the stack model count as resident an object the LRU had already evicted;
// traces from tracegen synth never change an object's size). Sampled mode is
// SHARDS (Waldspurger et al., FAST 2015) with a fixed rate R and its count
// adjustment (SHARDS_adj): only the keys whose hash falls below R are
// tracked, the bytes between two accesses of a sampled object are scaled by
// 1/R, and the miss counts are divided by the expected number of sampled
// accesses; memory and time shrink by about R.
package mrc

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/robinhoodcache/robinhood/lib/hashing"
	"github.com/robinhoodcache/robinhood/lib/stackdist"
	"github.com/robinhoodcache/robinhood/lib/trace"
)

// Options configure a Builder.
type Options struct {
	// Sizes are the cache sizes, in bytes, the curves are evaluated at.
	Sizes []int64
	// SampleRate is SHARDS's R in (0, 1]; 0 or 1 means exact.
	SampleRate float64
	// Always, when sampling, names keys tracked at every access whatever
	// their hash (the popular ones: HeavyHitters finds them). Each stands
	// for itself, each sampled key for 1/R keys.
	Always func(backend, key string) bool
}

// Point is the miss ratio at one cache size.
type Point struct {
	Bytes     int64   `json:"cache_bytes"`
	MissRatio float64 `json:"miss_ratio"`
}

// Curve is one backend's miss-ratio curve.
type Curve struct {
	Backend string `json:"backend"`
	// Accesses counts every cacheable query of the backend; Tracked the ones
	// the curve is computed from (all of them in exact mode).
	Accesses int64 `json:"accesses"`
	Tracked  int64 `json:"tracked"`
	// Cold counts the first accesses (misses at every size), estimated from
	// the sample in sampled mode.
	Cold   float64 `json:"cold"`
	Points []Point `json:"points"`
}

// Builder accumulates a trace's accesses. Not safe for concurrent use.
type Builder struct {
	sizes     []int64
	rate      float64
	threshold uint64
	always    func(backend, key string) bool
	stacks    map[string]*stack
}

// hashSpace is SHARDS's modulus P (keys are sampled when hash mod P < R·P).
const hashSpace = 1 << 24

// New returns a Builder; the sizes are sorted and must be positive.
func New(o Options) (*Builder, error) {
	if len(o.Sizes) == 0 {
		return nil, errors.New("no cache sizes")
	}
	sizes := append([]int64(nil), o.Sizes...)
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	for _, s := range sizes {
		if s <= 0 {
			return nil, fmt.Errorf("cache size %d is not positive", s)
		}
	}
	rate := o.SampleRate
	if rate == 0 {
		rate = 1
	}
	if !(rate > 0 && rate <= 1) || math.IsNaN(rate) {
		return nil, fmt.Errorf("sample rate %v is not in (0, 1]", o.SampleRate)
	}
	return &Builder{sizes: sizes, rate: rate, threshold: uint64(math.Round(rate * hashSpace)), always: o.Always,
		stacks: map[string]*stack{}}, nil
}

// Add counts every cacheable query of a request.
func (b *Builder) Add(r *trace.Request) {
	for _, layer := range r.Layers {
		for i := range layer {
			q := &layer[i]
			st := b.stacks[q.Backend]
			if st == nil {
				st = newStack(len(b.sizes))
				b.stacks[q.Backend] = st
			}
			for j, k := range q.Keys {
				if q.Cacheable[j] {
					b.track(st, q.Backend, k, q.Sizes[j])
				}
			}
		}
	}
}

// Access counts one access of a backend's object (for callers without
// trace requests).
func (b *Builder) Access(backend, key string, size int64) {
	st := b.stacks[backend]
	if st == nil {
		st = newStack(len(b.sizes))
		b.stacks[backend] = st
	}
	b.track(st, backend, key, size)
}

// track counts one access: every one in exact mode; when sampling, the
// accesses of the keys Always names (weight 1) and of the keys whose hash
// falls below R (weight 1/R).
func (b *Builder) track(st *stack, backend, key string, size int64) {
	st.accesses++
	w := 1.0
	if b.rate < 1 && (b.always == nil || !b.always(backend, key)) {
		if fnv1a(key)%hashSpace >= b.threshold {
			return
		}
		w = 1 / b.rate
	}
	// The stack holds every tracked object's size times its weight: the
	// bytes between two accesses of an object are estimated from the tracked
	// ones; the object's own size is known.
	d, cold := st.dist.Access(key, size, int64(math.Round(float64(size)*w)))
	st.tracked++
	if cold {
		st.cold += w
		return
	}
	// The first size the access hits at; it misses at every smaller one.
	i := sort.Search(len(b.sizes), func(i int) bool { return b.sizes[i] >= d })
	st.hist[i] += w
}

// Curves returns every backend's curve, sorted by backend name.
func (b *Builder) Curves() []Curve {
	names := make([]string, 0, len(b.stacks))
	for n := range b.stacks {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Curve, 0, len(names))
	for _, n := range names {
		st := b.stacks[n]
		c := Curve{Backend: n, Accesses: st.accesses, Tracked: st.tracked, Cold: st.cold}
		// misses at size j: cold + accesses whose first hitting size is after j;
		// every count weighted, so their total estimates the accesses.
		later := 0.0
		misses := make([]float64, len(b.sizes))
		for j := len(b.sizes) - 1; j >= 0; j-- {
			later += st.hist[j+1]
			misses[j] = st.cold + later
		}
		den := st.cold
		for _, h := range st.hist {
			den += h
		}
		for j, s := range b.sizes {
			mr := 0.0
			if den > 0 {
				mr = misses[j] / den
			}
			c.Points = append(c.Points, Point{Bytes: s, MissRatio: mr})
		}
		out = append(out, c)
	}
	return out
}

// stack is one backend's LRU stack (lib/stackdist) and its histogram.
type stack struct {
	dist     *stackdist.Stack
	hist     []float64 // hist[i]: (weighted) accesses that first hit at sizes[i] (i = len: at none)
	cold     float64
	tracked  int64
	accesses int64
}

func newStack(nsizes int) *stack {
	return &stack{dist: stackdist.New(0), hist: make([]float64, nsizes+1)}
}

// fnv1a is the 64-bit FNV-1a hash of s with a final avalanche (the
// sampling hash: deterministic across runs and machines; FNV's own low bits
// are too regular for short keys).
func fnv1a(s string) uint64 {
	return hashing.Fmix64(hashing.FNV1a(s))
}

// HeavyHitters finds each backend's popular keys in one pass with bounded
// memory (Misra–Gries with k counters per backend: every key with more than
// 1/(k+1) of the backend's accesses is kept). Sampled mode tracks them at
// every access, which removes the variance a few very popular keys cause
// when a hash sample happens to hold them or not.
type HeavyHitters struct {
	k      int
	counts map[string]map[string]int64
}

// NewHeavyHitters keeps up to k keys per backend.
func NewHeavyHitters(k int) *HeavyHitters {
	return &HeavyHitters{k: k, counts: map[string]map[string]int64{}}
}

// Observe counts one access.
func (h *HeavyHitters) Observe(backend, key string) {
	m := h.counts[backend]
	if m == nil {
		m = map[string]int64{}
		h.counts[backend] = m
	}
	if _, ok := m[key]; ok || len(m) < h.k {
		m[key]++
		return
	}
	for k, c := range m {
		if c <= 1 {
			delete(m, k)
		} else {
			m[k] = c - 1
		}
	}
}

// Add observes every cacheable query of a request.
func (h *HeavyHitters) Add(r *trace.Request) {
	for _, layer := range r.Layers {
		for i := range layer {
			q := &layer[i]
			for j, k := range q.Keys {
				if q.Cacheable[j] {
					h.Observe(q.Backend, k)
				}
			}
		}
	}
}

// Contains reports whether key is one of backend's heavy hitters.
func (h *HeavyHitters) Contains(backend, key string) bool {
	_, ok := h.counts[backend][key]
	return ok
}
