package rbc

import (
	"cmp"
	"github.com/robinhoodcache/robinhood/lib/percentile"
	"slices"
)

// BruteForce computes the same Result as Calculator.Compute the obvious way:
// it sorts a copy of the latencies, reads the ranks off it and counts with a
// map. It is the reference the fast path is tested against (here and in the
// server's tests); it is too slow for serving. The arrays must have equal
// length and p must be valid.
func BruteForce(lat, backend []uint32, p Params) Result {
	n := len(lat)
	if n == 0 {
		return Result{}
	}
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	at := func(pct float64) uint32 { return sorted[percentile.Rank(n, pct/100)-1] }
	res := Result{N: n, Low: at(p.LowPct), High: at(p.HighPct), P50: at(50), P99: at(99)}
	window := map[uint32]uint64{}
	band := map[uint32]uint64{}
	for i, l := range lat {
		window[backend[i]]++
		if res.Low <= l && l <= res.High {
			band[backend[i]]++
			res.Band++
		}
	}
	for b, w := range window {
		res.Backends = append(res.Backends, Count{Backend: b, Blocking: band[b], Window: w})
	}
	slices.SortFunc(res.Backends, func(x, y Count) int { return cmp.Compare(x.Backend, y.Backend) })
	return res
}
