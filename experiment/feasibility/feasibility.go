// Package feasibility is the oracle's home (docs/algorithms.md,
// "Feasibility and the oracle"): for a topology, a trace and a capacity
// scenario, whether any allocation of the cache budget can keep every
// backend under its capacity in every phase (the load model: Result,
// Classify), and the allocation schedule that the latency model predicts
// best (Oracle, oracle.go) — with foresight (the future's phases known in
// advance) or reacting at each phase's start.
//
// Everything here is pure but the one pass over the trace (Scan,
// workload.go): each backend's query rates and its miss-ratio curves over
// time, split over the app servers as the replayer splits the requests.
//
// The load model: a backend receives its cacheable queries' misses and all
// its uncacheable queries, load = λc·mr(s) + λu queries/s with a cache of s
// bytes on every app server (λ: every app server's queries; mr: one app
// server's cache, over its share of the requests); its capacity is its
// token-bucket rate, or, without one, workers / (extra latency + expected
// hiccup) — an upper bound, since the data path's own time is not counted.
// App servers are taken to be alike: each has the analysed one's budget.
package feasibility

import (
	"fmt"
	"math"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/model"
)

// Phase is an interval with constant capacities and request rate.
type Phase struct {
	Start, End time.Duration
	// Capacity per backend name, queries/s.
	Capacity map[string]float64
	// Limits are every backend's limits in the phase.
	Limits map[string]config.Limits `json:"-"`
	// RateFactor is the scenario's request-rate multiplier in the phase
	// (request_rate events; 1 without). The trace carries it: the loads
	// come from the query rates measured within the phase.
	RateFactor float64
	// Rates are each backend's query rates within the phase, and Curves
	// its miss-ratio curve then (Workload.SetRates); a backend without an
	// entry is analysed at its whole-trace rates and curve.
	Rates  map[string]Rates     `json:"-"`
	Curves map[string][]float64 `json:"-"`
}

// Rates are a backend's query rates, every app server, queries/s.
type Rates struct {
	Cacheable, Uncacheable float64
}

// Demand is backend b with the phase's own query rates and miss-ratio
// curve, when the phase has them.
func (ph Phase) Demand(b model.Backend) model.Backend {
	if r, ok := ph.Rates[b.Name]; ok {
		b.CacheableRate, b.UncacheableRate = r.Cacheable, r.Uncacheable
	}
	if c, ok := ph.Curves[b.Name]; ok {
		b.MissRatio = c
	}
	return b
}

// Phases applies the scenario's changes to the initial limits
// (capacity.Patch: every limit field, as the backends and the simulator
// apply them) and returns the intervals between them (changes at the same
// time make one boundary); the request-rate schedule's times
// (scenario.RateSchedule) are boundaries too, and set each phase's
// RateFactor.
func Phases(initial map[string]config.Limits, changes []scenario.Change, duration time.Duration, rates ...scenario.RateChange) []Phase {
	limits := map[string]config.Limits{}
	for n, l := range initial {
		limits[n] = l
	}
	phase := func(start time.Duration, factor float64) Phase {
		ph := Phase{Start: start, Capacity: map[string]float64{}, Limits: map[string]config.Limits{}, RateFactor: factor}
		for n, l := range limits {
			ph.Capacity[n] = model.Capacity(l)
			ph.Limits[n] = l
		}
		return ph
	}
	var out []Phase
	factor := 1.0
	cur := phase(0, factor)
	for i, j := 0, 0; i < len(changes) || j < len(rates); {
		at := time.Duration(math.MaxInt64)
		if i < len(changes) {
			at = changes[i].At
		}
		if j < len(rates) && rates[j].At < at {
			at = rates[j].At
		}
		for ; i < len(changes) && changes[i].At == at; i++ {
			var p capacity.Patch
			for _, fv := range changes[i].Fields {
				p.Set(fv.Field, fv.Value)
			}
			limits[changes[i].Backend] = p.Apply(limits[changes[i].Backend])
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
		cur = phase(at, factor)
	}
	cur.End = duration
	return append(out, cur)
}

// SetRates sets every phase's Rates and Curves from the workload: each
// backend's query rates within the phase (every app server), over the part
// of it the trace covers, and its miss-ratio curve then (MissCurve); a
// phase the trace does not reach keeps none (it is analysed at the whole
// trace's).
func (w *Workload) SetRates(phases []Phase) {
	for i := range phases {
		ph := &phases[i]
		_, c, u, ok := w.Rates(ph.Start, ph.End)
		ph.Rates, ph.Curves = nil, nil
		if !ok || !w.Timed {
			continue
		}
		ph.Rates, ph.Curves = map[string]Rates{}, map[string][]float64{}
		for b, n := range w.Backends {
			ph.Rates[n] = Rates{Cacheable: c[b], Uncacheable: u[b]}
			ph.Curves[n] = w.MissCurve(b, ph.Start, ph.End)
		}
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
	// MinMax is the allocation (MiB) minimizing the worst load/capacity
	// (model.MinMax; the latency model's search starts from it: Refine),
	// and MinMaxWorst that worst ratio (≤ 1 when feasible).
	MinMax      map[string]int `json:"oracle_mb"`
	MinMaxWorst float64        `json:"oracle_worst_utilization"`
	// Even is the worst load/capacity with the configured allocation.
	Even float64 `json:"configured_worst_utilization"`
}

// analysePhases evaluates every phase for a budget (MiB) with a floor per
// partition, against the configured allocation. Each phase is analysed at
// its own query rates and miss-ratio curves when it has them (Phase.Rates,
// Phase.Curves), else at the backends'.
func analysePhases(all []model.Backend, phases []Phase, budget, floor int, configured map[string]int) ([]Result, error) {
	if floor*len(all) > budget {
		return nil, fmt.Errorf("budget %d MB is below %d partitions × floor %d MB", budget, len(all), floor)
	}
	out := make([]Result, 0, len(phases))
	for _, ph := range phases {
		r := Result{Phase: ph, Need: map[string]int{}}
		backends := inPhase(all, ph)
		for _, b := range backends {
			if len(b.MissRatio) < budget+1 {
				return nil, fmt.Errorf("backend %s: miss ratios for %d sizes, need %d", b.Name, len(b.MissRatio), budget+1)
			}
		}
		for _, b := range backends {
			n := model.NeedAt(b, ph.Capacity[b.Name], 1, budget, floor)
			r.Need[b.Name] = n
			if n < 0 {
				r.NeedTotal = -1
			} else if r.NeedTotal >= 0 {
				r.NeedTotal += n
			}
		}
		r.Feasible = r.NeedTotal >= 0 && r.NeedTotal <= budget
		r.MinMax, r.MinMaxWorst = model.MinMax(backends, ph.Capacity, budget, floor)
		for _, b := range backends {
			r.Even = math.Max(r.Even, model.Util(b, configured[b.Name], ph.Capacity[b.Name]))
		}
		out = append(out, r)
	}
	return out, nil
}

// inPhase is the backends at the phase's rates.
func inPhase(all []model.Backend, ph Phase) []model.Backend {
	out := make([]model.Backend, len(all))
	for i, b := range all {
		out[i] = ph.Demand(b)
	}
	return out
}
