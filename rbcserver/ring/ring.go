// Package ring keeps the most recent request records of the RBC server in a
// fixed-size ring: arrival time, latency and blocking backend in three
// preallocated parallel arrays. When the ring is full a new record
// overwrites the oldest one.
//
// Arrival times never decrease along the ring (Append clamps a time that
// goes backwards to the newest one), so the records of a time window are a
// contiguous run at the newest end, found by binary search.
//
// A Ring is safe for concurrent use. Append copies a whole batch under one
// lock acquisition; Window copies the window out so that the caller can
// compute on it without holding the lock.
package ring

import (
	"fmt"
	"sort"
	"sync"
)

// Ring is a fixed-capacity store of (arrival, latency, backend) records.
type Ring struct {
	mu      sync.Mutex
	arrival []int64  // nanoseconds on the caller's clock
	lat     []uint32 // latency in microseconds
	backend []uint32 // blocking backend id
	next    int      // position the next record is written to
	n       int      // number of stored records, ≤ capacity
	newest  int64    // arrival time of the newest record
}

// New returns an empty ring holding up to capacity records. The three
// arrays are allocated up front: 16 bytes per record, 16 MB for a million.
func New(capacity int) (*Ring, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("ring capacity %d must be at least 1", capacity)
	}
	return &Ring{
		arrival: make([]int64, capacity),
		lat:     make([]uint32, capacity),
		backend: make([]uint32, capacity),
	}, nil
}

// Cap returns the capacity.
func (r *Ring) Cap() int { return len(r.lat) }

// Len returns the number of stored records.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Append stores one batch of records that arrived at time at (nanoseconds
// on any clock that the caller also uses for Window). If at is before the
// newest stored arrival it is raised to it. lat and backend are parallel
// arrays and must have equal length; Append panics otherwise, because the
// caller validates batches before storing them. A batch longer than the
// capacity leaves only its last Cap records.
func (r *Ring) Append(at int64, lat, backend []uint32) {
	if len(lat) != len(backend) {
		panic(fmt.Sprintf("ring: Append with %d latencies and %d backends", len(lat), len(backend)))
	}
	c := len(r.lat)
	if len(lat) > c {
		lat, backend = lat[len(lat)-c:], backend[len(backend)-c:]
	}
	if len(lat) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	at = max(at, r.newest)
	r.newest = at
	for len(lat) > 0 {
		// Copy up to the end of the arrays, then wrap to the start.
		k := copy(r.lat[r.next:], lat)
		copy(r.backend[r.next:], backend[:k])
		fill(r.arrival[r.next:r.next+k], at)
		lat, backend = lat[k:], backend[k:]
		r.next += k
		if r.next == c {
			r.next = 0
		}
		r.n = min(r.n+k, c)
	}
}

func fill(a []int64, v int64) {
	for i := range a {
		a[i] = v
	}
}

// Window copies the records that arrived at or after since, oldest first,
// into lat and backend (reusing their capacity, growing them when needed)
// and returns the filled slices.
func (r *Ring) Window(since int64, lat, backend []uint32) ([]uint32, []uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := len(r.lat)
	oldest := r.next - r.n
	if oldest < 0 {
		oldest += c
	}
	pos := func(i int) int { // physical index of the i-th oldest record
		p := oldest + i
		if p >= c {
			p -= c
		}
		return p
	}
	first := sort.Search(r.n, func(i int) bool { return r.arrival[pos(i)] >= since })
	m := r.n - first
	lat, backend = grow(lat, m), grow(backend, m)
	if m == 0 {
		return lat, backend
	}
	start := pos(first)
	k := copy(lat, r.lat[start:min(start+m, c)])
	copy(backend, r.backend[start:start+k])
	copy(lat[k:], r.lat[:m-k])
	copy(backend[k:], r.backend[:m-k])
	return lat, backend
}

// grow returns s resized to n elements, reallocating only when its capacity
// is too small. The contents are not preserved.
func grow(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}
