// Package zoo draws capacity scenarios from families of shapes — the
// scenario zoo of docs/workloads.md, section "Scenario zoo", which lists the
// families and their ranges — with depths relative to each backend's miss
// load in the trace. The ranges are drawn from uniformly, so the zoo holds
// scenarios with margin, tight ones and infeasible ones without anybody
// choosing which.
//
// Generate is pure and deterministic: the same Inputs, seed and family give
// the same scenario, byte for byte (math/rand/v2's PCG seeded from the
// seed). Load (inputs.go) reads the Inputs from a topology and a trace. The
// seeds are split in a development and an evaluation range (seeds.go).
package zoo

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// The families, in the order a seed draws them from.
const (
	FamilyDrop            = "drop"
	FamilyOverlap         = "overlap"
	FamilyDropRecoverDrop = "drop-recover-drop"
	FamilyRamp            = "ramp"
	FamilyRandomWalk      = "random-walk"
	FamilySlowOffPath     = "slow-off-path"
	FamilyPopularDrop     = "popular-drop"
	FamilyRequestRate     = "request-rate"
	FamilyFlapping        = "flapping"
)

// Families lists every family; a seed without a family draws one of them
// uniformly.
var Families = []string{FamilyDrop, FamilyOverlap, FamilyDropRecoverDrop, FamilyRamp, FamilyRandomWalk,
	FamilySlowOffPath, FamilyPopularDrop, FamilyRequestRate, FamilyFlapping}

// draws are the families' drawers (families.go), each with the number of
// backends with a miss load it needs.
var draws = map[string]struct {
	backends int
	draw     func(*drawer) error
}{
	FamilyDrop: {1, (*drawer).drop}, FamilyOverlap: {2, (*drawer).overlap}, FamilyDropRecoverDrop: {2, (*drawer).dropRecoverDrop},
	FamilyRamp: {1, (*drawer).ramp}, FamilyRandomWalk: {1, (*drawer).randomWalk}, FamilySlowOffPath: {2, (*drawer).slowOffPath},
	FamilyPopularDrop: {1, (*drawer).popularDrop}, FamilyRequestRate: {1, (*drawer).requestRate}, FamilyFlapping: {1, (*drawer).flapping},
}

// Backend is what the generator knows of one backend.
type Backend struct {
	Name string
	// Limits are its limits at the start of the run (the topology's).
	Limits config.Limits
	// Load is its miss load under the configured allocation: queries/s
	// reaching it from every app server (the load model of
	// experiment/feasibility, whole trace).
	Load float64
	// QueryRate is its query rate (cacheable and uncacheable) from every
	// app server.
	QueryRate float64
	// ConfiguredMB is its partition under the configured allocation.
	ConfiguredMB int
}

// Inputs are what scenarios are drawn against.
type Inputs struct {
	// Backends in the topology's order.
	Backends []Backend
	// AppServer names the app server whose allocation the loads are under.
	AppServer string
	// Duration is the run's length; Warmup the SLO's warm-up: events start
	// at or after it.
	Duration, Warmup time.Duration
	// SLOLatency is the request P99 objective (slow-off-path keeps a slowed
	// backend's queries well under it).
	SLOLatency time.Duration
}

// Param is one drawn parameter.
type Param struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// Scenario is a drawn scenario.
type Scenario struct {
	Family string  `json:"family"`
	Seed   uint64  `json:"seed"`
	Params []Param `json:"params"`
	// YAML is the scenario file.
	YAML   string `json:"scenario"`
	events []event
}

