package feasibility

// The latency model (docs/algorithms.md, "Feasibility and the oracle"):
// the request P99 an allocation leads to, predicted from the backends'
// capacity model (backends/capacity) and the measured data-path times the
// simulator charges too (lib/costmodel), so that the oracle can pick, per
// phase, the allocation with the lowest predicted P99 rather than the
// lowest worst utilization.
//
// One backend replica is a gate (the token bucket, or the workers when
// they bind first) in front of the query's service (data path + extra
// latency + exponential cost + hiccup + stall extensions). A request's
// misses to a backend arrive together, as one batch, and batches arrive as
// a Poisson process. The gate's unfinished work V seen by a batch is that of
// an M^X/G/1 queue: P(V > 0) = ρ and a Cramér–Lundberg exponential tail,
// P(V > v) ≈ C·e^(−θv) (exact for M/M/1; for the workers, the tail of a
// single server c times as fast, scaled by Erlang C / ρ, exact for M/M/c).
// The j-th query of a batch waits max(0, V + (j − slack)·g) (g: the gate's
// time per query; slack: the bucket's burst or the number of workers), then
// holds its worker for its service time. A call ends with its slowest
// query, plus the cache lookup and the RPC; a request with its slowest call.
// Calls of different backends are independent, so P(request ≤ x) is the
// product of its calls' CDFs, averaged over the trace's request shapes.

import (
	"math"
	"sort"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/model"
)

// The latency grid: gridLen points from gridMinMs, each gridStep times the
// last (1%), to about 220 s. Quantiles interpolate between points.
const (
	gridMinMs = 0.01
	gridStep  = 1.01
	gridLen   = 1700
	// tailAtoms discretize the gate's waiting time beyond its atom at 0:
	// equal steps in v over ln(1e7)/θ (probability mass down to 1e-7).
	tailAtoms = 128
	tailSpan  = 16.11809565095832 // ln(1e7)
)

var gridMs = func() []float64 {
	g := make([]float64, gridLen)
	for i := range g {
		g[i] = gridMinMs * math.Pow(gridStep, float64(i))
	}
	return g
}()

// service is the time a query holds its worker, ms: a mixture of shifts
// (the fixed part, with or without a hiccup and a stall), each plus an
// exponential of mean cost (none when cost is 0).
type service struct {
	shift []float64 // ascending
	w     []float64
	cost  float64
	mean  float64
}

func newService(l config.Limits, dataMs, stallProb float64) service {
	base := dataMs + l.ExtraLatencyMs
	p := l.HiccupProb
	if l.HiccupMs <= 0 {
		p = 0
	}
	q := stallProb
	if l.StallMs <= 0 {
		q = 0
	}
	type comp struct{ s, w float64 }
	cs := []comp{{base, (1 - p) * (1 - q)}, {base + l.HiccupMs, p * (1 - q)}, {base + l.StallMs, (1 - p) * q}, {base + l.HiccupMs + l.StallMs, p * q}}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].s < cs[j].s })
	s := service{cost: math.Max(l.CostMs, 0)}
	for _, c := range cs {
		if c.w <= 0 {
			continue
		}
		if n := len(s.shift); n > 0 && s.shift[n-1] == c.s {
			s.w[n-1] += c.w
			continue
		}
		s.shift = append(s.shift, c.s)
		s.w = append(s.w, c.w)
	}
	for i := range s.shift {
		s.mean += s.w[i] * s.shift[i]
	}
	s.mean += s.cost
	return s
}

// cdf is P(S ≤ t).
func (s *service) cdf(t float64) float64 {
	F := 0.0
	if s.cost == 0 {
		for i, sh := range s.shift {
			if t < sh {
				break
			}
			F += s.w[i]
		}
		return F
	}
	for i, sh := range s.shift {
		u := t - sh
		if u <= 0 {
			break
		}
		if u > 40*s.cost {
			F += s.w[i]
			continue
		}
		F += s.w[i] * -math.Expm1(-u/s.cost)
	}
	return F
}

// mgf is E[e^(tS)] (t per ms); +Inf beyond 1/cost.
func (s *service) mgf(t float64) float64 {
	m := 0.0
	for i, sh := range s.shift {
		m += s.w[i] * math.Exp(t*sh)
	}
	if s.cost > 0 {
		if t*s.cost >= 1 {
			return math.Inf(1)
		}
		m /= 1 - t*s.cost
	}
	return m
}

