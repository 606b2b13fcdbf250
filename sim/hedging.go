package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/dispatch"
	"github.com/robinhoodcache/robinhood/lib/percentile"
	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/schema"
)

// The hedging bench (docs/hedging.md, "What the bench simulates"): the
// hedging papers' replicated-backend experiments on the simulator's engine,
// the backends' capacity model and the app server's dispatch policies.

// Ideal is the idealized hedge's name in a bench's policy list: it knows
// every draw ahead and sends each query only to the replica where it will
// finish first (simulator only: docs/hedging.md).
const Ideal = "ideal"

// HedgingConfig is a hedging bench experiment (examples/hedging/*.yaml;
// its fields: docs/hedging.md, generated from schema/hedging.schema.yaml);
// a zero field stands for an absent one (the schema's default: Validate).
type HedgingConfig struct {
	Name     string `json:"name,omitempty"`
	Shards   int    `json:"shards,omitempty"`
	Replicas int    `json:"replicas,omitempty"`
	Workers  int    `json:"workers,omitempty"`
	// Fanout: 0 is all the shards (check sets it).
	Fanout      int         `json:"fanout,omitempty"`
	Service     ServiceDist `json:"service"`
	Copies      string      `json:"copies,omitempty"`
	Correlation float64     `json:"correlation,omitempty"`
	HiccupProb  float64     `json:"hiccup_prob,omitempty"`
	HiccupMs    float64     `json:"hiccup_ms,omitempty"`
	HiccupAt    string      `json:"hiccup_at,omitempty"`
	// Measured is a path relative to the experiment file: LoadHedging
	// turns it into the hiccups, then clears it.
	Measured     string        `json:"measured,omitempty"`
	StallProb    float64       `json:"stall_prob,omitempty"`
	StallMs      float64       `json:"stall_ms,omitempty"`
	Cancel       string        `json:"cancel,omitempty"`
	PurgeDelayMs float64       `json:"purge_delay_ms,omitempty"`
	PurgeCostMs  float64       `json:"purge_cost_ms,omitempty"`
	Utilizations []float64     `json:"utilizations,omitempty"`
	Requests     int           `json:"requests,omitempty"`
	Warmup       int           `json:"warmup,omitempty"`
	Percentile   float64       `json:"percentile,omitempty"`
	Seeds        []uint64      `json:"seeds,omitempty"`
	Unit         string        `json:"unit,omitempty"`
	Policies     []BenchPolicy `json:"policies,omitempty"`

	benchHooks
}

// benchHooks are for tests that compare the bench with a reference model
// event for event: hiccupOf decides whether copy c of query q (numbered in
// arrival order from 0) hiccups instead of the replica's draw; onQuery
// sees each query's arrival, shard and inherent cost and onAnswer its
// answer.
type benchHooks struct {
	hiccupOf func(q, c int) bool
	onQuery  func(q int, at time.Duration, shard int, cost float64)
	onAnswer func(q int, at time.Duration)
	onSend   func(q, c, replica int)
}

// ServiceDist is the inherent cost's distribution, in ms (docs/hedging.md,
// "service").
type ServiceDist struct {
	Dist   string  `json:"dist,omitempty"`
	MeanMs float64 `json:"mean_ms,omitempty"`
	Shape  float64 `json:"shape,omitempty"`
	ModeMs float64 `json:"mode_ms,omitempty"`
	Mu     float64 `json:"mu"`
	Sigma  float64 `json:"sigma"`
}

// BenchPolicy is one arm: a label and a dispatch block (or ideal), and
// what it overrides of the experiment (docs/hedging.md, "policies[]").
type BenchPolicy struct {
	Label        string         `json:"label,omitempty"`
	Dispatch     map[string]any `json:"dispatch"`
	Cancel       string         `json:"cancel,omitempty"`
	PurgeDelayMs *float64       `json:"purge_delay_ms,omitempty"`
	PurgeCostMs  *float64       `json:"purge_cost_ms,omitempty"`
}

