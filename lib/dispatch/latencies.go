package dispatch

import (
	"slices"
	"time"

	"github.com/robinhoodcache/robinhood/lib/percentile"
)

// latencies keeps the last len(ring) latencies a policy saw and a
// percentile of them, recomputed every refresh records (d-hedge, singler).
type latencies struct {
	ring    []time.Duration
	n       int // records so far
	since   int // records since the last refresh
	refresh int
	sorted  []time.Duration
}

func newLatencies(size int) *latencies {
	return &latencies{ring: make([]time.Duration, size), refresh: max(size/10, 1)}
}

// add records one latency; it returns true when the sorted view was
// refreshed by it.
func (l *latencies) add(d time.Duration) bool {
	l.ring[l.n%len(l.ring)] = d
	l.n++
	l.since++
	if l.since < l.refresh && l.sorted != nil {
		return false
	}
	l.since = 0
	l.sorted = append(l.sorted[:0], l.ring[:min(l.n, len(l.ring))]...)
	slices.Sort(l.sorted)
	return true
}

// count is the number of latencies held.
func (l *latencies) count() int { return min(l.n, len(l.ring)) }

// quantile is quantile q (0 < q ≤ 1) of the latencies at the last refresh
// (nearest rank); 0 before any.
func (l *latencies) quantile(q float64) time.Duration { return percentile.Of(l.sorted, q) }