// Queue is one backend replica's latency model under a load: the
// distribution of the gate's unfinished work seen by an arriving batch,
// and how a batch's queries wait behind it and each other.
type Queue struct {
	// Rho is the gate's utilization; Overloaded when it is 1 or more.
	Rho        float64
	Overloaded bool
	// Capacity is the queries/s the gate admits at most (its bucket rate,
	// or its workers over the mean service time, stalls included).
	Capacity float64
	svc      service
	// gate: time per query (ms) and the queries admitted without waiting
	// from an idle gate; workers when the workers bind before the bucket.
	g, slack float64
	workers  bool
	// atoms of the waiting time: v (ms) and probability, the first at 0.
	v, mass []float64
}

// NewQueue models one replica with limits l whose queries take dataMs of
// data path, receiving batches of queries at batchRate per second with
// batch[k] the probability of k queries (batch[0] is ignored).
func NewQueue(l config.Limits, dataMs float64, batch []float64, batchRate float64) *Queue {
	var ek, tot float64
	for k := 1; k < len(batch); k++ {
		ek += float64(k) * batch[k]
		tot += batch[k]
	}
	if tot > 0 {
		ek /= tot
	}
	lam := batchRate / 1000 // batches per ms
	lamQ := lam * ek        // queries per ms
	workers := float64(max(l.Workers, 1))
	// A stall extends the query that caused it and every query in service
	// when it begins: about (1 + λ·E[S]) stalls per query's service.
	s0 := newService(l, dataMs, 0)
	stallProb := 0.0
	if l.StallProb > 0 && l.StallMs > 0 {
		stallProb = math.Min(1, l.StallProb*(1+lamQ*s0.mean))
	}
	q := &Queue{svc: newService(l, dataMs, stallProb)}
	stall := 0.0 // gate time blocked per query, in expectation
	if l.StallProb > 0 && l.StallMs > 0 {
		stall = l.StallProb * l.StallMs
	}
	tokenBound := l.Rate > 0 && l.Rate/1000 <= workers/q.svc.mean
	var mgfG func(t float64) float64
	var eg float64
	if tokenBound {
		q.g = 1000 / l.Rate
		q.slack = capacity.Burst(l.Rate)
		eg = q.g + stall
		mgfG = func(t float64) float64 {
			return math.Exp(t*q.g) * (1 - l.StallProb + l.StallProb*math.Exp(t*l.StallMs))
		}
	} else {
		q.g = q.svc.mean / workers
		q.slack = workers
		q.workers = true
		eg = q.g + stall
		mgfG = func(t float64) float64 {
			m := q.svc.mgf(t / workers)
			if stall > 0 {
				m *= 1 - l.StallProb + l.StallProb*math.Exp(t*l.StallMs)
			}
			return m
		}
	}
	q.Rho = lamQ * eg
	q.Capacity = 1000 / eg
	if q.Rho >= 1 {
		q.Overloaded = true
		return q
	}
	if lam <= 0 || q.Rho <= 0 {
		q.v, q.mass = []float64{0}, []float64{1}
		return q
	}
	mgfX := func(t float64) float64 {
		mg := mgfG(t)
		m, pk := 0.0, 1.0
		for k := 1; k < len(batch); k++ {
			pk *= mg
			if batch[k] > 0 {
				m += batch[k] / tot * pk
			}
		}
		return m
	}
	f := func(t float64) float64 { return lam*(mgfX(t)-1) - t }
	tmax := math.Inf(1)
	if !tokenBound && q.svc.cost > 0 {
		tmax = workers / q.svc.cost
	}
	lo, hi := 0.0, 1/eg
	if hi >= tmax {
		hi = tmax / 2
	}
	for i := 0; f(hi) <= 0 && i < 400; i++ {
		lo = hi
		if math.IsInf(tmax, 1) {
			hi *= 2
		} else {
			hi = (hi + tmax) / 2
		}
	}
	for range 200 {
		mid := (lo + hi) / 2
		if mid <= lo || mid >= hi {
			break
		}
		if f(mid) <= 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	theta := (lo + hi) / 2
	h := theta * 1e-6
	deriv := (mgfX(theta+h) - mgfX(theta-h)) / (2 * h)
	c := (1 - q.Rho) / (lam*deriv - 1)
	if !(c > 0) || math.IsInf(c, 0) {
		c = q.Rho
	}
	// P(V > v) ≈ min(ρ, C·e^(−θv)): V is 0, or v0 + Exp(θ).
	p0, v0 := q.Rho, 0.0
	if c >= q.Rho {
		v0 = math.Log(c/q.Rho) / theta
	} else {
		p0 = c
	}
	if !tokenBound { // M/M/c: P(W > 0) is Erlang C, not ρ
		a := lamQ * q.svc.mean
		p0 *= math.Min(1, erlangC(workers, a)/(a/workers))
	}
	q.v = append(q.v, 0)
	q.mass = append(q.mass, 1-p0)
	step := tailSpan / theta / tailAtoms
	prev := 1.0
	for i := range tailAtoms {
		next := math.Exp(-theta * step * float64(i+1))
		q.v = append(q.v, v0+(float64(i)+0.5)*step)
		q.mass = append(q.mass, p0*(prev-next))
		prev = next
	}
	return q
}

// erlangC is the probability that an arrival waits in an M/M/c queue
// offered a erlangs.
func erlangC(c, a float64) float64 {
	if a >= c {
		return 1
	}
	b := 1.0
	for n := 1; n <= int(c); n++ {
		b = a * b / (float64(n) + a*b)
		if b < 1e-300 { // far more servers than load: nobody waits
			return 0
		}
	}
	return b / (1 - a/c*(1-b))
}

// batchCDF sets out[k] = P(a batch of k queries is done within y ms of its
// arrival at the gate), k = 1 … len(out)−1 (out[0] = 1): every query j
// waits max(0, V + (j − slack)·g), then is served.
func (q *Queue) batchCDF(y float64, out []float64) {
	out[0] = 1
	for k := 1; k < len(out); k++ {
		out[k] = 0
	}
	if q.Overloaded {
		return
	}
	for a, v := range q.v {
		m := q.mass[a]
		if m <= 0 {
			continue
		}
		h := 1.0
		for k := 1; k < len(out); k++ {
			var d float64
			switch {
			case !q.workers: // the bucket's burst admits the first queries at once
				d = math.Max(0, v+(float64(k)-q.slack)*q.g)
			case v > 0: // every worker busy: one frees every g
				d = v + float64(k-1)*q.g
			default: // idle workers take the first queries
				d = math.Max(0, float64(k)-q.slack) * q.g
			}
			h *= q.svc.cdf(y - d)
			if h <= 0 {
				break
			}
			out[k] += m * h
		}
	}
}

// CDF is P(a batch of k queries is done within y ms).
func (q *Queue) CDF(k int, y float64) float64 {
	out := make([]float64, k+1)
	q.batchCDF(y, out)
	return out[k]
}

// Quantile is the y with CDF(k, y) = p (on the model's latency grid,
// interpolated); +Inf when overloaded or beyond the grid.
func (q *Queue) Quantile(k int, p float64) float64 {
	v, _ := quantile(func(i int) float64 { return q.CDF(k, gridMs[i]) }, p, gridLen/2)
	return v
}

// quantile finds where a nondecreasing function F of the grid index
// crosses p, starting from index hint, and interpolates in log latency. It
// also returns the first index at or above p (the next search's hint).
func quantile(F func(int) float64, p float64, hint int) (float64, int) {
	hint = min(max(hint, 0), gridLen-1)
	// Invariant: F(lo) < p ≤ F(hi), with F(-1) taken as 0.
	lo, hi, fLo := -1, -1, 0.0
	if v := F(hint); v >= p {
		hi = hint
		for d := 1; hint-d >= 0; d *= 2 {
			if v := F(hint - d); v < p {
				lo, fLo = hint-d, v
				break
			}
			hi = hint - d
		}
	} else {
		lo, fLo = hint, v
		for d := 1; hi < 0; d *= 2 {
			i := min(hint+d, gridLen-1)
			if v := F(i); v >= p {
				hi = i
			} else if i == gridLen-1 {
				return math.Inf(1), gridLen - 1
			} else {
				lo, fLo = i, v
			}
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if v := F(mid); v >= p {
			hi = mid
		} else {
			lo, fLo = mid, v
		}
	}
	if lo < 0 {
		return gridMs[hi], hi
	}
	frac := 1.0
	if fHi := F(hi); fHi > fLo {
		frac = (p - fLo) / (fHi - fLo)
	}
	return gridMs[lo] * math.Pow(gridStep, frac), hi
}

// LatencyModel predicts the request latency distribution of a trace's
// requests for an allocation of the cache, phase by phase.
type LatencyModel struct {
	fan     *Fanout
	shapes  *shapeTable     // fan.Shapes, for requestCDF and shapesCDF
	curves  []model.Backend // by fan.Backends index
	cal     costmodel.Calibration
	dataMs  []float64 // a query's data path, per backend
	reps    []int
	initial []config.Limits
	kmax    []int // the most queries a request sends the backend
	states  map[stateKey]*bstate
	// held[b][m] caches heldMB; work, when set, measured it.
	held [][]float64
	work *Workload
	// rowIDs numbers the rows rowShifted makes; cdfMemo caches the request
	// CDF of a combination of them (requestCDFWaiting).
	rowIDs  int
	cdfMemo map[string]float64
	// scratch
	batch []float64
	rows  [][]float64
}

type stateKey struct {
	b    int
	lim  config.Limits
	rate float64
	mr   float64
}

// bstate is one backend in one phase with one cache size.
type bstate struct {
	q   *Queue // one replica's (replicas share the load evenly)
	rho float64
	mr  float64
	// lam is the queries/s reaching the backend (every replica), mu what
	// it can admit; fill the share of them that are cacheable misses;
	// dispersion the variance of their count over its mean (batches).
	lam, mu, fill, dispersion float64
	// shifted caches rowShifted.
	shifted map[int64]shiftedRow
	call    []float64 // scratch: P(call ≤ x | k misses)
	binom   [][]float64
	pairs   []Pair
	lookup  float64
	rpc     float64
	rows    map[int32][]float64
}

// NewLatencyModel builds the model from the backends' miss-ratio curves
// (FromTrace), the trace's fan-out (MeasureFanout), the topology's backends
// (type, replicas, compute options, initial limits) and the simulator's
// calibration (zero: costmodel.DefaultCalibration). A backend the trace
// queries but the topology does not name is served without limits.
func NewLatencyModel(curves []model.Backend, fan *Fanout, topo []config.Backend, cal costmodel.Calibration) *LatencyModel {
	if cal.Service == nil {
		cal = costmodel.DefaultCalibration()
	}
	lm := &LatencyModel{fan: fan, shapes: newShapeTable(fan), cal: cal, states: map[stateKey]*bstate{}, cdfMemo: map[string]float64{}}
	lm.held = make([][]float64, len(fan.Backends))
	byName := map[string]model.Backend{}
	for _, c := range curves {
		byName[c.Name] = c
	}
	tb := map[string]config.Backend{}
	for _, b := range topo {
		tb[b.Name] = b
	}
	for i, name := range fan.Backends {
		c, ok := byName[name]
		if !ok {
			c = model.Backend{Name: name, MissRatio: []float64{1}}
		}
		lm.curves = append(lm.curves, c)
		b, ok := tb[name]
		lim := config.Limits{Workers: 1 << 20}
		typ := config.TypeKV
		reps := 1
		extraUs := 0.0
		if ok {
			lim, typ, reps = b.Limits, b.Type, max(len(b.Replicas), 1)
			if typ == config.TypeCompute {
				n := 96 // the simulator's default matrix (sim.newBackend)
				if b.Compute != nil && b.Compute.MatrixSize > 0 {
					n = b.Compute.MatrixSize
				}
				extraUs = cal.ComputePerCellUs * float64(n*n*n)
			}
		}
		size := fan.MeanSize[i]
		lm.dataMs = append(lm.dataMs, ms(cal.Service[typ].Of(int64(size)))+extraUs/1000)
		lm.reps = append(lm.reps, reps)
		lm.initial = append(lm.initial, lim)
		k := 0
		for _, p := range fan.Pairs[i] {
			k = max(k, p.Cacheable+p.Uncacheable)
		}
		lm.kmax = append(lm.kmax, k)
	}
	return lm
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// state is backend b with limits lim, rate requests/s (every app server),
// the miss-ratio curve of its cacheable queries (nil: the whole trace's)
// and m MiB of cache (each app server's; -1: no cache).
func (lm *LatencyModel) state(b int, lim config.Limits, rate float64, curve []float64, m int) *bstate {
	if curve == nil {
		curve = lm.curves[b].MissRatio
	}
	mr := 1.0
	if m >= 0 {
		// memcached's m MiB hold fewer MiB of values (slab chunks and pages)
		mr = model.MissAt(curve, lm.heldMB(b, m))
	}
	return lm.stateMR(b, lim, rate, mr)
}

// heldMB is what m whole MiB of backend b's partition are worth in MiB of
// an LRU (Workload.HeldMB when the model has the workload, else
// Slabs.HeldMB), cached.
func (lm *LatencyModel) heldMB(b, m int) float64 {
	h := lm.held[b]
	if m >= len(h) {
		n := len(h)
		h = append(h, make([]float64, m+1-n)...)
		for i := n; i <= m; i++ {
			h[i] = -1
		}
		lm.held[b] = h
	}
	if h[m] < 0 {
		if lm.work != nil {
			h[m] = lm.work.HeldMB(b, float64(m))
		} else {
			h[m] = lm.fan.Slabs[b].HeldMB(float64(m))
		}
	}
	return h[m]
}

// stateMR is backend b with limits lim, rate requests/s (every app server)
// and a miss ratio mr of its cacheable queries.
func (lm *LatencyModel) stateMR(b int, lim config.Limits, rate, mr float64) *bstate {
	key := stateKey{b: b, lim: lim, rate: rate, mr: mr}
	if s := lm.states[key]; s != nil {
		return s
	}
	pairs := lm.fan.Pairs[b]
	s := &bstate{mr: mr, pairs: pairs, rows: map[int32][]float64{}, shifted: map[int64]shiftedRow{}, call: make([]float64, lm.kmax[b]+1)}
	// The batch of misses a request sends: Binomial(cacheable, mr) +
	// uncacheable, over the requests that query the backend.
	if cap(lm.batch) < lm.kmax[b]+1 {
		lm.batch = make([]float64, lm.kmax[b]+1)
	}
	batch := lm.batch[:lm.kmax[b]+1]
	clear(batch)
	var hits float64
	s.binom = make([][]float64, len(pairs))
	for i, p := range pairs {
		pmf := binomial(p.Cacheable, mr)
		s.binom[i] = pmf
		for h, pr := range pmf {
			batch[h+p.Uncacheable] += p.Weight * pr
			hits += p.Weight * pr * float64(p.Cacheable-h)
		}
	}
	called := 0.0 // share of requests whose call reaches the backend
	meanK := 0.0
	for k := 1; k < len(batch); k++ {
		called += batch[k]
		meanK += float64(k) * batch[k]
	}
	touch := 0.0
	for _, p := range pairs {
		touch += p.Weight
	}
	size := lm.fan.MeanSize[b]
	if touch > 0 {
		s.lookup = ms(lm.cal.CacheLookup.Of(int64(hits / touch * size)))
	}
	if called > 0 {
		meanK /= called
		// the variance of the misses' count is Poisson's × E[k²]/E[k]
		// (batches of k arriving as one)
		k2 := 0.0
		for k := 1; k < len(batch); k++ {
			k2 += float64(k*k) * batch[k]
		}
		s.dispersion = k2 / called / meanK
	}
	s.rpc = ms(lm.cal.RPC.Of(int64(meanK * size)))
	reps := float64(lm.reps[b])
	q := NewQueue(lim, lm.dataMs[b], batch, rate*called/reps)
	s.q = q
	s.rho = q.Rho
	s.lam = rate * meanK * called
	s.mu = q.Capacity * reps
	if misses := s.lam; misses > 0 {
		cacheableMisses := 0.0
		for i, p := range pairs {
			for h, pr := range s.binom[i] {
				cacheableMisses += p.Weight * pr * float64(h)
			}
		}
		s.fill = math.Min(1, rate*cacheableMisses/misses)
	}
	if q.Overloaded {
		s.rho = math.Max(q.Rho, 1)
	}
	lm.states[key] = s
	return s
}

func binomial(n int, p float64) []float64 {
	out := make([]float64, n+1)
	if p <= 0 {
		out[0] = 1
		return out
	}
	if p >= 1 {
		out[n] = 1
		return out
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	for k := 0; k <= n; k++ {
		lg1, _ := math.Lgamma(float64(n + 1))
		lg2, _ := math.Lgamma(float64(k + 1))
		lg3, _ := math.Lgamma(float64(n - k + 1))
		out[k] = math.Exp(lg1 - lg2 - lg3 + float64(k)*lp + float64(n-k)*lq)
	}
	return out
}

// row is, per pair of the backend, P(its call is done within grid[i]).
func (s *bstate) row(i int) []float64 {
	if r := s.rows[int32(i)]; r != nil {
		return r
	}
	x := gridMs[i]
	s.q.batchCDF(x-s.lookup-s.rpc, s.call)
	if x < s.lookup {
		s.call[0] = 0
	}
	r := s.pairRow()
	s.rows[int32(i)] = r
	return r
}

// pairRow is, per pair of the backend, P(its call is done) from s.call
// (P(done | k misses)): its misses are Binomial over its cacheable queries.
func (s *bstate) pairRow() []float64 {
	r := make([]float64, len(s.pairs))
	for p, pr := range s.pairs {
		F := 0.0
		for h, w := range s.binom[p] {
			F += w * s.call[h+pr.Uncacheable]
		}
		r[p] = F
	}
	return r
}

// requestCDF is P(a request is done within grid[i]) with the backends in
// states st.
func (lm *LatencyModel) requestCDF(st []*bstate, i int) float64 {
	if cap(lm.rows) < len(st) {
		lm.rows = make([][]float64, len(st))
	}
	rows := lm.rows[:len(st)]
	for b, s := range st {
		rows[b] = s.row(i)
	}
	return lm.shapes.cdf(rows)
}

// shapeTable is a Fanout's request shapes laid out for the request CDF,
// P(done) = Σ over shapes of weight × Π over the backends it queries of
// P(that backend's call is done): sorted by their pair indices, so that a
// shape shares the leading factors of the one before it (common), and
// flat. The sum is the model's inner loop (a zoo scenario with four
// backends has hundreds of shapes, and the searches ask for the CDF
// millions of times).
type shapeTable struct {
	nb     int
	weight []float64
	// shape s's factor on backend b, at s*nb+b: an index into the rows laid
	// end to end (backend b's pair j at off[b]+j), or one, the index of a
	// 1 after them (not queried: multiplying by 1 changes no bit)
	flat   []int32
	off    []int
	one    int32
	common []int32 // how many leading backends shape s shares with shape s-1 (at most nb-1)
	vals   []float64
}

func newShapeTable(fan *Fanout) *shapeTable {
	nb := len(fan.Backends)
	order := make([]int, len(fan.Shapes))
	for i := range order {
		order[i] = i
	}
	less := func(a, b []int32) int {
		for i := range a {
			if a[i] != b[i] {
				return int(a[i]) - int(b[i])
			}
		}
		return 0
	}
	sort.SliceStable(order, func(i, j int) bool { return less(fan.Shapes[order[i]].Pair, fan.Shapes[order[j]].Pair) < 0 })
	t := &shapeTable{nb: nb, off: make([]int, nb)}
	n := 0
	for b := range nb {
		t.off[b] = n
		n += len(fan.Pairs[b])
	}
	t.one = int32(n)
	t.vals = make([]float64, n+1)
	for k, i := range order {
		sh := fan.Shapes[i]
		t.weight = append(t.weight, sh.Weight)
		for b, j := range sh.Pair {
			if j < 0 {
				t.flat = append(t.flat, t.one)
			} else {
				t.flat = append(t.flat, int32(t.off[b])+j)
			}
		}
		c := 0
		if k > 0 {
			prev := fan.Shapes[order[k-1]].Pair
			for c < nb-1 && prev[c] == sh.Pair[c] { // at most nb-1: cdf multiplies the last factor always
				c++
			}
		}
		t.common = append(t.common, int32(c))
	}
	return t
}

// cdf is P(a request is done) given rows[b][j], P(backend b's call of
// pair j is done).
func (t *shapeTable) cdf(rows [][]float64) float64 {
	vals := t.vals
	for b, r := range rows {
		end := int(t.one)
		if b+1 < t.nb {
			end = t.off[b+1]
		}
		if t.off[b]+len(r) != end {
			panic("feasibility: a row's length is not its backend's number of pairs")
		}
		copy(vals[t.off[b]:end], r)
	}
	vals[t.one] = 1
	var buf [17]float64
	prefix := buf[:]
	if t.nb+1 > len(buf) {
		prefix = make([]float64, t.nb+1)
	}
	prefix[0] = 1
	F := 0.0
	nb := t.nb
	if nb == 0 { // no backend: every request is done
		for _, w := range t.weight {
			F += w
		}
		return F
	}
	for s, w := range t.weight {
		// The product runs in a register from the first backend this shape
		// does not share with the one before; the same operations in the
		// same order as a product over every backend (bit for bit).
		row := t.flat[s*nb : (s+1)*nb : (s+1)*nb]
		b := int(t.common[s])
		v := prefix[b]
		for ; b < nb-1; b++ {
			v *= vals[row[b]]
			prefix[b+1] = v
		}
		F += w * (v * vals[row[nb-1]]) // the last factor: never a prefix
	}
	return F
}

// Prediction is the model's view of one allocation in one phase.
type Prediction struct {
	// P99Ms is the predicted request P99 (+Inf: a backend is overloaded
	// for more than 1% of the requests).
	P99Ms float64
	// WorstRho is the highest gate utilization among the backends.
	WorstRho float64
	hint     int
}

// PhaseInput is what a phase changes: each backend's limits (missing: the
// topology's), the request rate over every app server (requests/s), and
// each backend's miss-ratio curve in the phase (by Fanout.Backends,
// Workload.MissCurve; nil: the whole trace's).
type PhaseInput struct {
	Limits map[string]config.Limits
	Rate   float64
	Miss   [][]float64
}

func (lm *LatencyModel) stateOf(in PhaseInput, alloc map[string]int) []*bstate {
	st := make([]*bstate, len(lm.fan.Backends))
	for b, name := range lm.fan.Backends {
		lim, ok := in.Limits[name]
		if !ok {
			lim = lm.initial[b]
		}
		m, ok := alloc[name]
		if !ok {
			m = -1
		}
		var curve []float64
		if in.Miss != nil {
			curve = in.Miss[b]
		}
		st[b] = lm.state(b, lim, in.Rate, curve, m)
	}
	return st
}

// Predict is the predicted request P99 of allocation alloc (MiB per
// partition) in a phase.
func (lm *LatencyModel) Predict(in PhaseInput, alloc map[string]int) Prediction {
	return lm.predict(in, alloc, gridLen/2)
}

func (lm *LatencyModel) predict(in PhaseInput, alloc map[string]int, hint int) Prediction {
	st := lm.stateOf(in, alloc)
	pr := Prediction{}
	for _, s := range st {
		pr.WorstRho = math.Max(pr.WorstRho, s.rho)
	}
	pr.P99Ms, pr.hint = quantile(func(i int) float64 { return lm.requestCDF(st, i) }, 0.99, hint)
	return pr
}

// Quantile is the predicted request latency quantile p (ms) of an
// allocation in a phase.
func (lm *LatencyModel) Quantile(in PhaseInput, alloc map[string]int, p float64) float64 {
	st := lm.stateOf(in, alloc)
	v, _ := quantile(func(i int) float64 { return lm.requestCDF(st, i) }, p, gridLen/2)
	return v
}

// better: a finite P99 beats an infinite one; two finite ones by at least
// 0.01%; two infinite ones by the worst utilization.
func better(a, b Prediction) bool {
	ai, bi := math.IsInf(a.P99Ms, 1), math.IsInf(b.P99Ms, 1)
	switch {
	case !ai && bi:
		return true
	case ai && !bi:
		return false
	case !ai:
		return a.P99Ms < b.P99Ms*(1-1e-4)
	default:
		return a.WorstRho < b.WorstRho-1e-9
	}
}

// Best searches, from start (an allocation of budget MiB with every
// partition at floor or above), for the allocation with the lowest
// predicted P99: steepest descent moving chunks of MiB between two
// partitions (the largest power of two up to budget/16, halved down to 1
// MiB) while the prediction improves. It never returns an allocation the
// model predicts worse than start. When even the best allocation found is
// predicted overloaded, it returns start.
func (lm *LatencyModel) Best(in PhaseInput, start map[string]int, floor int) (map[string]int, Prediction) {
	names := make([]string, 0, len(start))
	budget := 0
	for n, m := range start {
		names = append(names, n)
		budget += m
	}
	sort.Strings(names)
	cur := copyAlloc(start)
	first := lm.Predict(in, cur)
	best := first
	chunk := 1
	for chunk*2 <= budget/16 {
		chunk *= 2
	}
	for ; chunk >= 1; chunk /= 2 {
		for {
			var move [2]string
			cand := best
			for _, from := range names {
				if cur[from]-chunk < floor {
					continue
				}
				for _, to := range names {
					if to == from {
						continue
					}
					cur[from] -= chunk
					cur[to] += chunk
					p := lm.predict(in, cur, best.hint)
					cur[from] += chunk
					cur[to] -= chunk
					if better(p, cand) {
						cand, move = p, [2]string{from, to}
					}
				}
			}
			if move[0] == "" {
				break
			}
			cur[move[0]] -= chunk
			cur[move[1]] += chunk
			best = cand
		}
	}
	if math.IsInf(best.P99Ms, 1) {
		return copyAlloc(start), first
	}
	return cur, best
}

// PhaseLatency is the latency model's verdict on one phase.
type PhaseLatency struct {
	// Best is the allocation with the lowest predicted P99 in the phase's
	// steady state: the oracle's.
	Best map[string]int
	// MinMaxP99Ms is the predicted P99 of the phase's Result.MinMax (the
	// search's start).
	MinMaxP99Ms float64
	// OracleP99Ms and ConfiguredP99Ms are the predicted request P99 of the
	// oracle's and the configured allocation (+Inf: overloaded).
	OracleP99Ms, ConfiguredP99Ms float64
	// OracleRho and ConfiguredRho are their highest gate utilizations.
	OracleRho, ConfiguredRho float64
}

// Refine finds, for every result, the allocation minimizing the predicted
// request P99 (Best, started from the load model's Result.MinMax; the
// configured allocation when that is predicted better still). inputs are
// the phases' limits and request rates (one per result); configured is the
// configured allocation.
func (lm *LatencyModel) Refine(results []Result, inputs []PhaseInput, floor int, configured map[string]int) []PhaseLatency {
	out := make([]PhaseLatency, len(results))
	for i, r := range results {
		in := inputs[i]
		var pl PhaseLatency
		alloc, pred := lm.Best(in, r.MinMax, floor)
		pl.MinMaxP99Ms = lm.Predict(in, r.MinMax).P99Ms
		conf := lm.Predict(in, configured)
		pl.ConfiguredP99Ms, pl.ConfiguredRho = conf.P99Ms, conf.WorstRho
		if !math.IsInf(conf.P99Ms, 1) && better(conf, pred) && validAlloc(configured, alloc, floor) {
			// the search is local: never worse than the configured allocation
			alloc, pred = copyAlloc(configured), conf
		}
		pl.OracleP99Ms, pl.OracleRho = pred.P99Ms, pred.WorstRho
		pl.Best = alloc
		out[i] = pl
	}
	return out
}

// validAlloc: a has the partitions of like, the same total, each at floor
// or above.
func validAlloc(a, like map[string]int, floor int) bool {
	sa, sl := 0, 0
	for n, m := range like {
		v, ok := a[n]
		if !ok || v < floor {
			return false
		}
		sa += v
		sl += m
	}
	return len(a) == len(like) && sa == sl
}

func copyAlloc(a map[string]int) map[string]int {
	out := make(map[string]int, len(a))
	for n, m := range a {
		out[n] = m
	}
	return out
}
