package feasibility

// The transient model (docs/algorithms.md, "The oracle"): the latency
// model's queues (latency.go) stepped through time, bucket by bucket, with
// what outlives a bucket carried to the next:
//
//   - a partition holds the values of the misses answered into it: it
//     grows at its backend's answered miss rate (a throttled backend's
//     slowly), up to what its limit holds; a shrink evicts at once (as the
//     controller's resize does);
//   - a backend whose queries arrive faster than it admits them builds a
//     queue, which drains only when the load falls below its capacity; a
//     query waiting longer than the app server's backend timeout is given
//     up (purged, and its value not filled).
//
// In each bucket a request's call to a backend waits for the queue in front
// of it, then as the steady-state model says; the share of the bucket's
// requests slower than the SLO gives each point of the SLO series (the
// requests of its window) a probability of violating the SLO.

import (
	"math"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/slo"
)

// fluid is what outlives a bucket: per backend, the MiB of values one app
// server's partition holds, and the queries queued at the backend.
type fluid struct {
	held, queue []float64
}

func (f fluid) clone() fluid {
	return fluid{held: append([]float64(nil), f.held...), queue: append([]float64(nil), f.queue...)}
}

// mrStep is the miss-ratio resolution of the transient model's states.
const mrStep = 1e-3

// saturation is the utilization at which an overloaded backend's queue is
// modelled (with the backlog's wait on top).
const saturation = 0.97

// dynamics steps the model through a run.
type dynamics struct {
	lm     *LatencyModel
	w      *Workload
	phases []Phase
	// per bucket: its phase, and the request rate the model uses
	phaseOf []int
	rate    []float64
	dt      float64 // a bucket, seconds
	apps    float64
	sloMs   float64
	params  slo.Params
	// timeoutS is each backend's call timeout (the app server's backend
	// timeout), seconds.
	timeoutS []float64
	// points: the SLO series' counted points, as bucket ranges [lo, hi)
	points [][2]int
	pointT []time.Duration
	// pointsEnding[t] lists the points whose window ends at bucket t (hi =
	// t+1)
	pointsEnding [][]int
	// scratch
	st   []*bstate
	wait []float64
	rows [][]float64
}

func newDynamics(lm *LatencyModel, w *Workload, phases []Phase, params slo.Params, backendTimeout time.Duration) *dynamics {
	d := &dynamics{lm: lm, w: w, phases: phases, dt: w.Bucket.Seconds(), apps: float64(w.AppServers), params: params,
		sloMs: float64(params.SLO) / float64(time.Millisecond)}
	nb := w.Buckets()
	d.phaseOf = make([]int, nb)
	p := 0
	for t := range nb {
		at := time.Duration(t) * w.Bucket
		for p+1 < len(phases) && phases[p+1].Start <= at {
			p++
		}
		d.phaseOf[t] = p
	}
	// A phase's request rate: its own where it differs from the whole
	// trace's by more than Poisson noise (3σ), else the whole trace's (so
	// that short phases share states).
	prate := make([]float64, len(phases))
	for i, ph := range phases {
		prate[i] = w.Rate
		req, _, _, ok := w.Rates(ph.Start, ph.End)
		secs := (min(ph.End, w.Covered) - ph.Start).Seconds()
		if ok && secs > 0 && w.Timed {
			want := w.Rate * secs
			if math.Abs(req*secs-want) > 3*math.Sqrt(want) {
				prate[i] = req
			}
		}
	}
	d.rate = make([]float64, nb)
	for t := range nb {
		d.rate[t] = prate[d.phaseOf[t]]
	}
	d.timeoutS = make([]float64, len(w.Backends))
	for b := range d.timeoutS {
		d.timeoutS[b] = backendTimeout.Seconds()
	}
	// The series: a point at every step ≤ the run's length, after the
	// warm-up, over the buckets its window covers.
	d.pointsEnding = make([][]int, nb)
	if params.Step > 0 && w.Timed {
		for k := 1; time.Duration(k)*params.Step <= w.Duration; k++ {
			T := time.Duration(k) * params.Step
			if T <= params.Warmup {
				continue
			}
			lo := max(0, int((T-params.Window)/w.Bucket))
			hi := min(nb, int((T+w.Bucket-1)/w.Bucket))
			if hi <= lo {
				continue
			}
			d.pointsEnding[hi-1] = append(d.pointsEnding[hi-1], len(d.points))
			d.points = append(d.points, [2]int{lo, hi})
			d.pointT = append(d.pointT, T)
		}
	}
	nbk := len(w.Backends)
	d.st, d.wait, d.rows = make([]*bstate, nbk), make([]float64, nbk), make([][]float64, nbk)
	return d
}

