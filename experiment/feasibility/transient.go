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
	"encoding/binary"
	"math"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/model"
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
	// phaseBucket is each phase's first bucket.
	phaseBucket []int
	// persist, when a phase's index, has the later phases' buckets step
	// with its limits and request rate (what a reactive view expects).
	persist int
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
	st, sat []*bstate
	wait    [][]float64 // per sub-bucket, per backend
	rows    [][]float64
	key     []byte
	// tail is the last step's share of requests slower than
	// tailShare × the SLO.
	tail float64
}

func newDynamics(lm *LatencyModel, w *Workload, phases []Phase, params slo.Params, backendTimeout time.Duration) *dynamics {
	d := &dynamics{lm: lm, w: w, phases: phases, dt: w.Bucket.Seconds(), apps: float64(w.AppServers), params: params,
		sloMs: float64(params.SLO) / float64(time.Millisecond), persist: -1}
	for _, ph := range phases {
		d.phaseBucket = append(d.phaseBucket, min(w.BucketOf(ph.Start), w.Buckets()-1))
	}
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
	d.st, d.sat, d.rows = make([]*bstate, nbk), make([]*bstate, nbk), make([][]float64, nbk)
	d.wait = make([][]float64, w.Sub)
	for j := range d.wait {
		d.wait[j] = make([]float64, nbk)
	}
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
	if d.persist >= 0 && d.persist < d.phaseOf[t] {
		// a reactive view: the phase in hand goes on
		ph, rate = d.phases[d.persist], d.rate[d.phaseBucket[d.persist]]
	}
	sub := d.w.Sub
	dts := d.dt / float64(sub)
	for b, name := range d.w.Backends {
		lim, ok := ph.Limits[name]
		if !ok {
			lim = d.lm.initial[b]
		}
		mr := 1.0
		hold := 0.0
		if alloc[b] >= 0 {
			hold = d.lm.heldMB(b, alloc[b])
			f.held[b] = math.Min(f.held[b], hold)
			mr = model.MissAt(d.w.MissCurveAt(b, t), f.held[b])
		} else {
			f.held[b] = 0
		}
		mr = math.Round(mr/mrStep) * mrStep
		st := d.lm.stateMR(b, lim, rate, mr)
		d.st[b] = st
		sat := st
		if st.rho > saturation {
			sat = d.lm.stateMR(b, lim, rate*saturation/st.rho, mr)
		}
		d.sat[b] = sat
		// The queue steps through the sub-buckets with their own misses: a
		// burst of them (a scan of new keys) builds a backlog an average
		// over the bucket would hide. The arrivals' random spread is the
		// queue model's already: only what a sub-bucket has beyond twice
		// it, away from the bucket's mean, moves the backlog.
		mean := st.lam * dts
		if d.w.Timed {
			total, span := 0.0, 0.0
			for j := range sub {
				x := t*sub + j
				if sp := d.w.subSpan(x); sp > 0 {
					cm, _ := d.w.SubMisses(b, x, f.held[b])
					total += cm + d.w.subU[x][b]
					span += sp
				}
			}
			if span > 0 {
				mean = total / span * dts
			}
		}
		sigma := 2 * math.Sqrt(mean*math.Max(st.dispersion, 1))
		in := mean
		served := 0.0
		for j := range sub {
			x := t*sub + j
			if d.w.Timed {
				span := d.w.subSpan(x)
				if span <= 0 {
					in = 0
				} else {
					cm, _ := d.w.SubMisses(b, x, f.held[b])
					got := (cm + d.w.subU[x][b]) * dts / span
					dev := got - mean
					in = mean + math.Copysign(math.Max(0, math.Abs(dev)-sigma), dev)
				}
			}
			q0 := f.queue[b]
			out, q1 := model.QueueStep(q0, in, st.mu, dts, d.timeoutS[b])
			f.queue[b] = q1
			served += out
			w := 0.0
			switch {
			case st.mu <= 0:
				w = math.Inf(1)
			case q0 > 0 || q1 > 0 || st.q.Overloaded:
				w = (q0 + q1) / 2 / st.mu * 1000
			}
			d.wait[j][b] = w
			if alloc[b] >= 0 && f.held[b] < hold {
				f.held[b] = math.Min(hold, f.held[b]+model.FillMiB(out*st.fill, d.lm.fan.MeanSize[b], d.apps))
			}
		}
	}
	d.tail = 1 - d.requestCDFMix(t, d.sloMs*tailShare)
	return 1 - d.requestCDFMix(t, d.sloMs)
}

// tailShare is the latency, as a share of the SLO, at which the search's
// last tie-break counts requests (the tail of a calm phase: hiccups and
// short queues, which the latency model's P99 follows).
const tailShare = 1.0 / 3

