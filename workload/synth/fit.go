package synth

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// ReqType is one request type: the backends it queries and the mean batch
// size of each. A request of this type queries every one of its backends,
// 1 + Poisson(BatchMean−1) keys each.
type ReqType struct {
	// Backends are backend indices, ascending.
	Backends []int
	// BatchMean[i] is the mean batch size at Backends[i] (≥ 1).
	BatchMean []float64
	// Weight is the type's probability.
	Weight float64
}

// Mix is a fitted set of request types.
type Mix struct {
	Types []ReqType
	// Targets are the profile's targets with Batch filled in.
	Targets []Target
	// Clamped lists backends whose derived batch size fell below 1 and was
	// raised to 1 (MatchQuery only).
	Clamped []int
	// Sweeps is how many fitting sweeps ran.
	Sweeps int
}

// Stats are the structure statistics of a mix (or a trace) per backend.
type Stats struct {
	PairShare  float64 // share of (request, backend) pairs
	Touching   float64 // fraction of requests that query the backend
	Fanout     float64 // mean distinct backends in requests querying it
	Batch      float64 // mean queries to it in requests querying it
	QueryShare float64 // share of all queries
}

// FitParams tune the fit.
type FitParams struct {
	// Types is the number of request types (hundreds, like OneRF).
	Types int
	// QueriesPerRequest is the mean queries per request in MatchQuery mode.
	QueriesPerRequest float64
	// Seed makes the type structure reproducible.
	Seed uint64
}

const (
	// minTypesPerBackend guarantees every backend, however rare, appears in
	// types of smaller and of larger fanout than its target.
	minTypesPerBackend = 8
	// popularitySkew is the Zipf exponent of the type popularity prior.
	popularitySkew = 0.8
	// batchSpread is the σ of the log-normal spread of per-type batch means
	// around the backend's mean.
	batchSpread  = 0.6
	fitTolerance = 1e-6
	maxSweeps    = 20000
)

// Fit builds a mix of request types whose expected pair shares and fanouts
// equal the targets, and whose batch sizes equal Target.Batch (MatchBatch)
// or follow from QueryShare and p.QueriesPerRequest (MatchQuery).
//
// Types are drawn from the seed: for every backend, a number of types
// proportional to its pair share (at least minTypesPerBackend) that contain it,
// with fanouts spread around its target and companions drawn in proportion
// to their pair shares. Type weights start from a Zipf prior over a random
// order (skewed popularity) and are fitted by cyclic I-projections: for each
// backend in turn, scale the types containing it to meet its pair share
// exactly, then tilt them exponentially in fanout to meet its mean fanout
// exactly, until every constraint holds within 1e-7 (relative).
func Fit(targets []Target, m Match, p FitParams) (*Mix, error) {
	n := len(targets)
	if n == 0 {
		return nil, errors.New("no backends")
	}
	if p.Types < 1 {
		return nil, fmt.Errorf("types: %d must be at least 1", p.Types)
	}
	for i, t := range targets {
		if !(t.PairShare > 0) || !(t.Fanout >= 1) || t.Fanout > float64(n) {
			return nil, fmt.Errorf("backend %d: pair share %v and fanout %v are not achievable with %d backends", i+1, t.PairShare, t.Fanout, n)
		}
		if m == MatchBatch && !(t.Batch >= 1) {
			return nil, fmt.Errorf("backend %d: batch size %v is below 1", i+1, t.Batch)
		}
	}
	if m == MatchQuery && !(p.QueriesPerRequest >= 1) {
		return nil, fmt.Errorf("queries per request %v must be at least 1", p.QueriesPerRequest)
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x7479706573)) // "types"
	types := drawTypes(targets, p.Types, rng)
	sweeps, err := fitWeights(types, targets)
	if err != nil {
		return nil, err
	}
	mix := &Mix{Types: types, Targets: append([]Target(nil), targets...), Sweeps: sweeps}
	if m == MatchQuery {
		ef := 0.0
		for _, t := range types {
			ef += t.Weight * float64(len(t.Backends))
		}
		c := p.QueriesPerRequest / ef
		for i := range mix.Targets {
			t := &mix.Targets[i]
			t.Batch = c * t.QueryShare / t.PairShare
			if t.Batch < 1 {
				t.Batch = 1
				mix.Clamped = append(mix.Clamped, i)
			}
		}
	}
	setBatchMeans(types, mix.Targets, rng)
	return mix, nil
}