// start is the state at the run's beginning: empty caches, no queues.
func (d *dynamics) start() fluid {
	n := len(d.w.Backends)
	return fluid{held: make([]float64, n), queue: make([]float64, n)}
}

// step advances f through bucket t with alloc (MiB per backend on each app
// server, -1: no cache) and returns the share of the bucket's requests
// slower than the SLO.
func (d *dynamics) step(f fluid, t int, alloc []int) float64 {
	ph := d.phases[d.phaseOf[t]]
	rate := d.rate[t]
	for b, name := range d.w.Backends {
		lim, ok := ph.Limits[name]
		if !ok {
			lim = d.lm.initial[b]
		}
		mr := 1.0
		if alloc[b] >= 0 {
			hold := d.lm.fan.Slabs[b].HeldMB(float64(alloc[b]))
			f.held[b] = math.Min(f.held[b], hold)
			mr = missAt(d.w.MissCurveAt(b, t), f.held[b])
		} else {
			f.held[b] = 0
		}
		mr = math.Round(mr/mrStep) * mrStep
		st := d.lm.stateMR(b, lim, rate, mr)
		in := st.lam * d.dt
		q0 := f.queue[b]
		var served, q1 float64
		if st.mu > 0 && !math.IsInf(st.mu, 1) {
			served = math.Min(q0+in, st.mu*d.dt)
			q1 = math.Min(q0+in-served, st.mu*d.timeoutS[b])
		} else if st.mu > 0 {
			served = q0 + in
		}
		f.queue[b] = q1
		if alloc[b] >= 0 {
			hold := d.lm.fan.Slabs[b].HeldMB(float64(alloc[b]))
			f.held[b] = math.Min(hold, f.held[b]+served*st.fill*d.lm.fan.MeanSize[b]/MiB/d.apps)
		}
		d.wait[b] = 0
		d.st[b] = st
		switch {
		case st.mu <= 0:
			d.wait[b] = math.Inf(1)
		case q0 > 0 || q1 > 0 || st.q.Overloaded:
			d.wait[b] = (q0 + q1) / 2 / st.mu * 1000
			if st.rho > saturation {
				d.st[b] = d.lm.stateMR(b, lim, rate*saturation/st.rho, mr)
			}
		}
	}
	return 1 - d.requestCDFWaiting()
}

// requestCDFWaiting is P(a request is done within the SLO) with the
// backends in d.st, each call waiting d.wait (ms) before its queue.
func (d *dynamics) requestCDFWaiting() float64 {
	for b, s := range d.st {
		d.rows[b] = s.rowShifted(d.sloMs, d.wait[b])
	}
	F := 0.0
	for _, sh := range d.lm.fan.Shapes {
		p := sh.Weight
		for b, j := range sh.Pair {
			if j >= 0 {
				p *= d.rows[b][j]
			}
		}
		F += p
	}
	return F
}

// rowShifted is, per pair of the backend, P(its call is done within x ms)
// when its queries first wait w ms (a call without misses does not wait);
// x − w is read on the latency grid.
func (s *bstate) rowShifted(x, w float64) []float64 {
	y := x - w
	i := int32(-1)
	if y >= gridMinMs {
		i = int32(math.Round(math.Log(y/gridMinMs) / math.Log(gridStep)))
		i = min(i, gridLen-1)
	}
	if r := s.shifted[i]; r != nil {
		return r
	}
	if i >= 0 {
		s.q.batchCDF(gridMs[i]-s.lookup-s.rpc, s.call)
	} else {
		for k := range s.call {
			s.call[k] = 0
		}
	}
	s.call[0] = 1
	if x < s.lookup {
		s.call[0] = 0
	}
	r := make([]float64, len(s.pairs))
	for p, pr := range s.pairs {
		F := 0.0
		for h, wt := range s.binom[p] {
			F += wt * s.call[h+pr.Uncacheable]
		}
		r[p] = F
	}
	s.shifted[i] = r
	return r
}

// violationProb is the probability that a point of the SLO series whose
// window holds n requests, a share slow of them slower than the SLO,
// violates it: its P99 is above the SLO when more than 1% are. The share
// is an expectation; the count of a window is Binomial, and the model is
// not exact, so the step from 0 to 1 is smoothed over their spread.
func violationProb(slow, n float64) float64 {
	if n <= 0 {
		return 0
	}
	sigma := math.Max(math.Sqrt(0.0099/n), 0.0015)
	return 0.5 * math.Erfc(-(slow-0.01)/(sigma*math.Sqrt2))
}

// score is a schedule's predicted cost over a span: the expected number of
// SLO-series points that violate the SLO, and the expected requests slower
// than it.
type score struct {
	violations, slow float64
}

