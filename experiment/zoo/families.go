package zoo

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// drawer draws one scenario; every time is in whole seconds from the start
// of the run, every event within [t0, t0 + room].
type drawer struct {
	in       Inputs
	rng      *rand.Rand
	t0, room int
	eligible []Backend // backends with a miss load of at least MinLoad
	params   []Param
	events   []event
	walkSeed bool
}

// record records drawn parameters, name-value pairs, each name after
// prefix and a dot (none when prefix is "").
func (d *drawer) record(prefix string, kv ...any) {
	if prefix != "" {
		prefix += "."
	}
	for i := 0; i+1 < len(kv); i += 2 {
		d.params = append(d.params, Param{Name: prefix + kv[i].(string), Value: kv[i+1]})
	}
}

// setRate is the event setting a backend's rate limit at a time.
func setRate(b string, at int, v float64) event {
	return event{kind: scenario.KindSet, backend: b, field: config.FieldRate, at: at, value: v}
}

func (d *drawer) uniform(r [2]float64) float64 { return r[0] + d.rng.Float64()*(r[1]-r[0]) }

func (d *drawer) logUniform(r [2]float64) float64 {
	lo, hi := math.Log(r[0]), math.Log(r[1])
	return math.Exp(lo + d.rng.Float64()*(hi-lo))
}

func (d *drawer) intIn(r [2]int) int { return r[0] + d.rng.IntN(r[1]-r[0]+1) }

func (d *drawer) coin() bool { return d.rng.IntN(2) == 0 }

// pick draws k distinct eligible backends (fewer when there are fewer),
// leaving out the named ones.
func (d *drawer) pick(k int, except ...string) []Backend {
	var pool []Backend
	for _, b := range d.eligible {
		if !slices.Contains(except, b.Name) {
			pool = append(pool, b)
		}
	}
	var out []Backend
	for _, i := range d.rng.Perm(len(pool))[:min(k, len(pool))] {
		out = append(out, pool[i])
	}
	return out
}

// atLeast is the error of a family that needs n backends with a miss load.
func (d *drawer) atLeast(n int) error {
	if len(d.eligible) >= n {
		return nil
	}
	return fmt.Errorf("needs %d backends with a miss load of at least %g queries/s; the trace gives %d", n, MinLoad, len(d.eligible))
}

// fit shortens the durations and offsets (seconds; a duration stays at
// least 1 s, an offset of 0 stays 0) by one factor until span() fits the
// room: the drawn ranges hold unless the run is too short for them.
func (d *drawer) fit(span func() int, durs ...*int) error {
	for i := 0; i < 50 && span() > d.room; i++ {
		f := float64(d.room) / float64(span())
		for _, x := range durs {
			if *x > 0 {
				*x = max(1, int(float64(*x)*f))
			}
		}
	}
	if span() > d.room {
		return fmt.Errorf("the run leaves %d s between the warm-up and its last %v: too short", d.room, EndMargin)
	}
	return nil
}

// place draws the start of a span of seconds within the room.
func (d *drawer) place(span int) int { return d.t0 + d.rng.IntN(d.room-span+1) }

// drop is one backend's rate limit ramping down to f × its miss load,
// holding, and recovering.
type drop struct {
	b          Backend
	f          float64
	ramp, hold int
}

func (d *drawer) newDrop(b Backend, depth [2]float64) *drop {
	return &drop{b: b, f: round2(d.uniform(depth)), ramp: d.intIn(DropRampS), hold: d.intIn(DropHoldS)}
}

func (dr *drop) span() int { return dr.ramp + dr.hold }

// rateLimits are a drop's rates: it ramps from `from` (the backend's own
// rate limit, or twice its miss load, which does not bind) to f × the miss
// load (never above its own limit) and recovers to its initial rate (0:
// unlimited).
func rateLimits(b Backend, f float64) (from, to, recover float64) {
	to = math.Max(0.01, round2(f*b.Load))
	recover = b.Limits.Rate
	if recover > 0 {
		return recover, math.Min(to, recover), recover
	}
	return math.Max(round2(2*b.Load), to), to, 0
}

