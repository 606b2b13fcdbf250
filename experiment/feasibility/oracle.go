package feasibility

// The oracle (docs/algorithms.md, "The oracle: two schedules"): Analyse
// goes from a topology, a trace and a capacity scenario to the load
// model's verdict on every phase (feasible or not, the scenario's class)
// and to the allocation schedules the transient model (transient.go)
// predicts best: with foresight (the whole run known in advance, space may
// move before a phase that needs it, while the partition can still fill
// from a backend that answers) or reactive (each phase learnt the instant
// it starts and expected to last: a perfect reaction without foresight).
//
// The schedule is searched greedily, segment by segment in time order:
// each segment tries a few candidate allocations — keep the current one,
// the phase's steady-state best (Refine), halfway between, and with
// foresight the steady-state bests of the phases ahead within the horizon
// — and a descent moving chunks of MiB between partitions; a candidate is
// scored by stepping the transient model over the segment and what
// follows it (the horizon, the later phases at their steady-state bests),
// on the expected number of SLO-series points violating the SLO, then on
// the expected slow requests. The reactive search scores a candidate over
// the same horizon as if the phase in hand went on, the candidate kept.

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/model"
)

// The schedules' variants.
const (
	// Foresight knows the whole run in advance.
	Foresight = "foresight"
	// Reactive learns each phase when it starts.
	Reactive = "reactive"
)

// Variants lists the variants.
var Variants = []string{Foresight, Reactive}

// DefaultHorizon is how far ahead a foresight schedule looks from each
// segment (and scores it over).
const DefaultHorizon = 60 * time.Second

// leadCuts are the times before a phase start at which a foresight
// schedule may already move towards the phase's allocation.
var leadCuts = []time.Duration{3 * time.Second, 6 * time.Second, 12 * time.Second, 24 * time.Second, 48 * time.Second}

// Input is what the oracle is computed from.
type Input struct {
	Topology *config.Topology
	// AppServer is the partitioned app server whose budget is allocated
	// ("": the first); the others are taken to be alike.
	AppServer string
	// TracePath is the trace the run replays; Duration the run's length.
	TracePath string
	Duration  time.Duration
	// Changes are the scenario's expanded capacity changes
	// (scenario.Expand) and Rates its request-rate schedule.
	Changes []scenario.Change
	Rates   []scenario.RateChange
}

// Options tune the analysis.
type Options struct {
	// Variants are the schedules to compute (Foresight, Reactive); none:
	// only the load model and the steady-state predictions.
	Variants []string
	// Horizon is DefaultHorizon when 0.
	Horizon time.Duration
	// Calibration is the data-path times (zero: costmodel.DefaultCalibration).
	Calibration costmodel.Calibration
	// Candidates, with Foresight, lists the whole schedules a judge on the
	// simulator chooses the oracle's from (Report.Candidates).
	Candidates bool
	// FeasibleOnly computes the schedules only when the run is feasible
	// (ClassMargin or ClassTight): an infeasible run's report has its
	// class and phases and no schedule (the searches' time saved).
	FeasibleOnly bool
}

// Step is one change of a schedule: from At on, MB per partition on every
// app server alike.
type Step struct {
	At time.Duration
	MB map[string]int
}

// Schedule is one variant's allocation over the run.
type Schedule struct {
	Variant string
	Steps   []Step
	// Predicted is the transient model's prediction of its violations.
	Predicted Violations
}

// At is the allocation in force at time t.
func (s *Schedule) At(t time.Duration) map[string]int {
	i := sort.Search(len(s.Steps), func(i int) bool { return s.Steps[i].At > t }) - 1
	return s.Steps[max(i, 0)].MB
}

// Report is the oracle's analysis of a run.
type Report struct {
	AppServer      string
	AppServers     int
	Budget, Floor  int
	Configured     map[string]int
	SLO            slo.Params
	BackendTimeout time.Duration
	Backends       []model.Backend
	Results        []Result
	Steady         []PhaseLatency
	Class          Class
	Worst          float64
	Schedules      map[string]*Schedule
	// Candidates are the whole schedules the oracle with foresight may
	// take (candidates), the model's pick first; none without Foresight
	// and Options.Candidates.
	Candidates           []Candidate
	ConfiguredPredicted  Violations
	workload             *Workload
	dyn                  *dynamics
	parts                []string // the partitions, sorted
	steadyVec, configVec [][]int
	partIndex            []int // by fan.Backends: the partition's index or -1
	// midOrder is the order in which a midpoint between two allocations
	// (mid) rounds equal halves up: the trace backends' indices as decimal
	// text (0, 1, 10, 11, 2, …), the order the search has always used, so
	// that the oracle's schedules stay as they were.
	midOrder               []int
	phaseStart, phaseEndAt []int // per phase: its first bucket and the bucket after its last
}

