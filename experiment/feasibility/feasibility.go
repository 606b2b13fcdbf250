// Package feasibility says, for every phase of a capacity scenario, whether
// any allocation of the cache budget can keep every backend under its
// capacity, and which allocation comes closest: the oracle (docs/algorithms.md,
// "Feasibility and the oracle"). It is pure: the inputs are each backend's
// query rates within each phase and its miss-ratio curve over the whole
// trace (trace.go, workload/mrc), its capacity over time (from the
// topology's limits and the scenario's changes; the scenario's request-rate
// changes split phases too) and the budget. Classify (classify.go) puts a
// scenario in a class by its hardest phase.
//
// The load model: a backend receives its cacheable queries' misses and all
// its uncacheable queries, load = λc·mr(s) + λu queries/s for a cache of s
// bytes; its capacity is its token-bucket rate, or, without one, workers /
// (extra latency + expected hiccup) — an upper bound, since the data path's
// own time is not counted. With N app servers each gets 1/N of the requests
// and its own budget; an LRU of s bytes over 1/N of an independent stream
// behaves about like one of N·s bytes over all of it, so mr(s) is read at N·s.
package feasibility

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// MiB is the allocation granularity (memcached limits are whole MB).
const MiB = 1 << 20

// Backend is one backend's demand.
type Backend struct {
	Name string
	// CacheableRate and UncacheableRate are queries/s (per app server).
	CacheableRate, UncacheableRate float64
	// MissRatio[m] is the miss ratio of an m-MiB cache (m = 0 … budget).
	MissRatio []float64
}

// Load is the backend's queries/s with an m-MiB cache.
func (b Backend) Load(m int) float64 {
	if m >= len(b.MissRatio) {
		m = len(b.MissRatio) - 1
	}
	return b.CacheableRate*b.MissRatio[m] + b.UncacheableRate
}

// Capacity is the queries/s a backend with limits l can serve: its rate
// limit, or workers over the injected service time; +Inf when neither
// bounds it.
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

// Phase is an interval with constant capacities and request rate.
type Phase struct {
	Start, End time.Duration
	// Capacity per backend name, queries/s.
	Capacity map[string]float64
	// RateFactor is the scenario's request-rate multiplier in the phase
	// (request_rate events; 1 without). The trace carries it: the loads
	// come from the query rates measured within the phase.
	RateFactor float64
	// Rates are each backend's query rates within the phase (Measure); a
	// backend without an entry is analysed at its whole-trace rates.
	Rates map[string]Rates
}

// Rates are a backend's query rates per app server, queries/s.
type Rates struct {
	Cacheable, Uncacheable float64
}

// InPhase is the backend with the phase's own query rates, when the phase
// has them.
func (b Backend) InPhase(ph Phase) Backend {
	if r, ok := ph.Rates[b.Name]; ok {
		b.CacheableRate, b.UncacheableRate = r.Cacheable, r.Uncacheable
	}
	return b
}

// Phases applies the scenario's changes to the initial limits and returns
// the intervals between them (changes at the same time make one boundary);
// the request-rate schedule's times (scenario.RateSchedule) are
// boundaries too, and set each phase's RateFactor.
func Phases(initial map[string]config.Limits, changes []scenario.Change, duration time.Duration, rates ...scenario.RateChange) []Phase {
	limits := map[string]config.Limits{}
	for n, l := range initial {
		limits[n] = l
	}
	snapshot := func() map[string]float64 {
		out := map[string]float64{}
		for n, l := range limits {
			out[n] = Capacity(l)
		}
		return out
	}
	var out []Phase
	factor := 1.0
	cur := Phase{Start: 0, Capacity: snapshot(), RateFactor: factor}
	for i, j := 0, 0; i < len(changes) || j < len(rates); {
		at := time.Duration(math.MaxInt64)
		if i < len(changes) {
			at = changes[i].At
		}
		if j < len(rates) && rates[j].At < at {
			at = rates[j].At
		}
		for ; i < len(changes) && changes[i].At == at; i++ {
			l := limits[changes[i].Backend]
			for _, fv := range changes[i].Fields {
				set(&l, fv.Field, fv.Value)
			}
			limits[changes[i].Backend] = l
		}
		for ; j < len(rates) && rates[j].At == at; j++ {
			factor = rates[j].Factor
		}
		if at >= duration {
			break
		}
		if at > cur.Start {
			cur.End = at
			out = append(out, cur)
		}
		cur = Phase{Start: at, Capacity: snapshot(), RateFactor: factor}
	}
	cur.End = duration
	return append(out, cur)
}