func (d *drawer) emitDrop(name string, dr *drop, start int) {
	from, to, rec := rateLimits(dr.b, dr.f)
	end := start + dr.ramp
	d.events = append(d.events,
		event{kind: scenario.KindRamp, backend: dr.b.Name, field: config.FieldRate, from: from, to: to, start: start, end: end},
		setRate(dr.b.Name, end+dr.hold, rec))
	d.record(name, "backend", dr.b.Name, "miss_load_qps", round2(dr.b.Load), "depth", dr.f, "rate", to,
		"start_s", start, "ramp_s", dr.ramp, "hold_s", dr.hold, "recover_s", end+dr.hold)
}

// drop: one backend drops and recovers.
func (d *drawer) drop() error { return d.dropOne(d.pick(1)[0]) }

// popularDrop: the backend with the highest query rate (the first of
// equals) drops.
func (d *drawer) popularDrop() error {
	top := slices.MaxFunc(d.eligible, func(a, b Backend) int { return cmp.Compare(a.QueryRate, b.QueryRate) })
	d.record("popular", "query_rate_qps", round2(top.QueryRate))
	return d.dropOne(top)
}

// dropOne draws and places a single drop of b.
func (d *drawer) dropOne(b Backend) error {
	dr := d.newDrop(b, DropDepth)
	if err := d.fit(dr.span, &dr.ramp, &dr.hold); err != nil {
		return err
	}
	d.emitDrop("drop", dr, d.place(dr.span()))
	return nil
}

// latest is the largest of end(i) for i < n: the span of overlapping parts.
func latest(n int, end func(i int) int) int {
	m := 0
	for i := range n {
		m = max(m, end(i))
	}
	return m
}

// overlap: 2 or 3 backends drop, each starting before the first recovers.
func (d *drawer) overlap() error {
	bs := d.pick(2 + d.rng.IntN(2))
	drops := make([]*drop, len(bs))
	offs := make([]int, len(bs))
	var durs []*int
	for i, b := range bs {
		drops[i] = d.newDrop(b, DropDepth)
		durs = append(durs, &drops[i].ramp, &drops[i].hold)
	}
	for i := 1; i < len(bs); i++ {
		offs[i] = d.rng.IntN(drops[0].span())
		durs = append(durs, &offs[i])
	}
	span := func() int { return latest(len(drops), func(i int) int { return offs[i] + drops[i].span() }) }
	if err := d.fit(span, durs...); err != nil {
		return err
	}
	for i := range offs {
		offs[i] = min(offs[i], drops[0].span()-1) // still overlapping once shortened
	}
	start := d.place(span())
	for i, dr := range drops {
		d.emitDrop(fmt.Sprintf("drop%d", i+1), dr, start+offs[i])
	}
	return nil
}

// dropRecoverDrop: one backend drops and recovers, then another drops.
func (d *drawer) dropRecoverDrop() error {
	bs := d.pick(2)
	a, b := d.newDrop(bs[0], DropDepth), d.newDrop(bs[1], DropDepth)
	gap := d.intIn(GapS)
	span := func() int { return a.span() + gap + b.span() }
	if err := d.fit(span, &a.ramp, &a.hold, &gap, &b.ramp, &b.hold); err != nil {
		return err
	}
	start := d.place(span())
	d.emitDrop("drop1", a, start)
	d.record("", "gap_s", gap)
	d.emitDrop("drop2", b, start+a.span()+gap)
	return nil
}