// drawTypes draws the type structures (weights still unset).
func drawTypes(targets []Target, total int, rng *rand.Rand) []ReqType {
	n := len(targets)
	offsets := []float64{-1, 1, -2, 2, -3, 3, 0, 4}
	var types []ReqType
	for b, t := range targets {
		count := max(minTypesPerBackend, int(math.Round(float64(total)*t.PairShare)))
		for i := 0; i < count; i++ {
			var off float64
			if i < len(offsets) {
				off = offsets[i]
			} else {
				off = 2.5 * rng.NormFloat64()
			}
			f := int(math.Round(t.Fanout + off))
			f = min(max(f, 1), n)
			members := []int{b}
			for len(members) < f {
				members = append(members, pickOther(targets, members, rng))
			}
			sort.Ints(members)
			types = append(types, ReqType{Backends: members})
		}
	}
	return types
}

// pickOther draws a backend not in taken, with probability proportional to
// its pair share.
func pickOther(targets []Target, taken []int, rng *rand.Rand) int {
	sum := 0.0
	for j, t := range targets {
		if !contains(taken, j) {
			sum += t.PairShare
		}
	}
	u := rng.Float64() * sum
	last := -1
	for j, t := range targets {
		if contains(taken, j) {
			continue
		}
		last = j
		u -= t.PairShare
		if u < 0 {
			return j
		}
	}
	return last
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// fitWeights sets the type weights (summing to 1) so that the pair shares
// and fanouts meet the targets, and returns the number of sweeps it took.
func fitWeights(types []ReqType, targets []Target) (int, error) {
	n := len(targets)
	// Zipf prior over a fixed pseudo-random order: the order comes from the
	// type index through a multiplicative hash, so it is deterministic.
	order := make([]int, len(types))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return hashing.Mix64(uint64(order[a])) < hashing.Mix64(uint64(order[b])) })
	for rank, i := range order {
		types[i].Weight = 1 / math.Pow(float64(rank+1), popularitySkew)
	}
	of := make([][]int, n)
	for i, t := range types {
		for _, b := range t.Backends {
			of[b] = append(of[b], i)
		}
	}
	for b := range of {
		if len(of[b]) == 0 {
			return 0, fmt.Errorf("backend %d is in no request type", b+1)
		}
	}
	fan := func(i int) float64 { return float64(len(types[i].Backends)) }
	total := func() float64 {
		s := 0.0
		for i := range types {
			s += types[i].Weight * fan(i)
		}
		return s
	}
	for sweep := 1; sweep <= maxSweeps; sweep++ {
		for b, t := range targets {
			// Pair share: scale the types containing b by c so that
			// c·P / (T + (c−1)·M) = r, with P = Σ w, M = Σ w·f over them.
			var pb, mb float64
			for _, i := range of[b] {
				pb += types[i].Weight
				mb += types[i].Weight * fan(i)
			}
			tt := total()
			r := t.PairShare
			c := r * (tt - mb) / (pb - r*mb)
			if !(c > 0) || math.IsInf(c, 0) {
				c = r * tt / pb // the approximate step when the exact one is undefined
			}
			for _, i := range of[b] {
				types[i].Weight *= c
			}
			if t.FreeFanout {
				continue
			}
			// Fanout: tilt the types containing b by exp(θ·(f − F)).
			theta := solveTilt(types, of[b], t.Fanout)
			if theta != 0 {
				for _, i := range of[b] {
					types[i].Weight *= math.Exp(theta * (fan(i) - t.Fanout))
				}
			}
		}
		// Normalize and measure.
		s := 0.0
		for i := range types {
			s += types[i].Weight
		}
		for i := range types {
			types[i].Weight /= s
		}
		worst, _ := fitError(types, targets)
		if worst < fitTolerance {
			return sweep, nil
		}
	}
	worst, what := fitError(types, targets)
	return maxSweeps, fmt.Errorf("could not fit the request mix to %d backends: %s is off by %.2g%% after %d sweeps", n, what, worst*100, maxSweeps)
}