// The drawn ranges, family by family: docs/workloads.md, "Scenario zoo",
// has them in a table. A drop's depth f sets the backend's rate limit to f ×
// its miss load under the configured allocation; the range runs from a drop
// the configured allocation rides out with 15% to spare (1.15) to one that
// needs the miss load cut by almost two thirds (0.35).
var (
	DropDepth    = [2]float64{0.35, 1.15}
	DeepDepth    = [2]float64{0.35, 0.8}
	ShallowDepth = [2]float64{0.8, 1.15}
	DropRampS    = [2]int{1, 30} // one change a second
	DropHoldS    = [2]int{20, 60}
	GapS         = [2]int{5, 30}      // drop-recover-drop: the first recovery to the second drop
	SlowRampS    = [2]float64{5, 300} // the ramp family's ramps (log-uniform)
	RampHoldS    = [2]int{10, 60}
	// Random walks: min and max relative to the miss load, (max − min)/
	// levels per step, a step every period.
	WalkMin     = [2]float64{0.35, 0.8}
	WalkMax     = [2]float64{1.2, 2.0}
	WalkLevels  = [2]int{4, 8}
	WalkPeriodS = [2]int{5, 20}
	// slow-off-path: an extra latency of a share of the SLO latency, at most
	// what keeps the backend's configured utilization at SlowUtilization;
	// it starts SlowLeadS before the drop and ends as long after recovery.
	SlowSLOShare    = [2]float64{0.1, 0.4}
	SlowUtilization = [2]float64{0.3, 0.7}
	SlowLeadS       = [2]int{0, 10}
	RateFactor      = [2]float64{1.2, 2.0} // request-rate: this factor for RateS
	RateS           = [2]int{20, 60}
	FlapPeriodS     = [2]float64{4, 60} // flapping (log-uniform), FlapDuty of it down
	FlapDuty        = [2]float64{0.3, 0.7}
	FlapCycles      = [2]int{3, 10}
)

const (
	// EndMargin is the time left after the last event, so a recovery is
	// measured before the run ends.
	EndMargin = 10 * time.Second
	// DefaultWarmup is the warm-up when the topology gives no SLO.
	DefaultWarmup = 30 * time.Second
	// MinLoad is the smallest miss load (queries/s) a backend needs to be
	// drawn: a rate relative to nothing would be meaningless.
	MinLoad = 1.0
	// MinRoom is the least time between the warm-up and EndMargin before
	// the end that the families need.
	MinRoom = 30 * time.Second
)

// FamilyIndex is a family's position in Families, or -1.
func FamilyIndex(name string) int {
	for i, f := range Families {
		if f == name {
			return i
		}
	}
	return -1
}

// Generate draws a scenario for the seed: from the family, or, when family
// is "", from one drawn uniformly from the seed. The scenario validates
// against the backends and the run (scenario.Parse); its events start at or
// after the warm-up and end EndMargin before the end of the run.
func Generate(in Inputs, seed uint64, family string) (*Scenario, error) {
	if in.Duration <= 0 {
		return nil, errors.New("duration: the run's length is needed")
	}
	if in.Warmup < 0 || in.Warmup >= in.Duration {
		return nil, fmt.Errorf("warmup: %v is not within the run (%v)", in.Warmup, in.Duration)
	}
	room := in.Duration - EndMargin - in.Warmup
	if room < MinRoom {
		return nil, fmt.Errorf("duration: %v leaves %v between the warm-up (%v) and the last %v; the zoo needs at least %v",
			in.Duration, max(room, 0), in.Warmup, EndMargin, MinRoom)
	}
	d := &drawer{in: in, rng: rand.New(rand.NewPCG(seed, 0x7a6f6f)), // "zoo"
		t0: int(math.Ceil(in.Warmup.Seconds())), room: int(room.Seconds())}
	d.eligible = slices.DeleteFunc(slices.Clone(in.Backends), func(b Backend) bool { return b.Load < MinLoad })
	if len(d.eligible) == 0 {
		return nil, fmt.Errorf("trace: no backend has a miss load of at least %g queries/s to draw a drop against", MinLoad)
	}
	// The family is drawn first, always, so that naming the family a seed
	// would draw gives the same scenario.
	drawn := Families[d.rng.IntN(len(Families))]
	if family == "" {
		family = drawn
	} else if FamilyIndex(family) < 0 {
		return nil, fmt.Errorf("family: %q is not one of %s", family, strings.Join(Families, ", "))
	}
	f := draws[family]
	err := d.atLeast(f.backends)
	if err == nil {
		err = f.draw(d)
	}
	if err != nil {
		return nil, fmt.Errorf("family %s: %w", family, err)
	}
	sc := &Scenario{Family: family, Seed: seed, Params: d.params, events: d.events}
	sc.YAML = render(sc, in, d.walkSeed)
	names := make([]string, len(in.Backends))
	for i, b := range in.Backends {
		names[i] = b.Name
	}
	// The generator's own guard: what it writes must load.
	if _, warns, err := scenario.Parse("generated", []byte(sc.YAML), names, in.Duration); err != nil || len(warns) > 0 {
		return nil, fmt.Errorf("family %s, seed %d: the drawn scenario does not validate (a bug): %v %v", family, seed, err, warns)
	}
	return sc, nil
}

