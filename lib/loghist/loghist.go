// Package loghist is a mergeable latency histogram with logarithmic
// buckets: bucket i holds values in [γ^i, γ^(i+1)) microseconds with γ =
// 1.04, so any quantile read from it is within 2% of a value that occurred
// (its bucket's geometric middle is at most √γ − 1 ≈ 1.98% from either
// edge). App servers count query latencies into one per backend without
// locks; the RBC server adds the counts of many app servers and windows
// (docs/algorithms.md, "Query latency histograms").
package loghist

import (
	"fmt"
	"math"
	"sort"
	"sync/atomic"

	"github.com/robinhoodcache/robinhood/lib/percentile"
)

// Gamma is the ratio between a bucket's upper and lower edge.
const Gamma = 1.04

// Buckets covers 1 µs … about 10^8 µs (100 s); larger values go to the last.
const Buckets = 470

var logGamma = math.Log(Gamma)

// Index is the bucket of a latency in microseconds.
func Index(us float64) int {
	if us < 1 {
		return 0
	}
	i := int(math.Log(us) / logGamma)
	return min(max(i, 0), Buckets-1)
}

// Value is the representative latency (µs) of bucket i: its geometric middle.
func Value(i int) float64 { return math.Pow(Gamma, float64(i)+0.5) }

// Histogram counts observations concurrently (atomic adds, no lock).
type Histogram struct {
	counts [Buckets]atomic.Uint64
}

// Observe counts one latency in microseconds.
func (h *Histogram) Observe(us float64) { h.counts[Index(us)].Add(1) }

// ObserveN counts n queries of the same latency (a batch's queries all
// finish together).
func (h *Histogram) ObserveN(us float64, n uint64) {
	if n > 0 {
		h.counts[Index(us)].Add(n)
	}
}

// Drain returns the counts since the last Drain as a sparse snapshot and
// resets them. Concurrent Observes land in this snapshot or the next one.
func (h *Histogram) Drain() Sparse {
	var s Sparse
	for i := range h.counts {
		if c := h.counts[i].Swap(0); c > 0 {
			s.Index = append(s.Index, uint32(i))
			s.Count = append(s.Count, c)
		}
	}
	return s
}

// Sparse is a histogram's non-empty buckets, by increasing index.
type Sparse struct {
	Index []uint32
	Count []uint64
}

// Counts is a histogram as a map of bucket → count, for adding many.
type Counts map[uint32]uint64

// Add adds a sparse snapshot.
func (c Counts) Add(s Sparse) {
	for i, idx := range s.Index {
		c[idx] += s.Count[i]
	}
}

// Merge adds another Counts.
func (c Counts) Merge(o Counts) {
	for k, v := range o {
		c[k] += v
	}
}

// Sparse is the counts as a sparse snapshot (increasing index).
func (c Counts) Sparse() Sparse {
	var s Sparse
	for k := range c {
		s.Index = append(s.Index, k)
	}
	sort.Slice(s.Index, func(i, j int) bool { return s.Index[i] < s.Index[j] })
	for _, k := range s.Index {
		s.Count = append(s.Count, c[k])
	}
	return s
}

// Validate checks a sparse histogram's encoding: as many counts as
// buckets, every bucket below Buckets. The error names the fields as
// name_bucket and name_count.
func (s Sparse) Validate(name string) error {
	if len(s.Index) != len(s.Count) {
		return fmt.Errorf("%s_bucket has %d entries but %s_count has %d", name, len(s.Index), name, len(s.Count))
	}
	for i, b := range s.Index {
		if b >= Buckets {
			return fmt.Errorf("%s_bucket[%d] = %d is not below %d", name, i, b, Buckets)
		}
	}
	return nil
}

// Total is the number of observations.
func (c Counts) Total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

// Quantile is the representative value (µs) of the bucket holding the
// nearest-rank q-quantile (lib/percentile); 0 without observations.
func (c Counts) Quantile(q float64) float64 {
	n := c.Total()
	if n == 0 {
		return 0
	}
	rank := uint64(percentile.Rank(int(n), q))
	keys := make([]uint32, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var seen uint64
	for _, k := range keys {
		seen += c[k]
		if seen >= rank {
			return Value(int(k))
		}
	}
	return Value(int(keys[len(keys)-1]))
}