// Analyse reads the trace once and analyses the run (see the file's
// comment).
func Analyse(in Input, opt Options) (*Report, error) {
	topo := in.Topology
	if topo == nil {
		return nil, errors.New("no topology")
	}
	if in.Duration <= 0 {
		return nil, errors.New("the run's duration is needed")
	}
	app := topo.PartitionedAppServer(in.AppServer)
	if app == nil {
		return nil, fmt.Errorf("no partitioned app server %q in the topology", in.AppServer)
	}
	for _, v := range opt.Variants {
		if v != Foresight && v != Reactive {
			return nil, fmt.Errorf("oracle variant %q is not %s or %s", v, Foresight, Reactive)
		}
	}
	if opt.Horizon <= 0 {
		opt.Horizon = DefaultHorizon
	}
	if opt.Calibration.Service == nil {
		opt.Calibration = costmodel.DefaultCalibration()
	}
	r := &Report{AppServer: app.ID, AppServers: len(topo.AppServers), Budget: app.CacheBudgetMB,
		Floor: app.Controller.MinPartitionMB, Configured: app.InitialAllocationMB(),
		BackendTimeout: time.Duration(app.BackendTimeout), Schedules: map[string]*Schedule{}}
	s := config.DefaultSLO()
	if topo.SLO != nil {
		s = *topo.SLO
	}
	r.SLO = slo.Params{SLO: time.Duration(s.Latency), Step: time.Duration(s.Step), Window: time.Duration(s.Window), Warmup: time.Duration(s.Warmup)}
	if r.BackendTimeout <= 0 {
		r.BackendTimeout = time.Duration(app.RequestTimeout)
	}
	initial := map[string]config.Limits{}
	for _, b := range topo.Backends {
		initial[b.Name] = b.Limits
	}
	phases := Phases(initial, in.Changes, in.Duration, in.Rates...)
	w, err := Scan(in.TracePath, in.Duration, r.AppServers, r.Budget)
	if err != nil {
		return nil, err
	}
	r.workload = w
	w.SetRates(phases)
	raw, _ := w.LoadModel(0, in.Duration)
	// The load model reads the curves at what a partition is worth
	// (Workload.HeldMB: memcached's slab classes), as the latency model does.
	r.Backends = make([]model.Backend, len(raw))
	for i, b := range raw {
		b.MissRatio = w.AsHeld(i, b.MissRatio)
		r.Backends[i] = b
	}
	for i := range phases {
		for b, n := range w.Backends {
			if c, ok := phases[i].Curves[n]; ok {
				phases[i].Curves[n] = w.AsHeld(b, c)
			}
		}
	}
	if r.Results, err = analysePhases(r.Backends, phases, r.Budget, r.Floor, r.Configured); err != nil {
		return nil, err
	}
	r.Class, r.Worst = Classify(r.Results)
	lm := NewLatencyModel(raw, &w.Fanout, topo.Backends, opt.Calibration)
	lm.work = w
	r.dyn = newDynamics(lm, w, phases, r.SLO, r.BackendTimeout)
	inputs := make([]PhaseInput, len(phases))
	for i, ph := range phases {
		miss := make([][]float64, len(w.Backends))
		for b := range w.Backends {
			miss[b] = w.MissCurve(b, ph.Start, ph.End)
		}
		inputs[i] = PhaseInput{Limits: ph.Limits, Rate: r.dyn.rate[w.BucketOf(ph.Start)], Miss: miss}
	}
	r.Steady = lm.Refine(r.Results, inputs, r.Floor, r.Configured)
	r.index()
	confVec := r.vec(r.Configured)
	_, r.ConfiguredPredicted = r.dyn.predict(func(int) []int { return confVec })
	if opt.FeasibleOnly && r.Class == ClassInfeasible {
		return r, nil
	}
	for _, v := range opt.Variants {
		// The reactive view knows the first phase at once and starts from
		// its steady-state best; with foresight the search starts from the
		// configured allocation (optimize).
		r.Schedules[v] = r.optimize(v == Foresight, v == Foresight, opt.Horizon)
	}
	if f := r.Schedules[Foresight]; f != nil {
		// The run known in advance, the oracle may also take a whole
		// schedule the greedy search did not reach: the reactive search's,
		// started as its own from the configured allocation, or the
		// configured allocation throughout, when predicted better.
		rs := r.optimize(false, true, opt.Horizon)
		conf := &Schedule{Variant: Foresight, Steps: []Step{{At: 0, MB: r.Configured}}, Predicted: r.ConfiguredPredicted}
		pick := f
		for _, alt := range []*Schedule{rs, conf} {
			if alt.Predicted.Pct < pick.Predicted.Pct-1e-9 {
				pick = &Schedule{Variant: Foresight, Steps: alt.Steps, Predicted: alt.Predicted}
			}
		}
		r.Schedules[Foresight] = pick
		if !opt.Candidates {
			return r, nil
		}
		// The candidates a judge on the memcached model itself (the
		// simulator) chooses from: the model's pick first, then every whole
		// schedule the searches reached (Candidate).
		r.Candidates = r.candidates(pick, []Candidate{
			{Name: "foresight-search", Schedule: f},
			{Name: "reactive-from-configured", Schedule: rs},
			{Name: "configured", Schedule: conf},
		}, opt.Horizon)
	}
	return r, nil
}