// requestCDFMix is P(a request of bucket t is done within x ms): the
// sub-buckets' own, by their requests.
func (d *dynamics) requestCDFMix(t int, x float64) float64 {
	sub := d.w.Sub
	var F, n float64
	for j := range sub {
		w := 1.0
		if d.w.Timed {
			w = d.w.subReq[t*sub+j]
		}
		if w <= 0 {
			continue
		}
		F += w * d.requestCDFWaiting(d.wait[j], x)
		n += w
	}
	if n == 0 {
		return d.requestCDFWaiting(d.wait[0], x)
	}
	return F / n
}

// requestCDFWaiting is P(a request is done within x ms) with the backends
// in d.st (d.sat where it waits behind a backlog), each call waiting
// wait[b] ms before its queue.
func (d *dynamics) requestCDFWaiting(wait []float64, x float64) float64 {
	d.key = d.key[:0]
	for b, s := range d.st {
		if wait[b] > 0 {
			s = d.sat[b]
		}
		var id int
		d.rows[b], id = s.rowShifted(x, wait[b], d.lm)
		d.key = binary.AppendUvarint(d.key, uint64(id))
	}
	if F, ok := d.lm.cdfMemo[string(d.key)]; ok {
		return F
	}
	F := d.shapesCDF()
	d.lm.cdfMemo[string(d.key)] = F
	return F
}

// shapesCDF is P(a request is done) from each backend's row in d.rows.
func (d *dynamics) shapesCDF() float64 { return d.lm.shapes.cdf(d.rows) }

// rowShifted is, per pair of the backend, P(its call is done within x ms)
// when its queries first wait w ms (a call without misses does not wait);
// x − w is read on the latency grid.
func (s *bstate) rowShifted(x, w float64, lm *LatencyModel) ([]float64, int) {
	y := x - w
	i := int32(-1)
	if y >= gridMinMs {
		i = int32(math.Round(math.Log(y/gridMinMs) / math.Log(gridStep)))
		i = min(i, gridLen-1)
	}
	key := int64(i)<<32 | int64(math.Float64bits(x)>>32)
	if r, ok := s.shifted[key]; ok {
		return r.row, r.id
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
	r := s.pairRow()
	lm.rowIDs++
	s.shifted[key] = shiftedRow{r, lm.rowIDs}
	return r, lm.rowIDs
}

// shiftedRow is a row of rowShifted and its number.
type shiftedRow struct {
	row []float64
	id  int
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
// SLO-series points that violate the SLO, the expected requests slower than
// it, and those slower than tailShare × the SLO.
type score struct {
	violations, slow, tail float64
}

// less: fewer expected violations (by more than 0.05 of a point), then
// fewer slow requests (by at least one, and 0.1%), then a shorter tail (by
// at least one request and 5%). A candidate that is not less than the one
// in hand does not replace it: the search keeps what it has (the current
// allocation first) unless moving helps.
func (a score) less(b score) bool {
	if math.Abs(a.violations-b.violations) > 0.05 {
		return a.violations < b.violations
	}
	if math.Abs(a.slow-b.slow) >= math.Max(1, 1e-3*b.slow) {
		return a.slow < b.slow
	}
	return a.tail < b.tail-math.Max(1, 0.05*b.tail)
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
		st, sat []*bstate
		wait    [][]float64
		rho     float64
	}
	f := d.start()
	nb := d.w.Buckets()
	snaps := make([]snap, nb)
	slow := make([]float64, nb)
	for t := range nb {
		slow[t] = d.step(f, t, allocAt(t))
		sn := snap{st: append([]*bstate(nil), d.st...), sat: append([]*bstate(nil), d.sat...)}
		for _, w := range d.wait {
			sn.wait = append(sn.wait, append([]float64(nil), w...))
		}
		for _, s := range sn.st {
			if s.mu > 0 {
				sn.rho = math.Max(sn.rho, s.lam/s.mu)
			}
		}
		snaps[t] = sn
	}
	cdf := func(t int, x float64) float64 {
		var F, n float64
		for j, wait := range snaps[t].wait {
			wt := 1.0
			if d.w.Timed {
				wt = d.w.subReq[t*d.w.Sub+j]
			}
			if wt <= 0 && j > 0 {
				continue
			}
			for b, s := range snaps[t].st {
				if wait[b] > 0 {
					s = snaps[t].sat[b]
				}
				d.rows[b], _ = s.rowShifted(x, wait[b], d.lm)
			}
			F += math.Max(wt, 1e-12) * d.shapesCDF()
			n += math.Max(wt, 1e-12)
		}
		return F / n
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