// ramp: one or two backends ramp down over seconds to minutes, deep or
// shallow, with or without recovery.
func (d *drawer) ramp() error {
	type spec struct {
		b       Backend
		deep    bool
		f       float64
		length  int
		recover bool
		hold    int
	}
	bs := d.pick(1 + d.rng.IntN(2))
	specs := make([]*spec, len(bs))
	offs := make([]int, len(bs))
	var durs []*int
	for i, b := range bs {
		s := &spec{b: b, deep: d.coin()}
		depth := ShallowDepth
		if s.deep {
			depth = DeepDepth
		}
		s.f = round2(d.uniform(depth))
		s.length = max(1, int(math.Round(d.logUniform(SlowRampS))))
		s.recover = d.coin()
		s.hold = d.intIn(RampHoldS)
		specs[i] = s
		durs = append(durs, &s.length, &s.hold)
	}
	if len(specs) > 1 {
		offs[1] = d.rng.IntN(specs[0].length + 1) // the second starts during the first's ramp
		durs = append(durs, &offs[1])
	}
	span := func() int {
		return latest(len(specs), func(i int) int {
			if s := specs[i]; s.recover {
				return offs[i] + s.length + s.hold
			}
			return offs[i] + specs[i].length
		})
	}
	if err := d.fit(span, durs...); err != nil {
		return err
	}
	start := d.place(span())
	for i, s := range specs {
		name := fmt.Sprintf("ramp%d", i+1)
		from, to, rec := rateLimits(s.b, s.f)
		at := start + offs[i]
		d.events = append(d.events, event{kind: scenario.KindRamp, backend: s.b.Name, field: config.FieldRate,
			from: from, to: to, start: at, end: at + s.length})
		d.record(name, "backend", s.b.Name, "miss_load_qps", round2(s.b.Load), "depth", s.f, "deep", s.deep, "rate", to,
			"start_s", at, "ramp_s", s.length, "recovers", s.recover)
		if s.recover {
			d.events = append(d.events, setRate(s.b.Name, at+s.length+s.hold, rec))
			d.record(name, "hold_s", s.hold, "recover_s", at+s.length+s.hold)
		}
	}
	return nil
}

// randomWalk: 2-4 backends' rates walk between bounds relative to their
// miss loads, then recover.
func (d *drawer) randomWalk() error {
	bs := d.pick(2 + d.rng.IntN(3))
	period := d.intIn(WalkPeriodS)
	start := d.t0 + d.rng.IntN(d.room/4+1)
	end := d.t0 + d.room - 1
	d.walkSeed = true
	d.record("walk", "period_s", period, "start_s", start, "end_s", end)
	for i, b := range bs {
		name := fmt.Sprintf("walk%d", i+1)
		lo, hi := round2(d.uniform(WalkMin)), round2(d.uniform(WalkMax))
		levels := d.intIn(WalkLevels)
		minRate := math.Max(0.01, round2(lo*b.Load))
		maxRate := round2(hi * b.Load)
		step := math.Max(0.01, round2((maxRate-minRate)/float64(levels)))
		d.events = append(d.events,
			event{kind: scenario.KindRandomWalk, backend: b.Name, field: config.FieldRate, period: period,
				step: step, min: minRate, max: maxRate, initial: maxRate, start: start, end: end},
			setRate(b.Name, end+1, b.Limits.Rate))
		d.record(name, "backend", b.Name, "miss_load_qps", round2(b.Load), "min_factor", lo, "max_factor", hi,
			"levels", levels, "min", minRate, "max", maxRate)
	}
	return nil
}

// slowLatency is the extra latency (ms) slow-off-path gives a backend: a
// share of the SLO latency, at most what keeps its configured load at
// utilization u of its workers' capacity.
func slowLatency(b Backend, slo float64, share, u float64) float64 {
	x := share * slo
	if l := b.Limits; l.Workers > 0 && b.Load > 0 {
		x = math.Min(x, float64(l.Workers)*1000*u/b.Load-l.HiccupProb*l.HiccupMs)
	}
	return math.Round(x*10) / 10
}