// less: fewer expected violations (by more than 0.05 of a point), then
// fewer slow requests (by at least one, and 0.1%). A candidate that is not
// less than the one in hand does not replace it: the search keeps what it
// has (the current allocation first) unless moving helps.
func (a score) less(b score) bool {
	if math.Abs(a.violations-b.violations) > 0.05 {
		return a.violations < b.violations
	}
	return a.slow < b.slow-math.Max(1, 1e-3*b.slow)
}

// pointsScore scores the points whose window ends in [from, to), from the
// slow shares of every bucket.
func (d *dynamics) pointsScore(slowShare []float64, from, to int) score {
	var sc score
	for t := from; t < to; t++ {
		for _, k := range d.pointsEnding[t] {
			lo, hi := d.points[k][0], d.points[k][1]
			var n, s float64
			for u := lo; u < hi; u++ {
				n += d.w.Requests[u]
				s += d.w.Requests[u] * slowShare[u]
			}
			if n > 0 {
				sc.violations += violationProb(s/n, n)
			}
		}
		sc.slow += d.w.Requests[t] * slowShare[t]
	}
	return sc
}

// Violations is a schedule's predicted SLO violations.
type Violations struct {
	// Points is the series' counted points; Pct the expected share of them
	// violating the SLO, percent.
	Points int
	Pct    float64
}

// predict runs a whole schedule (the allocation per bucket) and returns its
// slow shares per bucket and its predicted violations.
func (d *dynamics) predict(allocAt func(t int) []int) ([]float64, Violations) {
	f := d.start()
	slow := make([]float64, d.w.Buckets())
	for t := range slow {
		slow[t] = d.step(f, t, allocAt(t))
	}
	sc := d.pointsScore(slow, 0, len(slow))
	v := Violations{Points: len(d.points)}
	if v.Points > 0 {
		v.Pct = 100 * sc.violations / float64(v.Points)
	}
	return slow, v
}

// SeriesPoint is the model's prediction of one point of the SLO series.
type SeriesPoint struct {
	// T is the point's time (its window ends there).
	T time.Duration `json:"t"`
	// P99Ms is the predicted P99 of the window's requests (+Inf: beyond
	// the latency grid); Slow the expected share of them slower than the
	// SLO; ViolationProb the probability that the point violates it.
	P99Ms         float64 `json:"p99_ms"`
	Slow          float64 `json:"slow"`
	ViolationProb float64 `json:"violation_prob"`
	// Rho is the highest utilization of a backend (arrivals over what it
	// admits) in the window's buckets.
	Rho float64 `json:"rho"`
}

// series runs a whole schedule and predicts every counted point of the SLO
// series: its window's P99 (the quantile of the mixture of its buckets'
// request latency distributions), slow share and violation probability.
func (d *dynamics) series(allocAt func(t int) []int) []SeriesPoint {
	type snap struct {
		st   []*bstate
		wait []float64
		rho  float64
	}
	f := d.start()
	nb := d.w.Buckets()
	snaps := make([]snap, nb)
	slow := make([]float64, nb)
	for t := range nb {
		slow[t] = d.step(f, t, allocAt(t))
		sn := snap{st: append([]*bstate(nil), d.st...), wait: append([]float64(nil), d.wait...)}
		for _, s := range sn.st {
			if s.mu > 0 {
				sn.rho = math.Max(sn.rho, s.lam/s.mu)
			}
		}
		snaps[t] = sn
	}
	cdf := func(t int, x float64) float64 {
		for b, s := range snaps[t].st {
			d.rows[b] = s.rowShifted(x, snaps[t].wait[b])
		}
		F := 0.0
		for _, sh := range d.lm.fan.Shapes {
			p := sh.Weight
			for b, j := range sh.Pair {
				if j >= 0 {
					p *= d.rows[b][j]
				}
			}
			F += p
		}
		return F
	}
	out := make([]SeriesPoint, 0, len(d.points))
	for k, pt := range d.points {
		lo, hi := pt[0], pt[1]
		var n, s, rho float64
		for u := lo; u < hi; u++ {
			n += d.w.Requests[u]
			s += d.w.Requests[u] * slow[u]
			rho = math.Max(rho, snaps[u].rho)
		}
		sp := SeriesPoint{T: d.pointT[k], Rho: rho}
		if n > 0 {
			sp.Slow = s / n
			sp.ViolationProb = violationProb(sp.Slow, n)
			sp.P99Ms, _ = quantile(func(i int) float64 {
				F := 0.0
				for u := lo; u < hi; u++ {
					F += d.w.Requests[u] * cdf(u, gridMs[i])
				}
				return F / n
			}, 0.99, gridLen/2)
		}
		out = append(out, sp)
	}
	return out
}