// Candidate is one whole schedule the oracle with foresight may take.
type Candidate struct {
	Name     string
	Schedule *Schedule
}

// CandidateLeads are how far ahead of the reactive schedule its shifted
// candidates move (the reactive schedule's moves made that much earlier:
// a reaction that foresees the phase by so much).
var CandidateLeads = []time.Duration{5 * time.Second, 20 * time.Second}

// candidates lists the oracle's candidate schedules (docs/algorithms.md,
// "Judged in the simulator"), the model's pick first, every name on every
// app server in the same order even where two schedules are the same (a
// judge simulates a combination of the app servers' schedules once): the
// searches' (more), the reactive schedule as it is and moved earlier by
// each of CandidateLeads, the model's pick and the reactive schedule
// spread, and the model's pick ramped. The fluid model cannot tell them
// apart where a partition's worth depends on when it filled (memcached's
// slab classes keep the pages they took while filling); the simulator can.
// With the reactive schedule among them and every online arm starting from
// the configured allocation, the judged oracle is never worse than either.
func (r *Report) candidates(pick *Schedule, more []Candidate, horizon time.Duration) []Candidate {
	reactive := r.Schedules[Reactive]
	if reactive == nil {
		reactive = r.optimize(false, false, horizon)
	}
	all := []Candidate{{Name: "model-pick", Schedule: pick}}
	all = append(all, more...)
	all = append(all, Candidate{Name: "reactive", Schedule: reactive})
	for _, lead := range CandidateLeads {
		all = append(all, Candidate{Name: fmt.Sprintf("reactive-lead-%gs", lead.Seconds()), Schedule: r.shifted(reactive, lead)})
	}
	all = append(all, Candidate{Name: "model-pick-spread", Schedule: r.spread(pick)},
		Candidate{Name: "reactive-spread", Schedule: r.spread(reactive)},
		Candidate{Name: "model-pick-ramp", Schedule: r.ramp(pick)})
	for i, c := range all {
		all[i].Schedule = &Schedule{Variant: Foresight, Steps: c.Schedule.Steps, Predicted: c.Schedule.Predicted}
	}
	return all
}

// shifted is s with every move after the first step made lead earlier
// (not before 0; a move overtaken by the next one is dropped), with the
// model's prediction of it.
func (r *Report) shifted(s *Schedule, lead time.Duration) *Schedule {
	out := &Schedule{Variant: s.Variant}
	for i, st := range s.Steps {
		at := st.At
		if i > 0 {
			at = max(0, at-lead)
		}
		for len(out.Steps) > 0 && out.Steps[len(out.Steps)-1].At >= at {
			out.Steps = out.Steps[:len(out.Steps)-1]
		}
		out.Steps = append(out.Steps, Step{At: at, MB: st.MB})
	}
	if len(out.Steps) > 0 {
		out.Steps[0].At = 0
	}
	return r.withPrediction(out)
}

