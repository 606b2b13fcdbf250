package feasibility

import "math"

// Class is a scenario's class by its hardest phase: how close the oracle's
// allocation comes to a backend's capacity (docs/workloads.md, "Scenario
// zoo").
type Class string

// Scenario classes.
const (
	// ClassMargin: in every phase the oracle keeps every backend at or
	// under MarginUtilization of its capacity.
	ClassMargin Class = "margin"
	// ClassTight: every phase is feasible (the oracle at or under
	// FeasibleUtilization), some only beyond MarginUtilization.
	ClassTight Class = "tight"
	// ClassInfeasible: in some phase no allocation keeps every backend
	// under its capacity.
	ClassInfeasible Class = "infeasible"
)

// The class thresholds, on the oracle's worst load/capacity of a phase.
const (
	// MarginUtilization is the most a margin scenario asks of a backend:
	// 15% of headroom left for what the load model leaves out — memcached's
	// overhead, queueing near capacity, the time a policy needs to move
	// space, and the noise of a phase's measured rates.
	MarginUtilization = 0.85
	// FeasibleUtilization is capacity itself: above it, no cache policy
	// can keep the backend's queue from growing.
	FeasibleUtilization = 1.0
)

// Classify returns the scenario's class and its worst utilization: the
// highest min-max worst load/capacity over every phase (+Inf when some
// capacity is zero). Every phase counts, including those before the SLO's
// warm-up: a warm-up that hides an infeasible phase does not make it
// feasible.
func Classify(results []Result) (Class, float64) {
	worst := 0.0
	for _, r := range results {
		worst = math.Max(worst, r.MinMaxWorst)
	}
	switch {
	case worst <= MarginUtilization:
		return ClassMargin, worst
	case worst <= FeasibleUtilization:
		return ClassTight, worst
	}
	return ClassInfeasible, worst
}

// UncarriedRates lists the phases whose request_rate factor the trace does
// not seem to carry: a phase of at least 5 s with a factor f ≠ 1 whose
// measured query rate, against the phases at factor 1, is closer to 1× than
// to f× (a scenario checked against a trace synthesized without its
// --rate-schedule). Phases need their measured Rates (Measure).
func UncarriedRates(phases []Phase) []Phase {
	total := func(ph Phase) float64 {
		s := 0.0
		for _, r := range ph.Rates {
			s += r.Cacheable + r.Uncacheable
		}
		return s
	}
	var base, secs float64
	for _, ph := range phases {
		if ph.RateFactor == 1 && ph.Rates != nil {
			d := (ph.End - ph.Start).Seconds()
			base += total(ph) * d
			secs += d
		}
	}
	if secs == 0 || base == 0 {
		return nil
	}
	base /= secs
	var out []Phase
	for _, ph := range phases {
		if ph.RateFactor == 1 || ph.Rates == nil || (ph.End-ph.Start).Seconds() < 5 {
			continue
		}
		m := total(ph) / base
		if math.Abs(m-1) < math.Abs(m-ph.RateFactor) {
			out = append(out, ph)
		}
	}
	return out
}