// limits are the replicas' capacity limits for arm p.
func (c *HedgingConfig) limits(p BenchPolicy) capacity.Limits {
	lim := capacity.Limits{Workers: c.Workers, HiccupProb: c.HiccupProb, HiccupMs: c.HiccupMs, StallProb: c.StallProb, StallMs: c.StallMs,
		PurgeDelayMs: c.PurgeDelayMs, PurgeCostMs: c.PurgeCostMs}
	if c.HiccupAt == "response" { // the bench draws them (RunBench)
		lim.HiccupProb, lim.HiccupMs = 0, 0
	}
	if p.PurgeDelayMs != nil {
		lim.PurgeDelayMs = *p.PurgeDelayMs
	}
	if p.PurgeCostMs != nil {
		lim.PurgeCostMs = *p.PurgeCostMs
	}
	return lim
}

// Mean is the distribution's mean in ms.
func (d ServiceDist) Mean() float64 {
	switch d.Dist {
	case "exponential":
		return d.MeanMs
	case "pareto":
		return d.Shape * d.ModeMs / (d.Shape - 1)
	case "lognormal":
		return math.Exp(d.Mu + d.Sigma*d.Sigma/2)
	}
	return math.NaN()
}

func (d ServiceDist) draw(rng *rand.Rand) float64 {
	switch d.Dist {
	case "exponential":
		return rng.ExpFloat64() * d.MeanMs
	case "pareto":
		return d.ModeMs / math.Pow(1-rng.Float64(), 1/d.Shape)
	default:
		return math.Exp(d.Mu + d.Sigma*rng.NormFloat64())
	}
}