// spread is s with every move spread over the time since the step before
// it, a bucket at a time in a straight line (lerp), there when s moves: a
// partition a later phase needs fills while its backend still answers
// quickly, and its donors give space up while theirs can take the misses
// (an online policy drifting a step per interval). With its prediction.
func (r *Report) spread(s *Schedule) *Schedule {
	w := r.workload
	out := &Schedule{Variant: s.Variant, Steps: []Step{s.Steps[0]}}
	for i := 1; i < len(s.Steps); i++ {
		from, to := s.Steps[i-1], s.Steps[i]
		a, b := r.vec(from.MB), r.vec(to.MB)
		last := a
		n := int((to.At - from.At) / w.Bucket)
		for k := 1; k < n; k++ {
			if v := lerp(a, b, float64(k)/float64(n), nil); !sameAlloc(v, last, 0) {
				out.Steps = append(out.Steps, Step{At: from.At + time.Duration(k)*w.Bucket, MB: r.named(v, from.MB)})
				last = v
			}
		}
		out.Steps = append(out.Steps, to)
	}
	return r.withPrediction(out)
}

// ramp is s reached in a straight line from the configured allocation, a
// bucket at a time, by the start of the run's hardest phase (the highest
// worst utilization of its best allocation; the first of equals), and s
// from there on: space filled just in time holds the item sizes of the
// phase that needs it (optimize says why that matters), growing with the
// pressure as an online policy would. s itself when the hardest phase is
// the first. With its prediction.
func (r *Report) ramp(s *Schedule) *Schedule {
	w := r.workload
	hard := 0
	for i, res := range r.Results {
		if res.MinMaxWorst > r.Results[hard].MinMaxWorst {
			hard = i
		}
	}
	end := w.BucketOf(r.Results[hard].Start)
	if end <= 0 {
		return s
	}
	a, b := r.vec(r.Configured), r.vec(s.At(time.Duration(end)*w.Bucket))
	out := &Schedule{Variant: s.Variant, Steps: []Step{{At: 0, MB: r.Configured}}}
	last := a
	for k := 1; k <= end; k++ {
		if v := lerp(a, b, float64(k)/float64(end), nil); !sameAlloc(v, last, 0) {
			out.Steps = append(out.Steps, Step{At: time.Duration(k) * w.Bucket, MB: r.named(v, r.Configured)})
			last = v
		}
	}
	for _, st := range s.Steps {
		if st.At > time.Duration(end)*w.Bucket && !sameAlloc(r.vec(st.MB), last, 0) {
			out.Steps = append(out.Steps, st)
			last = r.vec(st.MB)
		}
	}
	return r.withPrediction(out)
}

// withPrediction sets s's Predicted to the model's prediction of it.
func (r *Report) withPrediction(s *Schedule) *Schedule {
	_, s.Predicted = r.dyn.predict(func(t int) []int { return r.allocAt(s, t) })
	return s
}

// allocAt is s's allocation in bucket t, as a vector.
func (r *Report) allocAt(s *Schedule, t int) []int {
	return r.vec(s.At(time.Duration(t) * r.workload.Bucket))
}

// lerp is the allocation f of the way from a to b in whole MiB with a's
// total (b's: the same), the larger remainders rounded up, equal ones in
// the order given (nil: index order); -1 (no partition) stays.
func lerp(a, b []int, f float64, order []int) []int {
	if order == nil {
		order = make([]int, len(a))
		for i := range order {
			order[i] = i
		}
	}
	out := make([]int, len(a))
	type rest struct {
		i    int
		frac float64
	}
	var rests []rest
	want, got := 0, 0
	for i := range a {
		if a[i] < 0 || b[i] < 0 {
			out[i] = a[i]
		}
	}
	for _, i := range order {
		if a[i] < 0 || b[i] < 0 {
			continue
		}
		x := float64(a[i]) + f*float64(b[i]-a[i])
		out[i] = int(math.Floor(x))
		want += a[i]
		got += out[i]
		rests = append(rests, rest{i, x - math.Floor(x)})
	}
	sort.SliceStable(rests, func(i, j int) bool { return rests[i].frac > rests[j].frac })
	for k := 0; got < want && k < len(rests); k++ {
		out[rests[k].i]++
		got++
	}
	return out
}