// slowOffPath: one backend gets much slower, its capacity still enough,
// while another drops.
func (d *drawer) slowOffPath() error {
	dr := d.newDrop(d.pick(1)[0], DropDepth)
	share, u := d.uniform(SlowSLOShare), d.uniform(SlowUtilization)
	slo := float64(d.in.SLOLatency) / float64(1e6)
	var candidates []Backend
	for _, b := range d.eligible {
		if b.Name != dr.b.Name && slowLatency(b, slo, share, u) > b.Limits.ExtraLatencyMs {
			candidates = append(candidates, b)
		}
	}
	if len(candidates) == 0 {
		return errors.New("no backend besides the dropped one can be slowed down with its capacity still enough")
	}
	s := candidates[d.rng.IntN(len(candidates))]
	x := slowLatency(s, slo, share, u)
	lead, lag := d.intIn(SlowLeadS), d.intIn(SlowLeadS)
	span := func() int { return lead + dr.span() + lag }
	if err := d.fit(span, &lead, &dr.ramp, &dr.hold, &lag); err != nil {
		return err
	}
	start := d.place(span())
	end := start + span()
	d.events = append(d.events,
		event{kind: scenario.KindSet, backend: s.Name, field: config.FieldExtraLatencyMs, at: start, value: x},
		event{kind: scenario.KindSet, backend: s.Name, field: config.FieldExtraLatencyMs, at: end, value: s.Limits.ExtraLatencyMs})
	d.record("slow", "backend", s.Name, "slo_share", round2(share), "utilization", round2(u), "extra_latency_ms", x,
		"start_s", start, "end_s", end)
	d.emitDrop("drop", dr, start+lead)
	return nil
}

// requestRate: the request rate rises by a factor for a while, optionally
// with a shallow drop during it.
func (d *drawer) requestRate() error {
	factor := round2(d.uniform(RateFactor))
	length := d.intIn(RateS)
	var dr *drop
	off := 0
	if d.coin() {
		dr = d.newDrop(d.pick(1)[0], ShallowDepth)
		off = d.rng.IntN(length/2 + 1)
	}
	span := func() int {
		if dr == nil {
			return length
		}
		return max(length, off+dr.span())
	}
	durs := []*int{&length, &off}
	if dr != nil {
		durs = append(durs, &dr.ramp, &dr.hold)
	}
	if err := d.fit(span, durs...); err != nil {
		return err
	}
	if dr != nil {
		off = min(off, length-1) // the drop starts during the rise
	}
	start := d.place(span())
	d.events = append(d.events,
		event{kind: scenario.KindRequestRate, at: start, value: factor},
		event{kind: scenario.KindRequestRate, at: start + length, value: 1})
	d.record("rate", "factor", factor, "start_s", start, "end_s", start+length, "with_drop", dr != nil)
	if dr != nil {
		d.emitDrop("drop", dr, start+off)
	}
	return nil
}

// flapping: one backend's rate limit drops at once to f × its miss load
// and comes back, period after period.
func (d *drawer) flapping() error {
	b := d.pick(1)[0]
	f := round2(d.uniform(DropDepth))
	period := max(2, int(math.Round(d.logUniform(FlapPeriodS))))
	duty := d.uniform(FlapDuty)
	cycles := d.intIn(FlapCycles)
	if fit := d.room / period; cycles > fit {
		cycles = max(fit, 2)
	}
	if cycles*period > d.room { // a short run: two shorter periods
		period = d.room / cycles
	}
	if period < 2 {
		return fmt.Errorf("the run leaves %d s for two periods of flapping: too short", d.room)
	}
	down := min(period-1, max(1, int(math.Round(duty*float64(period)))))
	_, to, rec := rateLimits(b, f)
	start := d.place(cycles * period)
	for c := range cycles {
		at := start + c*period
		d.events = append(d.events, setRate(b.Name, at, to), setRate(b.Name, at+down, rec))
	}
	d.record("flap", "backend", b.Name, "miss_load_qps", round2(b.Load), "depth", f, "rate", to,
		"period_s", period, "down_s", down, "cycles", cycles, "start_s", start)
	return nil
}