func set(l *config.Limits, field string, v float64) {
	switch field {
	case config.FieldWorkers:
		l.Workers = int(v)
	case config.FieldRate:
		l.Rate = v
	case config.FieldExtraLatencyMs:
		l.ExtraLatencyMs = v
	case config.FieldHiccupProb:
		l.HiccupProb = v
	case config.FieldHiccupMs:
		l.HiccupMs = v
	case config.FieldQueueLimit:
		l.QueueLimit = int(v)
	}
}

// Result is the analysis of one phase.
type Result struct {
	Phase
	// Need is the smallest cache (MiB, at least the floor) that keeps each
	// backend at or under its capacity; -1 when no cache within the budget
	// does.
	Need map[string]int `json:"need_mb"`
	// NeedTotal sums Need (meaningless when one is -1).
	NeedTotal int `json:"need_total_mb"`
	// Feasible: some allocation keeps every backend at or under capacity.
	Feasible bool `json:"feasible"`
	// Oracle is the allocation (MiB) minimizing the worst load/capacity, and
	// OracleWorst that worst ratio (≤ 1 when feasible).
	Oracle      map[string]int `json:"oracle_mb"`
	OracleWorst float64        `json:"oracle_worst_utilization"`
	// Even is the worst load/capacity with the configured allocation.
	Even float64 `json:"configured_worst_utilization"`
}

// Analyze evaluates every phase for a budget (MiB) with a floor per
// partition, against the configured allocation. Each phase is analysed at
// its own query rates when it has them (Phase.Rates), with the backends'
// miss-ratio curves.
func Analyze(all []Backend, phases []Phase, budget, floor int, configured map[string]int) ([]Result, error) {
	if floor*len(all) > budget {
		return nil, fmt.Errorf("budget %d MB is below %d partitions × floor %d MB", budget, len(all), floor)
	}
	for _, b := range all {
		if len(b.MissRatio) < budget+1 {
			return nil, fmt.Errorf("backend %s: miss ratios for %d sizes, need %d", b.Name, len(b.MissRatio), budget+1)
		}
	}
	out := make([]Result, 0, len(phases))
	for _, ph := range phases {
		r := Result{Phase: ph, Need: map[string]int{}}
		backends := inPhase(all, ph)
		for _, b := range backends {
			n := need(b, ph.Capacity[b.Name], budget, floor)
			r.Need[b.Name] = n
			if n < 0 {
				r.NeedTotal = -1
			} else if r.NeedTotal >= 0 {
				r.NeedTotal += n
			}
		}
		r.Feasible = r.NeedTotal >= 0 && r.NeedTotal <= budget
		r.Oracle, r.OracleWorst = oracle(backends, ph.Capacity, budget, floor)
		for _, b := range backends {
			r.Even = math.Max(r.Even, util(b, configured[b.Name], ph.Capacity[b.Name]))
		}
		out = append(out, r)
	}
	return out, nil
}

// inPhase is the backends at the phase's rates.
func inPhase(all []Backend, ph Phase) []Backend {
	out := make([]Backend, len(all))
	for i, b := range all {
		out[i] = b.InPhase(ph)
	}
	return out
}

func util(b Backend, m int, capacity float64) float64 {
	if math.IsInf(capacity, 1) {
		return 0
	}
	if capacity <= 0 {
		return math.Inf(1)
	}
	return b.Load(m) / capacity
}

// need is the smallest allocation (≥ floor) with load ≤ capacity·ρ… at ρ = 1.
func need(b Backend, capacity float64, budget, floor int) int {
	return needAt(b, capacity, 1, budget, floor)
}

func needAt(b Backend, capacity, rho float64, budget, floor int) int {
	// Loads fall as the cache grows: the first m with load ≤ ρ·capacity.
	m := sort.Search(budget-floor+1, func(i int) bool { return b.Load(floor+i) <= rho*capacity })
	if m > budget-floor {
		return -1
	}
	return floor + m
}

// oracle minimizes the worst load/capacity over allocations summing to the
// budget (each ≥ floor): the smallest ρ whose needs fit (bisection), then
// the rest of the budget, MB by MB, to the backend with the highest ratio.
func oracle(backends []Backend, capacity map[string]float64, budget, floor int) (map[string]int, float64) {
	fits := func(rho float64) (map[string]int, bool) {
		alloc := map[string]int{}
		total := 0
		for _, b := range backends {
			n := needAt(b, capacity[b.Name], rho, budget, floor)
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
			u := util(b, alloc[b.Name], capacity[b.Name])
			if u > bestU || (u == bestU && b.Name < best) {
				best, bestU = b.Name, u
			}
		}
		alloc[best]++
	}
	worst := 0.0
	for _, b := range backends {
		worst = math.Max(worst, util(b, alloc[b.Name], capacity[b.Name]))
	}
	return alloc, worst
}