// index sets the partitions, their vectors, the midpoints' order and the
// phases' buckets.
func (r *Report) index() {
	w := r.workload
	r.parts = slices.Sorted(maps.Keys(r.Configured))
	r.partIndex = make([]int, len(w.Backends))
	for b, n := range w.Backends {
		r.partIndex[b] = sort.SearchStrings(r.parts, n)
		if r.partIndex[b] >= len(r.parts) || r.parts[r.partIndex[b]] != n {
			r.partIndex[b] = -1
		}
	}
	r.midOrder = make([]int, len(w.Backends))
	for b := range r.midOrder {
		r.midOrder[b] = b
	}
	sort.Slice(r.midOrder, func(i, j int) bool { return strconv.Itoa(r.midOrder[i]) < strconv.Itoa(r.midOrder[j]) })
	for i, res := range r.Results {
		r.steadyVec = append(r.steadyVec, r.vec(r.Steady[i].Best))
		r.phaseStart = append(r.phaseStart, w.BucketOf(res.Start))
		end := w.Buckets()
		if i+1 < len(r.Results) {
			end = w.BucketOf(r.Results[i+1].Start)
		}
		r.phaseEndAt = append(r.phaseEndAt, end)
	}
}

// vec is an allocation by partition name as MiB per trace backend
// (Fanout.Backends order; -1 where the app server has no partition).
func (r *Report) vec(mb map[string]int) []int {
	out := make([]int, len(r.workload.Backends))
	for b, n := range r.workload.Backends {
		out[b] = -1
		if r.partIndex == nil || r.partIndex[b] >= 0 {
			if v, ok := mb[n]; ok {
				out[b] = v
			}
		}
	}
	return out
}

// named is a vector as MiB by partition name (every partition; one the
// trace does not query keeps its configured size... at the floor).
func (r *Report) named(v []int, like map[string]int) map[string]int {
	out := copyAlloc(like)
	for b, n := range r.workload.Backends {
		if v[b] >= 0 {
			out[n] = v[b]
		}
	}
	return out
}

// segment is a span of buckets [from, to) with one allocation.
type segment struct {
	from, to int
	alloc    []int
}

// cuts are the segments' starts: every phase's, and with foresight the
// lead cuts before a phase whose steady-state best differs from the one
// before it.
func (r *Report) cuts(foresight bool) []int {
	w := r.workload
	set := map[int]bool{0: true}
	for p, b := range r.phaseStart {
		set[b] = true
		if !foresight || p == 0 || sameAlloc(r.steadyVec[p], r.steadyVec[p-1], 2) {
			continue
		}
		for _, l := range leadCuts {
			at := time.Duration(b)*w.Bucket - l
			if at > 0 {
				set[w.BucketOf(at)] = true
			}
		}
	}
	out := make([]int, 0, len(set))
	for b := range set {
		if b < w.Buckets() {
			out = append(out, b)
		}
	}
	sort.Ints(out)
	return out
}

// sameAlloc: every partition within tol MiB.
func sameAlloc(a, b []int, tol int) bool {
	for i := range a {
		if d := a[i] - b[i]; d > tol || d < -tol {
			return false
		}
	}
	return true
}

