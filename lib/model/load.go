// Package model is the backend-load model (docs/algorithms.md, "The model"):
// what each backend is sent for an allocation of the app servers' caches,
// against what it can answer, and how a partition fills and a backlog
// drains in time. The oracle (experiment/feasibility) feeds it the truth —
// the trace's query rates and miss-ratio curves, the scenario's capacities —
// and searches allocations on it (MinMax, NeedAt). An online feed (the
// planner policy, 2026-12) did not earn its place: docs/notebook/
// 2026-12-02-the-planner.md.
//
// The load model: a backend receives its cacheable queries' misses and all
// its uncacheable queries, load = λc·mr(m) + λu queries/s with an m-MiB
// cache on every app server (λ: every app server's queries; mr: one app
// server's cache over its share of the requests). App servers are taken to
// be alike: each has the same budget and the same allocation.
package model

import (
	"math"
	"sort"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// MiB is the allocation granularity (memcached limits are whole MB).
const MiB = 1 << 20

// Backend is one backend's demand.
type Backend struct {
	Name string
	// CacheableRate and UncacheableRate are queries/s, every app server.
	CacheableRate, UncacheableRate float64
	// MissRatio[m] is the miss ratio of one app server's m-MiB cache (m =
	// 0 … the largest size known).
	MissRatio []float64
}

// Load is the backend's queries/s with an m-MiB cache on every app server
// (beyond the curve's end, its last point).
func (b Backend) Load(m int) float64 {
	if m >= len(b.MissRatio) {
		m = len(b.MissRatio) - 1
	}
	return b.CacheableRate*b.MissRatio[m] + b.UncacheableRate
}

// Capacity is the queries/s a backend with limits l can serve: its rate
// limit, or workers over the injected service time; +Inf when neither
// bounds it. It is an upper bound: the data path's own time is not counted.
func Capacity(l config.Limits) float64 {
	if l.Rate > 0 {
		if l.ExtraLatencyMs > 0 || l.HiccupProb > 0 {
			return math.Min(l.Rate, serviceCapacity(l))
		}
		return l.Rate
	}
	return serviceCapacity(l)
}

func serviceCapacity(l config.Limits) float64 {
	ms := l.ExtraLatencyMs + l.HiccupProb*l.HiccupMs
	if ms <= 0 {
		return math.Inf(1)
	}
	return float64(l.Workers) * 1000 / ms
}

// Util is the backend's load over its capacity with m MiB on every app
// server: 0 at an unbounded capacity, +Inf at none.
func Util(b Backend, m int, capacity float64) float64 {
	if math.IsInf(capacity, 1) {
		return 0
	}
	if capacity <= 0 {
		return math.Inf(1)
	}
	return b.Load(m) / capacity
}

// NeedAt is the smallest allocation (MiB, at least floor, at most budget)
// whose load is at most ρ·capacity; -1 when even the budget is not enough.
func NeedAt(b Backend, capacity, rho float64, budget, floor int) int {
	// Loads fall as the cache grows: the first m with load ≤ ρ·capacity.
	m := sort.Search(budget-floor+1, func(i int) bool { return b.Load(floor+i) <= rho*capacity })
	if m > budget-floor {
		return -1
	}
	return floor + m
}

// MinMax is the allocation (MiB per backend, each at least floor, summing
// to budget) that minimizes the worst load/capacity, and that worst ratio:
// the smallest ρ whose needs fit (bisection), then the rest of the budget,
// MiB by MiB, to the backend with the highest ratio. When even the budget
// leaves some backend above any ρ, every backend gets the floor and the
// rest goes the same way.
func MinMax(backends []Backend, capacity map[string]float64, budget, floor int) (map[string]int, float64) {
	fits := func(rho float64) (map[string]int, bool) {
		alloc := map[string]int{}
		total := 0
		for _, b := range backends {
			n := NeedAt(b, capacity[b.Name], rho, budget, floor)
			if n < 0 {
				return nil, false
			}
			alloc[b.Name] = n
			total += n
		}
		return alloc, total <= budget
	}
	lo, hi := 0.0, 1.0
	for {
		if _, ok := fits(hi); ok || hi > 1e9 {
			break
		}
		lo, hi = hi, hi*2
	}
	for range 60 {
		mid := (lo + hi) / 2
		if _, ok := fits(mid); ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	alloc, ok := fits(hi)
	if !ok { // even the whole budget leaves some backend unbounded: floors only
		alloc = map[string]int{}
		for _, b := range backends {
			alloc[b.Name] = floor
		}
	}
	used := 0
	for _, m := range alloc {
		used += m
	}
	for ; used < budget; used++ {
		best, bestU := "", -1.0
		for _, b := range backends {
			u := Util(b, alloc[b.Name], capacity[b.Name])
			if u > bestU || (u == bestU && b.Name < best) {
				best, bestU = b.Name, u
			}
		}
		alloc[best]++
	}
	return alloc, Worst(backends, alloc, capacity)
}

// Worst is the highest load/capacity of the backends with allocation alloc.
func Worst(backends []Backend, alloc map[string]int, capacity map[string]float64) float64 {
	worst := 0.0
	for _, b := range backends {
		worst = math.Max(worst, Util(b, alloc[b.Name], capacity[b.Name]))
	}
	return worst
}