// event is one scenario event; times in whole seconds from the start.
type event struct {
	kind    scenario.Kind
	backend string
	// set and request_rate
	at    int
	field string
	value float64
	// ramp and random walk
	start, end int
	from, to   float64
	// random walk
	period                  int
	step, min, max, initial float64
}

func (e event) time() int {
	if e.kind == scenario.KindSet || e.kind == scenario.KindRequestRate {
		return e.at
	}
	return e.start
}

// render writes the scenario file: the comment block, the seed for random
// walks, the events in time order (one flow mapping a line).
func render(sc *Scenario, in Inputs, walkSeed bool) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Scenario zoo (tracegen scenario generate; docs/workloads.md, \"Scenario zoo\")\n")
	fmt.Fprintf(&b, "# family: %s\n", sc.Family)
	fmt.Fprintf(&b, "# seed: %d\n", sc.Seed)
	fmt.Fprintf(&b, "# run: %v; events from the warm-up (%v) to %v before the end\n", in.Duration, in.Warmup, EndMargin)
	var loads []string
	for _, be := range in.Backends {
		loads = append(loads, fmt.Sprintf("%s=%s", be.Name, num(round2(be.Load))))
	}
	fmt.Fprintf(&b, "# miss loads, queries/s from app server %s under its configured allocation: %s\n", in.AppServer, strings.Join(loads, " "))
	fmt.Fprintf(&b, "# drawn:\n")
	for _, p := range sc.Params {
		v := p.Value
		if f, ok := v.(float64); ok {
			v = num(f)
		}
		fmt.Fprintf(&b, "#   %s: %v\n", p.Name, v)
	}
	if walkSeed {
		fmt.Fprintf(&b, "seed: %d\n", sc.Seed)
	}
	evs := append([]event(nil), sc.events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].time() < evs[j].time() })
	b.WriteString("events:\n")
	for _, e := range evs {
		switch e.kind {
		case scenario.KindSet:
			fmt.Fprintf(&b, "  - {kind: set, at: %ds, backend: %s, set: {%s: %s}}\n", e.at, e.backend, e.field, num(e.value))
		case scenario.KindRamp:
			fmt.Fprintf(&b, "  - {kind: ramp, backend: %s, field: %s, from: %s, to: %s, start: %ds, end: %ds, step: 1s}\n",
				e.backend, e.field, num(e.from), num(e.to), e.start, e.end)
		case scenario.KindRandomWalk:
			fmt.Fprintf(&b, "  - {kind: random_walk, backend: %s, field: %s, period: %ds, step: %s, min: %s, max: %s, initial: %s, start: %ds, end: %ds}\n",
				e.backend, e.field, e.period, num(e.step), num(e.min), num(e.max), num(e.initial), e.start, e.end)
		case scenario.KindRequestRate:
			fmt.Fprintf(&b, "  - {kind: request_rate, at: %ds, factor: %s}\n", e.at, num(e.value))
		}
	}
	return b.String()
}

// num writes a number as YAML reads it back: no exponent, a decimal point
// only with a fraction.
func num(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
