// Package rbc computes request blocking counts (paper §3.1, docs/algorithms.md) over a
// window of request records. It is pure: no clocks, no locks, no I/O.
//
// For n records, lo is the latency at 1-based nearest rank ceil(low/100·n)
// and hi the latency at rank ceil(high/100·n). The band S is every record
// with lo ≤ latency ≤ hi, and RBC(b) is the number of records of S whose
// blocking backend is b. The order statistics are found by selection
// (quickselect), never by sorting the window.
package rbc

import (
	"fmt"
	"github.com/robinhoodcache/robinhood/lib/percentile"
)

// MaxBackends bounds backend ids: every id must be below it. The topology
// uses 0…1023 (DefaultMaxBackends, docs/topology.md); the bound keeps the
// per-backend tallies small.
const MaxBackends = 1 << 16

// DefaultMaxBackends is the RBC server's default bound on backend ids: the
// topology's ids are 0…1023.
const DefaultMaxBackends = 1024

// Params is the percentile band of one computation. The paper's band
// (§3.1: P98.5 to P99.5) is the topology schema's default
// (rbc_server.low_pct, high_pct), read with lib/config; it has no copy here.
type Params struct {
	// LowPct and HighPct bound the band; both in (0, 100], LowPct ≤ HighPct.
	LowPct, HighPct float64
}

// Validate reports whether both percentiles are in (0, 100] and low ≤ high.
// The message names the parameter and its value.
func (p Params) Validate() error {
	if !(p.LowPct > 0 && p.LowPct <= 100) {
		return fmt.Errorf("low_pct = %v is outside (0, 100]", p.LowPct)
	}
	if !(p.HighPct > 0 && p.HighPct <= 100) {
		return fmt.Errorf("high_pct = %v is outside (0, 100]", p.HighPct)
	}
	if p.LowPct > p.HighPct {
		return fmt.Errorf("low_pct = %v is above high_pct = %v", p.LowPct, p.HighPct)
	}
	return nil
}

// Count is one backend's share of a window.
type Count struct {
	// Backend is the backend id.
	Backend uint32
	// Blocking is RBC(backend): records of the band S blocked by it.
	Blocking uint64
	// Window is the number of records of the whole window blocked by it.
	Window uint64
}

// Result is the outcome of one computation. All fields are zero for an
// empty window.
type Result struct {
	// N is the number of records in the window.
	N int
	// Low and High are the latencies at the band's two ranks.
	Low, High uint32
	// P50 and P99 are the nearest-rank median and 99th percentile.
	P50, P99 uint32
	// Band is |S|, the number of records with Low ≤ latency ≤ High.
	Band uint64
	// Backends lists every backend that blocked at least one record of the
	// window, ordered by backend id.
	Backends []Count
}

// Calculator computes results, reusing its scratch memory from one call to
// the next. A Calculator is not safe for concurrent use.
type Calculator struct {
	sel    []uint32 // copy of the latencies, permuted by selection
	window []uint64 // per-backend count over the window
	band   []uint64 // per-backend count over the band
}

// Compute returns the RBC of the window given as parallel arrays: lat[i] is
// the latency and backend[i] the blocking backend of record i. The inputs
// are not modified. It fails when the arrays differ in length, p is invalid
// or a backend id is not below MaxBackends.
func (c *Calculator) Compute(lat, backend []uint32, p Params) (Result, error) {
	if len(lat) != len(backend) {
		return Result{}, fmt.Errorf("latency array has %d entries but backend array has %d", len(lat), len(backend))
	}
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	n := len(lat)
	if n == 0 {
		return Result{}, nil
	}
	var maxB uint32
	for _, b := range backend {
		maxB = max(maxB, b)
	}
	if maxB >= MaxBackends {
		return Result{}, fmt.Errorf("backend id %d is not below %d", maxB, MaxBackends)
	}
	c.sel = append(c.sel[:0], lat...)
	ranks := [4]int{percentile.Rank(n, p.LowPct/100), percentile.Rank(n, p.HighPct/100), percentile.Rank(n, 0.5), percentile.Rank(n, 0.99)}
	var vals [4]uint32
	selectRanks(c.sel, ranks[:], vals[:])
	res := Result{N: n, Low: vals[0], High: vals[1], P50: vals[2], P99: vals[3]}
	res.Band, res.Backends = c.count(lat, backend, int(maxB)+1, res.Low, res.High)
	return res, nil
}

// count tallies the window and the band per backend in one pass.
// size is one more than the largest backend id.
func (c *Calculator) count(lat, backend []uint32, size int, lo, hi uint32) (uint64, []Count) {
	if len(c.window) < size {
		c.window = make([]uint64, size)
		c.band = make([]uint64, size)
	}
	window, band := c.window[:size], c.band[:size]
	width := hi - lo // lo ≤ latency ≤ hi  ⇔  latency-lo ≤ hi-lo (unsigned)
	var inBand uint64
	backend = backend[:len(lat)]
	for i, l := range lat {
		b := backend[i]
		window[b]++
		if l-lo <= width {
			band[b]++
			inBand++
		}
	}
	var out []Count
	for b := range window {
		if window[b] != 0 {
			out = append(out, Count{Backend: uint32(b), Blocking: band[b], Window: window[b]})
		}
		window[b], band[b] = 0, 0
	}
	return inBand, out
}
