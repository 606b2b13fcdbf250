package feasibility

import (
	"maps"
	"math"
	"slices"
	"sort"

	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/model"
	"github.com/robinhoodcache/robinhood/lib/slabcache"
)

// What a memcached partition of m MiB is worth, measured: memcached keeps
// one LRU per slab class, and a class keeps the pages it got while the
// cache filled, so with values of many sizes whose popularity shifts
// (real key streams) a partition can hit much less than an LRU of the
// bytes it holds. heldProbe replays one app server's share of a backend's
// cacheable queries through the simulator's memcached model
// (lib/slabcache) at a few partition sizes, and, over the same accesses
// once each cache is full, the LRU stack distances; a size's worth is the
// LRU size that misses as often (Workload.HeldMB).

// heldGrid is the partition sizes (MiB) probed for a budget: sixteenths of
// it, and the smallest ones a floor may leave.
func heldGrid(maxMB int) []int {
	set := map[int]bool{}
	for _, f := range []float64{1.0 / 16, 1.0 / 8, 1.0 / 4, 3.0 / 8, 1.0 / 2, 5.0 / 8, 3.0 / 4, 1} {
		if m := int(math.Round(f * float64(maxMB))); m >= 1 {
			set[m] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// heldProbe measures one backend.
type heldProbe struct {
	grid   []int
	caches []*slabcache.Cache
	// full[i]: cache i has been full once; from then on its accesses
	// count: misses[i] of accesses[i], and hist[i] their stack distances
	// (by the first MiB they hit at; the last entry: beyond, or cold).
	full             []bool
	misses, accesses []float64
	hist             [][]float64
	ids              map[string]uint64
}

func newHeldProbe(grid []int, maxMB int) *heldProbe {
	p := &heldProbe{grid: grid, ids: map[string]uint64{}}
	for _, m := range grid {
		p.caches = append(p.caches, slabcache.NewCache(int64(m)*model.MiB))
		p.hist = append(p.hist, make([]float64, maxMB+2))
	}
	p.full = make([]bool, len(grid))
	p.misses = make([]float64, len(grid))
	p.accesses = make([]float64, len(grid))
	return p
}

// access is one cacheable query with its LRU stack distance bin.
func (p *heldProbe) access(key string, size int64, bin int) {
	id, ok := p.ids[key]
	if !ok {
		id = uint64(len(p.ids)) + 1
		p.ids[key] = id
	}
	for i, c := range p.caches {
		hit := c.Get(id, size)
		if !hit {
			c.Set(id, len(key), size)
		}
		if !p.full[i] && c.Malloced() >= c.Limit()-costmodel.PageBytes {
			p.full[i] = true
		}
		if p.full[i] {
			p.accesses[i]++
			if !hit {
				p.misses[i]++
			}
			p.hist[i][bin]++
		}
	}
}

// worth is, per grid size, the LRU size (MiB) with the same miss ratio
// over the same accesses; NaN where the cache never filled (then it holds
// every value it is given, as an LRU of its bytes would) or the accesses
// are too few to tell. Where the LRU curve is flat around that miss ratio
// (within 0.003) any size in the flat stretch fits: the one nearest
// est(m), the slab-chunk estimate, is taken.
func (p *heldProbe) worth(est func(m float64) float64) []float64 {
	const tol = 0.003
	out := make([]float64, len(p.grid))
	for i, g := range p.grid {
		out[i] = math.NaN()
		if p.accesses[i] < 500 {
			continue
		}
		mr := p.misses[i] / p.accesses[i]
		curve := model.MissCurve(p.hist[i])
		// the curve falls with size: the first size at or below mr
		j := sort.Search(len(curve), func(j int) bool { return curve[j] <= mr })
		switch {
		case j == 0:
			out[i] = 0
		case j >= len(curve):
			out[i] = float64(len(curve) - 1)
		default: // interpolate between j-1 (above mr) and j (at or below)
			hi, lo := curve[j-1], curve[j]
			f := 1.0
			if hi > lo {
				f = (hi - mr) / (hi - lo)
			}
			out[i] = float64(j-1) + f
		}
		a := sort.Search(len(curve), func(j int) bool { return curve[j] <= mr+tol })
		b := sort.Search(len(curve), func(j int) bool { return curve[j] < mr-tol }) - 1
		if a <= b {
			out[i] = math.Min(math.Max(est(float64(g)), float64(a)), float64(b))
		}
	}
	return out
}

// HeldMB is what an m-MiB partition of backend b is worth, in MiB of an
// LRU over its values: measured (heldProbe) and interpolated between the
// probed sizes; the slab-chunk estimate (Slabs.HeldMB) where nothing was
// measured, and below the smallest probed size scaled by its ratio.
func (w *Workload) HeldMB(b int, m float64) float64 {
	est := w.Slabs[b].HeldMB(m)
	if b >= len(w.worth) || m <= 0 {
		return est
	}
	grid, worth := w.heldGrid, w.worth[b]
	// the measured sizes, with the estimate where the probe could not tell
	xs, ys := make([]float64, 0, len(grid)), make([]float64, 0, len(grid))
	for i, g := range grid {
		y := worth[i]
		if math.IsNaN(y) {
			y = w.Slabs[b].HeldMB(float64(g))
		}
		xs, ys = append(xs, float64(g)), append(ys, y)
	}
	if len(xs) == 0 {
		return est
	}
	if m <= xs[0] {
		if xs[0] <= 0 {
			return est
		}
		return ys[0] * m / xs[0]
	}
	for i := 1; i < len(xs); i++ {
		if m <= xs[i] {
			f := (m - xs[i-1]) / (xs[i] - xs[i-1])
			return ys[i-1] + f*(ys[i]-ys[i-1])
		}
	}
	return ys[len(ys)-1] + est - w.Slabs[b].HeldMB(xs[len(xs)-1])
}

// AsHeld is backend b's miss-ratio curve (at whole MiB of an LRU) read at
// what each whole MiB of its partition is worth (HeldMB).
func (w *Workload) AsHeld(b int, curve []float64) []float64 {
	out := make([]float64, len(curve))
	for m := range curve {
		out[m] = model.MissAt(curve, w.HeldMB(b, float64(m)))
	}
	return out
}