// LoadHedging reads and checks a bench experiment file (ReadHedging), with
// its measured hiccups.
func LoadHedging(path string) (*HedgingConfig, error) {
	b, err := config.ReadConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	doc, err := config.ParseYAML(b, "hedging experiment")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := ReadHedging(doc)
	if err == nil && c.Measured != "" {
		if err = c.applyMeasured(filepath.Join(filepath.Dir(path), c.Measured)); err != nil {
			err = fmt.Errorf("measured: %w", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ReadHedging reads a bench experiment document (a parsed file, or what
// sim advise builds from its flags) through the configuration contract
// (schema/hedging.schema.yaml: its fields, ranges, defaults and rules, with
// the shared reader's bounds and named errors), then checks what only the
// bench knows (check).
func ReadHedging(doc any) (*HedgingConfig, error) {
	norm, err := config.Default().Read(schema.Hedging, doc, "")
	if err != nil {
		return nil, err
	}
	c := &HedgingConfig{}
	if err := config.Decode(norm, c); err != nil {
		return nil, err
	}
	return c, c.check()
}

// ReadMeasured reads a `backendload --measure --json` result: the stall
// probability and a stall's duration in mean service times.
func ReadMeasured(path string) (prob, stallX float64, err error) {
	b, err := safefile.ReadFile(path, 1<<20)
	if err != nil {
		return 0, 0, err
	}
	var m struct {
		Prob  *float64 `json:"stall_prob"`
		Stall *float64 `json:"stall_x"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Prob == nil || m.Stall == nil {
		return 0, 0, fmt.Errorf("%s is not a `backendload --measure --json` result (stall_prob, stall_x)", path)
	}
	return *m.Prob, *m.Stall, nil
}

// applyMeasured takes the hiccups from a jitter measurement (the contract
// has checked that the experiment gives none of its own) and checks them.
func (c *HedgingConfig) applyMeasured(path string) error {
	prob, stallX, err := ReadMeasured(path)
	if err != nil {
		return err
	}
	c.HiccupProb, c.HiccupMs, c.Measured = prob, stallX*c.Service.Mean(), ""
	return c.Validate()
}

// Validate reads the experiment through the contract as ReadHedging reads
// a file, a zero field being an absent one, and fills in the defaults.
func (c *HedgingConfig) Validate() error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	r, err := ReadHedging(doc)
	if err != nil {
		return err
	}
	r.benchHooks = c.benchHooks
	*c = *r
	return nil
}

// check is what the schema cannot say: fanout 0 is every shard, an arm's
// label defaults to its policy's name and is unique, the idealized hedge's
// conditions, and each arm's dispatch parameters (lib/dispatch).
func (c *HedgingConfig) check() error {
	if c.Fanout == 0 {
		c.Fanout = c.Shards
	}
	seen := map[string]bool{}
	for i := range c.Policies {
		p := &c.Policies[i]
		name, _ := p.Dispatch["policy"].(string)
		if p.Label == "" {
			p.Label = name
		}
		if seen[p.Label] {
			return fmt.Errorf("policies[%d].label: %q appears twice", i, p.Label)
		}
		seen[p.Label] = true
		if name == Ideal {
			if len(p.Dispatch) > 1 {
				return fmt.Errorf("policies[%d].dispatch: ideal takes no parameters", i)
			}
			if c.StallProb > 0 || c.Workers != 1 || c.HiccupAt == "response" {
				return fmt.Errorf("policies[%d]: the idealized hedge needs single-worker replicas (workers: 1), no stalls (stall_prob: 0) and hiccups in service (hiccup_at: service)", i)
			}
			continue
		}
		if _, err := dispatch.Params(p.spec()); err != nil {
			return fmt.Errorf("policies[%d].dispatch: %w", i, err)
		}
	}
	return nil
}

func (p BenchPolicy) spec() config.Dispatch {
	d := config.Dispatch{Params: map[string]any{}}
	for k, v := range p.Dispatch {
		if k == "policy" {
			d.Policy, _ = v.(string)
			continue
		}
		d.Params[k] = v
	}
	return d
}

// MeanService is the mean time a query holds its worker: cost plus
// hiccups (stalls are not counted).
func (c *HedgingConfig) MeanService() float64 {
	return c.Service.Mean() + c.HiccupProb*c.HiccupMs
}

// HoldMean is the mean time a query holds its worker: MeanService, less
// the hiccups when they are spent in the response (hiccup_at: response).
func (c *HedgingConfig) HoldMean() float64 {
	if c.HiccupAt == "response" {
		return c.Service.Mean()
	}
	return c.MeanService()
}

// Rate is the request rate giving utilization u to the primaries alone:
// of the workers' time, as the replicas' capacity is measured.
func (c *HedgingConfig) Rate(u float64) float64 {
	return u * float64(c.Shards*c.Replicas*c.Workers) / (float64(c.Fanout) * c.HoldMean() / 1000)
}

// BenchRun is one arm at one utilization and seed.
type BenchRun struct {
	Policy      string  `json:"policy"`
	Utilization float64 `json:"utilization"`
	Seed        uint64  `json:"seed"`
	// Latencies of the requests after warm-up, ms, at the percentile, the
	// median and the mean.
	Tail   float64 `json:"tail_ms"`
	Median float64 `json:"median_ms"`
	Mean   float64 `json:"mean_ms"`
	// Copies per query sent, and the extra ones (duplicates) per query.
	CopiesPerQuery float64 `json:"copies_per_query"`
	ExtraPerQuery  float64 `json:"extra_per_query"`
	Requests       int     `json:"requests"`
	// Unfinished requests (after warm-up) when the run stopped count as
	// slower than every finished one. An arm is Unstable (docs/hedging.md)
	// when they reach into the percentile (Tail is then unknown, 0), or when
	// Drift, the second half's median latency over the first's (medians: a
	// heavy-tailed service time moves a half's mean by chance), exceeds
	// MaxDrift: its tail is then a property of the run's length.
	Unfinished int     `json:"unfinished"`
	Unstable   bool    `json:"unstable"`
	Drift      float64 `json:"drift"`
	WallS      float64 `json:"wall_s"`
}

// MaxDrift is the largest second-half over first-half median latency of a
// stable arm. A stable queue's halves differ by a few percent over
// thousands of requests; a queue that grows without bound doubles first.
const MaxDrift = 2.0

// RunBench runs one arm: policy p at utilization u with seed.
func (c *HedgingConfig) RunBench(p BenchPolicy, u float64, seed uint64) (BenchRun, error) {
	start := time.Now()
	eng := &Engine{}
	epoch := time.Unix(1_000_000_000, 0)
	rng := rand.New(rand.NewPCG(seed, 0x68656467))  // "hedg"
	resp := rand.New(rand.NewPCG(seed, 0x72657370)) // "resp": response hiccups
	starts, drivers, err := c.benchShards(p, seed, eng, epoch)
	if err != nil {
		return BenchRun{}, err
	}
	// Requests: Poisson arrivals; each queries Fanout distinct shards.
	rate := c.Rate(u)
	total := c.Warmup + c.Requests
	lat := make([]float64, 0, c.Requests)
	var halves [2][]float64 // latencies by the half of the measured arrivals they arrived in
	var queries int
	perm := make([]int, c.Shards)
	for i := range perm {
		perm[i] = i
	}
	var arrive func(n int)
	arrive = func(n int) {
		t0 := eng.Now()
		left := c.Fanout
		var end time.Duration
		if c.Fanout < c.Shards {
			for i := 0; i < c.Fanout; i++ {
				k := i + rng.IntN(c.Shards-i)
				perm[i], perm[k] = perm[k], perm[i]
			}
		}
		for i := 0; i < c.Fanout; i++ {
			x := c.Service.draw(rng)
			draws := []float64{x}
			j := &job{sizes: []int64{0}}
			j.cost = func(cp, _ int) time.Duration {
				for len(draws) <= cp {
					switch c.Copies {
					case "shared":
						draws = append(draws, x)
					case "independent":
						draws = append(draws, c.Service.draw(rng))
					default:
						draws = append(draws, c.Correlation*x+c.Service.draw(rng))
					}
				}
				return time.Duration(draws[cp] * float64(time.Millisecond))
			}
			j.answer = func(j *job, run *copyRun, ok bool) {
				end = max(end, eng.Now())
				left--
				if left == 0 {
					if n >= c.Warmup {
						ms := float64(end-t0) / float64(time.Millisecond)
						lat = append(lat, ms)
						h := &halves[min(1, 2*(n-c.Warmup)/c.Requests)] // by arrival
						*h = append(*h, ms)
					}
				}
			}
			if c.HiccupAt == "response" && c.HiccupProb > 0 {
				hms := time.Duration(c.HiccupMs * float64(time.Millisecond))
				j.after = func(int, int) time.Duration {
					if resp.Float64() < c.HiccupProb {
						return hms
					}
					return 0
				}
			}
			if c.hiccupOf != nil {
				qn := queries
				j.hiccup = func(cp, _ int) bool { return c.hiccupOf(qn, cp) }
			}
			if c.onSend != nil {
				qn := queries
				j.sent = func(cp, r int) { c.onSend(qn, cp, r) }
			}
			if c.onQuery != nil {
				c.onQuery(queries, t0, perm[i], x)
			}
			if c.onAnswer != nil {
				qn, inner := queries, j.answer
				j.answer = func(j *job, run *copyRun, ok bool) { c.onAnswer(qn, eng.Now()); inner(j, run, ok) }
			}
			queries++
			starts[perm[i]](j)
		}
		if n+1 < total {
			eng.After(time.Duration(rng.ExpFloat64()/rate*float64(time.Second)), func() { arrive(n + 1) })
		}
	}
	eng.At(0, func() { arrive(0) })
	// Run until every request is done, or stop an overloaded arm: at most
	// ten times the arrivals' span past the last arrival.
	span := time.Duration(float64(total) / rate * float64(time.Second))
	eng.RunUntil(span * 11)
	run := BenchRun{Policy: p.Label, Utilization: u, Seed: seed, Requests: len(lat), Unfinished: c.Requests - len(lat),
		WallS: time.Since(start).Seconds()}
	c.summarizeBench(&run, lat, halves, drivers, queries)
	return run, nil
}

// benchShards builds one arm's shards: each a fleet of Replicas replicas
// with the arm's capacity limits, and its dispatch (the policy's driver, or
// the idealized hedge). It returns each shard's start function and its
// driver (nil for the idealized hedge).
func (c *HedgingConfig) benchShards(p BenchPolicy, seed uint64, eng *Engine, epoch time.Time) ([]func(*job), []*driver, error) {
	lim := c.limits(p)
	spec := p.spec()
	ideal := spec.Policy == Ideal
	var starts []func(*job)
	drivers := make([]*driver, c.Shards)
	for s := range c.Shards {
		cancel := c.Cancel
		if p.Cancel != "" {
			cancel = p.Cancel
		}
		f := &fleet{eng: eng, keepRunning: cancel == "queued"}
		for r := 0; r < c.Replicas; r++ {
			if err := f.addReplica(lim, seed*1_000_003+uint64(s*c.Replicas+r), epoch); err != nil {
				return nil, nil, err
			}
		}
		if ideal {
			starts = append(starts, newIdealHedge(f).start)
			continue
		}
		params, err := dispatch.Params(spec)
		if err != nil {
			return nil, nil, err
		}
		d, err := newDriver(f, spec.Policy, params, seed^uint64(s+1)*0x9e3779b97f4a7c15)
		if err != nil {
			return nil, nil, err
		}
		drivers[s] = d
		starts = append(starts, d.start)
	}
	return starts, drivers, nil
}

// summarizeBench fills an arm's figures from its measured latencies (lat,
// and by the half of the arrivals they arrived in), its drivers' copy
// counts and the queries sent.
func (c *HedgingConfig) summarizeBench(run *BenchRun, lat []float64, halves [2][]float64, drivers []*driver, queries int) {
	// The unfinished requests are slower than any finished one: the
	// percentile is exact while it does not reach them.
	rank := percentile.Rank(c.Requests, c.Percentile/100)
	if len(halves[0]) > 0 && len(halves[1]) > 0 {
		sort.Float64s(halves[0])
		sort.Float64s(halves[1])
		if m0 := percentile.Of(halves[0], 0.5); m0 > 0 {
			run.Drift = percentile.Of(halves[1], 0.5) / m0
		}
	}
	run.Unstable = rank > len(lat) || run.Drift > MaxDrift
	if len(lat) > 0 {
		sort.Float64s(lat)
		if rank <= len(lat) {
			run.Tail = lat[rank-1] // known, even when the arm is unstable (Summarize reports it so)
		}
		run.Median = percentile.Of(lat, 0.5)
		s := 0.0
		for _, v := range lat {
			s += v
		}
		run.Mean = s / float64(len(lat))
	}
	var copies, extra uint64
	for _, d := range drivers {
		if d != nil {
			copies += d.m.Copies
			extra += d.m.Extra
		}
	}
	run.CopiesPerQuery = float64(copies) / float64(queries)
	run.ExtraPerQuery = float64(extra) / float64(queries)
}

// idealHedge is LÆDGE's Idealized Hedge (its §3.2; docs/hedging.md) for
// one shard of single-worker replicas: a central FIFO queue, hedges onto
// idle replicas, cleanup and pre-emptive cancellation of the copy it knows
// would finish later, all free. Not implementable: a bound over PSQ.
type idealHedge struct {
	f      *fleet
	queue  []*job
	head   int
	leaves []*idealCopy // running copy per replica, nil when idle
}

type idealCopy struct {
	j   *job
	run *copyRun
	end time.Duration
}

// idealJob is the state of one query under the idealized hedge.
type idealJob struct {
	answer func(*job, *copyRun, bool)
	copies int // sent so far
	done   bool
}

func newIdealHedge(f *fleet) *idealHedge {
	return &idealHedge{f: f, leaves: make([]*idealCopy, len(f.reps))}
}

func (h *idealHedge) start(j *job) {
	st := &idealJob{answer: j.answer}
	j.owner = st
	j.answer = func(j *job, run *copyRun, ok bool) { h.finished(j, run) }
	h.queue = append(h.queue, j)
	h.schedule()
}

// finished: a copy ended; the query is answered, its other copies cancelled.
func (h *idealHedge) finished(j *job, run *copyRun) {
	st := j.owner.(*idealJob)
	for r, c := range h.leaves {
		if c != nil && c.j == j {
			if c.run != run {
				h.f.stop(c.run.ops[0], true)
				h.f.drain(c.run.r)
			}
			h.leaves[r] = nil
		}
	}
	if !st.done {
		st.done = true
		st.answer(j, run, true)
	}
	h.schedule()
}

func (h *idealHedge) schedule() {
	for {
		idle := -1
		for r, c := range h.leaves {
			if c == nil {
				idle = r
				break
			}
		}
		waiting := h.head < len(h.queue)
		switch {
		case idle >= 0 && waiting:
			j := h.queue[h.head]
			h.queue[h.head] = nil
			h.head++
			h.run(j, idle)
		case idle >= 0:
			// Hedge the running query with the fewest copies (the oldest
			// first) onto the idle replica, if any runs elsewhere.
			var pick *job
			least := len(h.leaves)
			for _, c := range h.leaves {
				if c != nil {
					if n := h.running(c.j); n < least {
						pick, least = c.j, n
					}
				}
			}
			if pick == nil {
				return
			}
			h.run(pick, idle)
		case waiting:
			// Pre-emptive cancellation: free the replica whose copy of a
			// hedged query would finish last.
			worst := -1
			for r, c := range h.leaves {
				if h.running(c.j) >= 2 && (worst < 0 || c.end > h.leaves[worst].end) {
					worst = r
				}
			}
			if worst < 0 {
				return
			}
			c := h.leaves[worst]
			h.f.stop(c.run.ops[0], true)
			h.leaves[worst] = nil
			h.f.drain(c.run.r)
		default:
			return
		}
	}
}

func (h *idealHedge) running(j *job) int {
	n := 0
	for _, c := range h.leaves {
		if c != nil && c.j == j {
			n++
		}
	}
	return n
}

// run starts a copy of j on idle replica r (one worker: admitted at once).
func (h *idealHedge) run(j *job, r int) {
	st := j.owner.(*idealJob)
	rep := h.f.reps[r]
	tickets, err := rep.model.JoinOps([]capacity.Op{{CostGiven: true, Cost: j.cost(st.copies, 0)}})
	if err != nil {
		panic(fmt.Sprintf("sim: idealized hedge: %v", err))
	}
	st.copies++
	run := j.newRun(st.copies-1, rep)
	run.left = 1
	run.ops = []*op{{ticket: tickets[0], run: run}}
	h.leaves[r] = &idealCopy{j: j, run: run, end: h.f.eng.Now() + tickets[0].Delay()}
	rep.add(capacity.Normal, run.ops)
	h.f.drain(rep)
}

// BenchSummary is one policy at one utilization over the seeds.
type BenchSummary struct {
	Policy      string  `json:"policy"`
	Utilization float64 `json:"utilization"`
	// Tail's median, minimum and maximum over the seeds, ms.
	Tail, TailMin, TailMax float64
	ExtraPerQuery          float64 `json:"extra_per_query"`
	// Unstable counts the seeds whose arm was unstable.
	Unstable int `json:"unstable"`
}

// Summarize groups runs by policy and utilization.
func Summarize(runs []BenchRun) []BenchSummary {
	type key struct {
		p string
		u float64
	}
	groups := map[key][]BenchRun{}
	var order []key
	for _, r := range runs {
		k := key{r.Policy, r.Utilization}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []BenchSummary
	for _, k := range order {
		g := groups[k]
		tails := make([]float64, len(g))
		s := BenchSummary{Policy: k.p, Utilization: k.u}
		for i, r := range g {
			tails[i] = r.Tail
			s.ExtraPerQuery += r.ExtraPerQuery / float64(len(g))
			if r.Unstable {
				s.Unstable++
				tails[i] = math.Inf(1)
			}
		}
		sort.Float64s(tails)
		s.Tail, s.TailMin, s.TailMax = percentile.MedianOfSeeds(tails), tails[0], tails[len(tails)-1]
		// JSON has no infinity: an unstable seed's tail is written as 0
		// and counted in Unstable.
		for _, v := range []*float64{&s.Tail, &s.TailMin, &s.TailMax} {
			if math.IsInf(*v, 1) {
				*v = 0
			}
		}
		out = append(out, s)
	}
	return out
}

// Table renders summaries as markdown: a row per utilization, a column per
// policy, the tail in multiples of the mean service time (median over the
// seeds, and its range).
func (c *HedgingConfig) Table(sums []BenchSummary) string {
	var pols []string
	var us []float64
	cell := map[string]map[float64]BenchSummary{}
	for _, s := range sums {
		if cell[s.Policy] == nil {
			cell[s.Policy] = map[float64]BenchSummary{}
			pols = append(pols, s.Policy)
		}
		if !slices.Contains(us, s.Utilization) {
			us = append(us, s.Utilization)
		}
		cell[s.Policy][s.Utilization] = s
	}
	sort.Float64s(us)
	unit := c.MeanService()
	if c.Unit == "ms" {
		unit = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| load | %s |\n|---:|%s\n", strings.Join(pols, " | "), strings.Repeat("---:|", len(pols)))
	for _, u := range us {
		fmt.Fprintf(&b, "| %.0f%% |", u*100)
		for _, p := range pols {
			s, ok := cell[p][u]
			switch {
			case !ok:
				b.WriteString(" |")
			case s.Unstable*2 > len(c.Seeds):
				b.WriteString(" unstable |")
			case s.Unstable > 0:
				fmt.Fprintf(&b, " %.1f (%.1f–unstable) |", s.Tail/unit, s.TailMin/unit)
			default:
				fmt.Fprintf(&b, " %.1f (%.1f–%.1f) |", s.Tail/unit, s.TailMin/unit, s.TailMax/unit)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