// solveTilt returns θ with Σ w·d·exp(θd) = 0 over the given types, d = f − F,
// or 0 when no tilt can reach F (all fanouts on one side).
func solveTilt(types []ReqType, idx []int, target float64) float64 {
	g := func(theta float64) (v, dv float64) {
		for _, i := range idx {
			d := float64(len(types[i].Backends)) - target
			e := types[i].Weight * math.Exp(theta*d)
			v += d * e
			dv += d * d * e
		}
		return v, dv
	}
	v0, _ := g(0)
	if v0 == 0 {
		return 0
	}
	// Bracket the root: g is increasing in θ.
	lo, hi := -1.0, 1.0
	if v0 > 0 {
		hi = 0
		for k := 0; ; k++ {
			if v, _ := g(lo); v < 0 {
				break
			}
			if k == 40 {
				return 0
			}
			hi, lo = lo, lo*2
		}
	} else {
		lo = 0
		for k := 0; ; k++ {
			if v, _ := g(hi); v > 0 {
				break
			}
			if k == 40 {
				return 0
			}
			lo, hi = hi, hi*2
		}
	}
	theta := (lo + hi) / 2
	for k := 0; k < 100; k++ {
		v, dv := g(theta)
		if v > 0 {
			hi = theta
		} else {
			lo = theta
		}
		next := theta - v/dv
		if !(next > lo && next < hi) {
			next = (lo + hi) / 2
		}
		if math.Abs(next-theta) < 1e-14 {
			return next
		}
		theta = next
	}
	return theta
}

// fitError returns the worst relative error of pair share or fanout and
// which one it is.
func fitError(types []ReqType, targets []Target) (float64, string) {
	st := predict(types, len(targets))
	worst, what := 0.0, ""
	for b, t := range targets {
		if e := math.Abs(st[b].PairShare-t.PairShare) / t.PairShare; e > worst || math.IsNaN(e) {
			worst, what = e, fmt.Sprintf("backend %d's pair share (%.4g, want %.4g)", b+1, st[b].PairShare, t.PairShare)
		}
		if t.FreeFanout {
			continue
		}
		if e := math.Abs(st[b].Fanout-t.Fanout) / t.Fanout; e > worst || math.IsNaN(e) {
			worst, what = e, fmt.Sprintf("backend %d's fanout (%.4g, want %.4g)", b+1, st[b].Fanout, t.Fanout)
		}
	}
	return worst, what
}

// predict returns the expected per-backend statistics of a weighted set of
// types (BatchMean may be unset: batch and query shares are then zero).
func predict(types []ReqType, n int) []Stats {
	st := make([]Stats, n)
	var pairs, queries float64
	for _, t := range types {
		f := float64(len(t.Backends))
		for j, b := range t.Backends {
			st[b].Touching += t.Weight
			st[b].Fanout += t.Weight * f
			if t.BatchMean != nil {
				st[b].Batch += t.Weight * t.BatchMean[j]
				queries += t.Weight * t.BatchMean[j]
			}
		}
		pairs += t.Weight * f
	}
	for b := range st {
		s := &st[b]
		if s.Touching > 0 {
			s.PairShare = s.Touching / pairs
			s.Fanout /= s.Touching
			s.QueryShare = s.Batch / queries
			s.Batch /= s.Touching
		}
		if queries == 0 {
			s.QueryShare = 0
		}
	}
	return st
}

// Predict returns the expected per-backend statistics of the mix.
func (m *Mix) Predict() []Stats { return predict(m.Types, len(m.Targets)) }

// MeanFanout is the expected number of distinct backends per request.
func (m *Mix) MeanFanout() float64 {
	s := 0.0
	for _, t := range m.Types {
		s += t.Weight * float64(len(t.Backends))
	}
	return s
}

// QueriesPerRequest is the expected number of queries per request.
func (m *Mix) QueriesPerRequest() float64 {
	s := 0.0
	for _, t := range m.Types {
		for _, v := range t.BatchMean {
			s += t.Weight * v
		}
	}
	return s
}

// setBatchMeans gives every (type, backend) a batch mean 1 + (β−1)·u/ū, u
// log-normal per type, normalized so that the weighted mean over the types
// containing the backend is exactly the backend's β.
func setBatchMeans(types []ReqType, targets []Target, rng *rand.Rand) {
	n := len(targets)
	num := make([]float64, n)
	den := make([]float64, n)
	for i := range types {
		t := &types[i]
		t.BatchMean = make([]float64, len(t.Backends))
		for j, b := range t.Backends {
			// Clamped at ±2σ so no type has an extreme batch (the paper
			// saw up to 300 queries in a request).
			z := max(-2, min(2, rng.NormFloat64()))
			u := math.Exp(batchSpread * z)
			t.BatchMean[j] = u
			num[b] += t.Weight * u
			den[b] += t.Weight
		}
	}
	for i := range types {
		t := &types[i]
		for j, b := range t.Backends {
			ubar := num[b] / den[b]
			t.BatchMean[j] = 1 + (targets[b].Batch-1)*t.BatchMean[j]/ubar
		}
	}
}