// optimize builds one variant's schedule, its search started from the
// configured allocation (fromConfigured) or from the first phase's
// steady-state best.
func (r *Report) optimize(foresight, fromConfigured bool, horizon time.Duration) *Schedule {
	d := r.dyn
	w := r.workload
	nb := w.Buckets()
	cuts := r.cuts(foresight)
	hBuckets := max(1, int(horizon/w.Bucket))
	committed := make([]float64, nb)
	scratch := make([]float64, nb)
	f := d.start()
	// From the configured allocation the search starts where every arm
	// starts (the first phase's steady-state best a candidate) and moves
	// only when the model says moving helps: memcached gives a slab class
	// the pages it asks for while the partition fills, so space given long
	// before it is needed holds the item sizes of its fill (a real stream's
	// mix shifts) and is worth less than the model says. The reactive
	// view starts from the first phase's best, which it knows at once.
	conf := r.vec(r.Configured)
	cur := r.steadyVec[0]
	if fromConfigured {
		cur = conf
	}
	var segs []segment
	for si, from := range cuts {
		to := nb
		if si+1 < len(cuts) {
			to = cuts[si+1]
		}
		p := d.phaseOf[from]
		end := min(nb, max(to, from+hBuckets))
		if foresight {
			// a candidate made for a phase ahead is judged over that
			// phase and the one after it (a ramp's steps, then its hold),
			// up to three horizons
			for q := p + 1; q < len(r.phaseStart) && r.phaseStart[q] < from+hBuckets; q++ {
				last := min(q+1, len(r.phaseEndAt)-1)
				end = max(end, min(nb, r.phaseEndAt[last], from+3*hBuckets))
			}
		}
		copy(scratch, committed)
		eval := func(c []int) score {
			g := f.clone()
			if !foresight {
				d.persist = p
				defer func() { d.persist = -1 }()
			}
			tail := 0.0
			for t := from; t < end; t++ {
				a := c
				if t >= to && foresight && d.phaseOf[t] != p {
					// later phases at their steady-state best; the rest
					// of this one keeps the candidate
					a = r.steadyVec[d.phaseOf[t]]
				}
				scratch[t] = d.step(g, t, a)
				tail += w.Requests[t] * d.tail
			}
			sc := d.pointsScore(scratch, from, end)
			sc.tail = tail
			return sc
		}
		cands := [][]int{cur, r.steadyVec[p], r.mid(cur, r.steadyVec[p])}
		if si == 0 {
			cands = append(cands, conf)
		}
		if foresight {
			for q := p + 1; q < len(r.phaseStart) && r.phaseStart[q] < from+hBuckets; q++ {
				cands = append(cands, r.steadyVec[q], r.mid(cur, r.steadyVec[q]), r.mid(r.steadyVec[p], r.steadyVec[q]))
			}
		}
		best, bestScore := cands[0], eval(cands[0])
		seen := map[string]bool{key(cands[0]): true}
		for _, c := range cands[1:] {
			if seen[key(c)] {
				continue
			}
			seen[key(c)] = true
			if sc := eval(c); sc.less(bestScore) {
				best, bestScore = c, sc
			}
		}
		if bestScore.violations > 0.01 {
			best, bestScore = r.descend(best, bestScore, eval)
		}
		for t := from; t < to; t++ {
			committed[t] = d.step(f, t, best)
		}
		if len(segs) > 0 && key(segs[len(segs)-1].alloc) == key(best) {
			segs[len(segs)-1].to = to
		} else {
			segs = append(segs, segment{from: from, to: to, alloc: best})
		}
		cur = best
	}
	s := &Schedule{Variant: Reactive}
	if foresight {
		s.Variant = Foresight
	}
	for _, sg := range segs {
		s.Steps = append(s.Steps, Step{At: time.Duration(sg.from) * w.Bucket, MB: r.named(sg.alloc, r.Configured)})
	}
	_, s.Predicted = d.predict(func(t int) []int {
		i := sort.Search(len(segs), func(i int) bool { return segs[i].from > t }) - 1
		return segs[max(i, 0)].alloc
	})
	return s
}

// descend moves chunks of MiB between two partitions (from a quarter of
// the budget down to 1/64 of it) while the score improves.
func (r *Report) descend(start []int, sc score, eval func([]int) score) ([]int, score) {
	cur := append([]int(nil), start...)
	var ix []int
	for b, v := range cur {
		if v >= 0 {
			ix = append(ix, b)
		}
	}
	chunk := 1
	for chunk*2 <= r.Budget/4 {
		chunk *= 2
	}
	for ; chunk >= max(1, r.Budget/64); chunk /= 2 {
		for range 8 {
			var bestC []int
			bestS := sc
			for _, from := range ix {
				if cur[from]-chunk < r.Floor {
					continue
				}
				for _, to := range ix {
					if to == from {
						continue
					}
					c := append([]int(nil), cur...)
					c[from] -= chunk
					c[to] += chunk
					if s := eval(c); s.less(bestS) {
						bestC, bestS = c, s
					}
				}
			}
			if bestC == nil {
				break
			}
			cur, sc = bestC, bestS
		}
	}
	return cur, sc
}

// mid is halfway between two allocations (lerp, equal halves rounded up
// in midOrder).
func (r *Report) mid(a, b []int) []int { return lerp(a, b, 0.5, r.midOrder) }

func key(v []int) string { return fmt.Sprint(v) }

// Series predicts every counted point of the SLO series under a schedule
// (nil: the configured allocation throughout).
func (r *Report) Series(s *Schedule) []SeriesPoint {
	conf := r.vec(r.Configured)
	return r.dyn.series(func(t int) []int {
		if s == nil {
			return conf
		}
		return r.allocAt(s, t)
	})
}
