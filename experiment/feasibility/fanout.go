package feasibility

import (
	"maps"
	"math"
	"slices"

	"github.com/robinhoodcache/robinhood/lib/costmodel"
)

// Fanout is the shape of a trace's requests, as the latency model needs it
// (latency.go): how many queries of each backend a request has, cacheable
// or not, and how often each shape occurs.
type Fanout struct {
	// Backends are the names of the backends the trace queries, sorted (the
	// order of FromTrace).
	Backends []string
	// MeanSize is each backend's mean value size, bytes per query.
	MeanSize []float64
	// Pairs lists, per backend, the distinct (cacheable, uncacheable) query
	// counts of the requests that query it.
	Pairs [][]Pair
	// Shapes are the distinct request shapes with their share of the
	// requests (the shares sum to 1).
	Shapes []Shape
	// Rate is the trace's request rate over every app server, requests/s.
	Rate float64
	// Layers is the most layers a request has. The model folds a request's
	// layers into one (its latency is the slowest call, not a sum).
	Layers int
	// Slabs is, per backend, how memcached stores its values: a partition
	// of m MiB holds Slabs[b].HeldMB(m) MiB of them.
	Slabs []Slabs
}

// Pair is one backend's share of a request: its cacheable and
// uncacheable queries (summed over the request's layers).
type Pair struct {
	Cacheable, Uncacheable int
	// Weight is the share of all requests with this pair.
	Weight float64
}

// Shape is one request shape: per backend (Fanout.Backends), an index into
// that backend's Pairs, -1 when the request does not query it.
type Shape struct {
	Weight float64
	Pair   []int32
}

// pageCharge is the memory an item charged chunk bytes
// (costmodel.ItemCharge) takes in whole pages: a page holds
// ⌊1 MiB / chunk⌋ chunks, and the rest of it is lost; an item larger than
// the largest chunk spans several.
func pageCharge(chunk int64) float64 {
	if chunk >= costmodel.ChunkMax {
		return float64(chunk)
	}
	return float64(costmodel.PageBytes) / float64(costmodel.PageBytes/chunk)
}

// slabs accounts one backend's cacheable values as memcached stores them.
type slabs struct {
	value, charged float64
	// keys maps each distinct key to its chunk.
	keys map[string]int64
}

// add accounts one access and reports whether it was the key's first.
func (s *slabs) add(key string, size int64) bool {
	chunk := costmodel.ItemCharge(len(key), size)
	s.value += float64(size)
	s.charged += pageCharge(chunk)
	if s.keys == nil {
		s.keys = map[string]int64{}
	}
	if _, ok := s.keys[key]; ok {
		return false
	}
	s.keys[key] = chunk
	return true
}

// Slab is one slab class of a backend's values.
type Slab struct {
	// PerPage is how many chunks a page holds; Keys how many distinct keys
	// of the trace fall in the class; Share their share of the backend's
	// distinct keys.
	PerPage, Keys, Share float64
}

// Slabs is how memcached stores one backend's values: Charge is the memory
// per byte of value over the cacheable accesses (the slab chunk, and the
// part of a 1 MiB page its chunks cannot fill), Classes the slab classes
// of its keys.
type Slabs struct {
	Charge  float64
	Classes []Slab
}

func (s *slabs) summary() Slabs {
	if s.value <= 0 {
		return Slabs{Charge: 1}
	}
	out := Slabs{Charge: s.charged / s.value}
	count := map[int64]float64{}
	for _, c := range s.keys {
		if c < costmodel.ChunkMax { // items of whole pages leave no page part empty
			count[c]++
		}
	}
	for _, c := range slices.Sorted(maps.Keys(count)) {
		out.Classes = append(out.Classes, Slab{PerPage: float64(costmodel.PageBytes / c), Keys: count[c], Share: count[c] / float64(len(s.keys))})
	}
	return out
}

// HeldMB is about how many MiB of values a memcached instance of m MiB
// holds once full (sim/cache.go): m less the pages its classes cannot
// fill, over the charge. memcached gives a class a page when an item of
// it arrives and the limit allows one more; once the pages run out, they
// stay with their classes. So a class whose keys cannot fill a page, and
// that got one while the cache filled, leaves the rest of it empty. The
// fill is taken as drawing distinct keys at random: after n of them, a
// class of share s has a page with probability 1 − e^(−n·s), and about
// n·s/perPage pages beyond.
func (s Slabs) HeldMB(m float64) float64 {
	if len(s.Classes) == 0 || m <= 0 {
		return math.Max(m, 0) / s.Charge
	}
	pages := func(n float64) float64 {
		p := 0.0
		for _, c := range s.Classes {
			p += -math.Expm1(-n*c.Share) + n*c.Share/c.PerPage
		}
		return p
	}
	lo, hi := 0.0, 1.0
	for pages(hi) < m && hi < 1e15 {
		lo, hi = hi, hi*2
	}
	for range 60 {
		if mid := (lo + hi) / 2; pages(mid) < m {
			lo = mid
		} else {
			hi = mid
		}
	}
	waste := 0.0
	for _, c := range s.Classes {
		if c.Keys < c.PerPage {
			waste += -math.Expm1(-hi*c.Share) * (1 - c.Keys/c.PerPage)
		}
	}
	return math.Max(0, m-waste) / s.Charge
}
