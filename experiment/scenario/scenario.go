// Package scenario reads capacity scenarios — timelines of changes to the
// backends' limits, applied through their admin API (PUT /admin/limits)
// while a trace is replayed (paper Fig. 7, 10, 11, 12) — validates them
// completely before anything starts, and expands them into a deterministic
// list of changes. The file format: docs/workloads.md, section "Scenarios".
//
// A request_rate event changes no backend: the trace carries it (tracegen
// synth --rate-schedule, built from RateSchedule), so Expand leaves it out
// and nothing applies it through the admin API.
//
// Parsing and expansion are pure; apply.go is the I/O shell.
package scenario

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

	"gopkg.in/yaml.v3"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// Kind is an event kind.
type Kind string

// Event kinds.
const (
	KindSet        Kind = "set"
	KindRamp       Kind = "ramp"
	KindRandomWalk Kind = "random_walk"
	// KindRequestRate multiplies the trace's base arrival rate by Factor
	// from At until the next request_rate event; the trace carries it.
	KindRequestRate Kind = "request_rate"
)

// kindNames lists the event kinds for error messages.
const kindNames = "set, ramp, random_walk, request_rate"

// FieldValue is one limit field and its new value.
type FieldValue struct {
	Field string
	Value float64
}

// Event is one validated entry of the timeline.
type Event struct {
	// Line is the event's line in the file.
	Line     int
	Kind     Kind
	Backends []string

	// set and request_rate
	At  time.Duration
	Set []FieldValue

	// request_rate
	Factor float64

	// ramp and random_walk
	Field      string
	Start, End time.Duration
	// HasEnd is false for a random walk that runs to the end of the run.
	HasEnd bool

	// ramp
	From, To float64
	Step     time.Duration

	// random_walk
	Period   time.Duration
	StepSize float64
	Min, Max float64
	Initial  *float64
}

// Scenario is a validated scenario file.
type Scenario struct {
	File string
	// Seed is the file's seed, if it has one.
	Seed   *uint64
	Events []Event
}

// Change is one step of the expanded timeline: at At, set Fields on every
// replica of Backend.
type Change struct {
	At      time.Duration
	Backend string
	Fields  []FieldValue
	// Line and Kind name the event that produced the change.
	Line int
	Kind Kind
}

// Error is a validation error at a line of a scenario file.
type Error struct {
	File   string
	Line   int
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason) }

// Load reads and validates a scenario file. backends are the names the
// topology knows; duration is the run's length (0 when unknown) and only
// produces warnings for events beyond it.
func Load(path string, backends []string, duration time.Duration) (*Scenario, []string, error) {
	b, err := config.ReadConfigFile(path)
	var cerr *config.Error
	if errors.As(err, &cerr) {
		return nil, nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("scenario: %w", err) // it names the file
	}
	return Parse(path, b, backends, duration)
}

var allowedKeys = map[Kind][]string{
	KindSet:         {"kind", "backend", "backends", "at", "set"},
	KindRamp:        {"kind", "backend", "backends", "field", "from", "to", "start", "end", "step"},
	KindRandomWalk:  {"kind", "backend", "backends", "field", "period", "step", "min", "max", "initial", "start", "end"},
	KindRequestRate: {"kind", "at", "factor"},
}

type parser struct {
	file     string
	backends []string // the topology's
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	return p.lineErr(n.Line, format, args...)
}

func (p *parser) lineErr(line int, format string, args ...any) error {
	return &Error{File: p.file, Line: line, Reason: fmt.Sprintf(format, args...)}
}

// Parse validates a scenario document; file names it in errors.
func Parse(file string, data []byte, backends []string, duration time.Duration) (*Scenario, []string, error) {
	p := &parser{file: file, backends: backends}
	if err := config.CheckSize(data); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %v", file, err)
	}
	if err := config.CheckBounds(&doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, &Error{File: file, Line: max(doc.Line, 1), Reason: "a scenario is a mapping with an events list"}
	}
	root := doc.Content[0]
	sc := &Scenario{File: file}
	vals, err := p.keys(root, []string{"seed", "events"})
	if err != nil {
		return nil, nil, err
	}
	if v := vals["seed"]; v != nil {
		s, err := strconv.ParseUint(v.Value, 10, 64)
		if v.Kind != yaml.ScalarNode || err != nil {
			return nil, nil, p.errf(v, "seed: %q is not a non-negative integer", v.Value)
		}
		sc.Seed = &s
	}
	events := vals["events"]
	if events == nil || events.Kind != yaml.SequenceNode {
		return nil, nil, p.errf(root, "events: a list of events is required")
	}
	for _, en := range events.Content {
		ev, err := p.event(en)
		if err != nil {
			return nil, nil, err
		}
		sc.Events = append(sc.Events, ev)
	}
	if err := p.conflicts(sc.Events); err != nil {
		return nil, nil, err
	}
	return sc, sc.warnings(duration), nil
}

// keys reads a mapping's values by key, rejecting unknown and repeated keys.
func (p *parser) keys(m *yaml.Node, allowed []string) (map[string]*yaml.Node, error) {
	vals := map[string]*yaml.Node{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if !slices.Contains(allowed, k.Value) {
			return nil, p.errf(k, "unknown key %q (allowed: %s)", k.Value, strings.Join(allowed, ", "))
		}
		if vals[k.Value] != nil {
			return nil, p.errf(k, "%s is given twice", k.Value)
		}
		vals[k.Value] = m.Content[i+1]
	}
	return vals, nil
}

func (p *parser) event(n *yaml.Node) (Event, error) {
	ev := Event{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return ev, p.errf(n, "an event is a mapping with a kind (%s)", kindNames)
	}
	var kind *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" {
			kind = n.Content[i+1]
		}
	}
	if kind == nil {
		return ev, p.errf(n, "event has no kind (%s)", kindNames)
	}
	ev.Kind = Kind(kind.Value)
	allowed, ok := allowedKeys[ev.Kind]
	if !ok {
		return ev, p.errf(kind, "kind %q is not one of %s", kind.Value, kindNames)
	}
	vals, err := p.keys(n, allowed)
	if err != nil {
		return ev, err
	}
	f := &fields{p: p, ev: n, vals: vals}
	switch ev.Kind {
	case KindRequestRate: // the trace's rate: no backend
		f.rateEvent(&ev)
	case KindSet:
		ev.Backends = f.backendList()
		f.setEvent(&ev)
	case KindRamp:
		ev.Backends = f.backendList()
		f.rampEvent(&ev)
	case KindRandomWalk:
		ev.Backends = f.backendList()
		f.walkEvent(&ev)
	}
	return ev, f.err
}

// fields reads the keys of one event. The first error sticks: every later
// read returns nothing, so the event's first problem is the one reported.
type fields struct {
	p    *parser
	ev   *yaml.Node
	vals map[string]*yaml.Node
	err  error
}

func (f *fields) fail(n *yaml.Node, format string, args ...any) {
	if f.err == nil {
		f.err = f.p.errf(n, format, args...)
	}
}

// node is the key's value: nil when absent (an error when required) or
// after an error.
func (f *fields) node(key string, required bool) *yaml.Node {
	n := f.vals[key]
	if n == nil && required {
		f.fail(f.ev, "%s event needs %s", f.vals["kind"].Value, key)
	}
	if f.err != nil {
		return nil
	}
	return n
}

// duration reads the key as a non-negative duration; its node is nil when
// it is absent or an error stopped the reading.
func (f *fields) duration(key string, required bool) (time.Duration, *yaml.Node) {
	n := f.node(key, required)
	if n == nil {
		return 0, nil
	}
	d, err := time.ParseDuration(n.Value)
	switch {
	case n.Kind != yaml.ScalarNode || err != nil:
		f.fail(n, "%s: %q is not a duration (use e.g. 90s, 5m, 1h30m)", key, n.Value)
	case d < 0:
		f.fail(n, "%s: %v is negative", key, d)
	default:
		return d, n
	}
	return 0, nil
}

// positive reads the key as a positive duration (required).
func (f *fields) positive(key string) time.Duration {
	d, n := f.duration(key, true)
	if n != nil && d <= 0 {
		f.fail(n, "%s: %v must be positive", key, d)
	}
	return d
}

// number reads the key as a finite number; its node is nil when it is
// absent or an error stopped the reading.
func (f *fields) number(key string, required bool) (float64, *yaml.Node) {
	n := f.node(key, required)
	if n == nil {
		return 0, nil
	}
	if v := f.num(n, key); f.err == nil {
		return v, n
	}
	return 0, nil
}

// value reads the key (required) as a value of the limit field.
func (f *fields) value(key, field string) float64 {
	v, n := f.number(key, true)
	if n != nil {
		f.check(n, field, v)
	}
	return v
}

// check validates a value for a field with the backends' own admin API
// parser, so scenarios accept exactly what PUT /admin/limits accepts.
func (f *fields) check(n *yaml.Node, field string, v float64) {
	if f.err != nil {
		return
	}
	body := fmt.Sprintf(`{%q: %s}`, field, strconv.FormatFloat(v, 'g', -1, 64))
	if _, err := capacity.ParsePatch([]byte(body)); err != nil {
		var fe *capacity.FieldError
		if errors.As(err, &fe) {
			f.fail(n, "%s", fe.Error())
		} else {
			f.fail(n, "%s: %v", field, err)
		}
	}
}

// field reads the field key: a limit's name.
func (f *fields) field() string {
	if n := f.node("field", true); n != nil {
		return f.limit(n)
	}
	return ""
}

func (f *fields) backendList() []string {
	one, many := f.vals["backend"], f.vals["backends"]
	var nodes []*yaml.Node
	switch {
	case one != nil && many != nil:
		f.fail(many, "give backend or backends, not both")
	case one != nil:
		nodes = []*yaml.Node{one}
	case many != nil && (many.Kind != yaml.SequenceNode || len(many.Content) == 0):
		f.fail(many, "backends: a non-empty list of backend names is required")
	case many != nil:
		nodes = many.Content
	default:
		f.fail(f.ev, "event names no backend (backend: NAME or backends: [NAME, ...])")
	}
	var out []string
	for _, b := range nodes {
		switch {
		case b.Kind != yaml.ScalarNode:
			f.fail(b, "a backend is a name")
		case !slices.Contains(f.p.backends, b.Value):
			f.fail(b, "backend %q is not in the topology (backends: %s)", b.Value, strings.Join(f.p.backends, ", "))
		case slices.Contains(out, b.Value):
			f.fail(b, "backend %q is listed twice", b.Value)
		}
		if f.err != nil {
			return nil
		}
		out = append(out, b.Value)
	}
	return out
}

// num reads a node as a finite number, the value of key.
func (f *fields) num(n *yaml.Node, key string) float64 {
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	switch {
	case n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float"):
		f.fail(n, "%s: %q is not a number", key, n.Value)
	case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
		f.fail(n, "%s: %q is not a finite number", key, n.Value)
	}
	return v
}

// limit reads a node as a limit field's name.
func (f *fields) limit(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode || !slices.Contains(capacity.Fields, n.Value) {
		f.fail(n, "field %q is not a backend limit (fields: %s)", n.Value, strings.Join(capacity.Fields, ", "))
	}
	return n.Value
}

func isInteger(field string) bool {
	f, _, ok := config.LimitByName(field)
	return ok && f.Int
}

func (f *fields) setEvent(e *Event) {
	e.At, _ = f.duration("at", true)
	set := f.node("set", true)
	if set == nil {
		return
	}
	if set.Kind != yaml.MappingNode || len(set.Content) == 0 {
		f.fail(set, "set: a mapping of fields to values is required, e.g. {rate: 300}")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(set.Content) && f.err == nil; i += 2 {
		k, n := set.Content[i], set.Content[i+1]
		name := f.limit(k)
		if seen[name] {
			f.fail(k, "%s is given twice", name)
		}
		seen[name] = true
		v := f.num(n, name)
		f.check(n, name, v)
		e.Set = append(e.Set, FieldValue{Field: name, Value: v})
	}
}

func (f *fields) rateEvent(e *Event) {
	e.At, _ = f.duration("at", true)
	factor, n := f.number("factor", true)
	if n != nil && !(factor > 0) {
		f.fail(n, "factor: %v must be positive (it multiplies the trace's request rate)", factor)
	}
	e.Factor = factor
}

// interval reads start and end, required or not.
func (f *fields) interval(e *Event, required bool) {
	e.Start, _ = f.duration("start", required)
	end, n := f.duration("end", required)
	if n != nil {
		if end <= e.Start {
			f.fail(n, "end %v is not after start %v", end, e.Start)
		}
		e.End, e.HasEnd = end, true
	}
}

func (f *fields) rampEvent(e *Event) {
	e.Field = f.field()
	e.From = f.value("from", e.Field)
	e.To = f.value("to", e.Field)
	f.interval(e, true)
	e.Step = f.positive("step")
}

func (f *fields) walkEvent(e *Event) {
	e.Field = f.field()
	e.Period = f.positive("period")
	e.StepSize, _ = f.number("step", true)
	e.Min = f.value("min", e.Field)
	e.Max = f.value("max", e.Field)
	switch {
	case f.err != nil:
		return
	case !(e.StepSize > 0):
		f.fail(f.vals["step"], "step: %v must be positive", e.StepSize)
	case isInteger(e.Field) && e.StepSize != math.Trunc(e.StepSize):
		f.fail(f.vals["step"], "step: %v must be a whole number for %s", e.StepSize, e.Field)
	case e.Min >= e.Max:
		f.fail(f.vals["max"], "max %v is not above min %v", e.Max, e.Min)
	}
	if v, n := f.number("initial", false); n != nil {
		if v < e.Min || v > e.Max {
			f.fail(n, "initial %v is outside [min %v, max %v]", v, e.Min, e.Max)
		}
		f.check(n, e.Field, v)
		e.Initial = &v
	}
	f.interval(e, false)
}

// conflicts rejects ramps and walks that overlap on the same backend and
// field, and sets of a field that a ramp or walk is driving at that time.
func (p *parser) conflicts(events []Event) error {
	type span struct {
		ev         *Event
		start, end time.Duration // end < 0: open
	}
	spans := map[string][]span{}
	key := func(b, f string) string { return b + "\x00" + f }
	for i := range events {
		e := &events[i]
		if e.Kind != KindRamp && e.Kind != KindRandomWalk {
			continue
		}
		end := e.End
		if !e.HasEnd {
			end = -1
		}
		for _, b := range e.Backends {
			k := key(b, e.Field)
			for _, o := range spans[k] {
				if overlaps(e.Start, end, o.start, o.end) {
					return p.lineErr(e.Line, "%s of %s.%s from %v%s overlaps the %s at line %d (%v%s)",
						e.Kind, b, e.Field, e.Start, untilStr(end), o.ev.Kind, o.ev.Line, o.start, untilStr(o.end))
				}
			}
			spans[k] = append(spans[k], span{e, e.Start, end})
		}
	}
	setAt := map[string]int{} // what is set at a time → the line that sets it
	alsoSet := func(e *Event, what string) error {
		k := what + "\x00" + e.At.String()
		if line, dup := setAt[k]; dup {
			return p.lineErr(e.Line, "%s is also set at %v by line %d", what, e.At, line)
		}
		setAt[k] = e.Line
		return nil
	}
	for i := range events {
		e := &events[i]
		if e.Kind == KindRequestRate {
			if err := alsoSet(e, "the request rate"); err != nil {
				return err
			}
		}
		for _, b := range e.Backends {
			for _, fv := range e.Set { // a set event's
				for _, o := range spans[key(b, fv.Field)] {
					if e.At >= o.start && (o.end < 0 || e.At <= o.end) {
						return p.lineErr(e.Line, "set of %s.%s at %v falls within the %s at line %d (%v%s)",
							b, fv.Field, e.At, o.ev.Kind, o.ev.Line, o.start, untilStr(o.end))
					}
				}
				if err := alsoSet(e, b+"."+fv.Field); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func overlaps(s1, e1, s2, e2 time.Duration) bool {
	before := func(a, b time.Duration) bool { return b < 0 || a < b } // a < end b
	return before(s1, e2) && before(s2, e1)
}

func untilStr(end time.Duration) string {
	if end < 0 {
		return " to the end of the run"
	}
	return " to " + end.String()
}

// warnings lists events that reach beyond the run's duration.
func (s *Scenario) warnings(duration time.Duration) []string {
	if duration <= 0 {
		return nil
	}
	var out []string
	w := func(line int, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: %s", s.File, line, fmt.Sprintf(format, args...)))
	}
	for _, e := range s.Events {
		timed := e.Kind == KindSet || e.Kind == KindRequestRate
		switch {
		case timed && e.At >= duration:
			w(e.Line, "%s at %v is not before the end of the run (%v); it will not be applied", e.Kind, e.At, duration)
		case timed:
		case e.Start >= duration:
			w(e.Line, "%s starts at %v, not before the end of the run (%v); it will not be applied", e.Kind, e.Start, duration)
		case e.HasEnd && e.End > duration:
			w(e.Line, "%s ends at %v, after the end of the run (%v); it is cut short", e.Kind, e.End, duration)
		}
	}
	return out
}

// BackendField names one limit of one backend.
type BackendField struct {
	Backend, Field string
}

// NeedsInitial lists the (backend, field) pairs of random walks without an
// initial value: their starting point must be read from the backend.
func (s *Scenario) NeedsInitial() []BackendField {
	var out []BackendField
	for _, e := range s.Events {
		if e.Kind == KindRandomWalk && e.Initial == nil {
			for _, b := range e.Backends {
				out = append(out, BackendField{b, e.Field})
			}
		}
	}
	return out
}

// RateChange is one step of the request-rate schedule: from At on, the
// trace's base arrival rate times Factor.
type RateChange struct {
	At     time.Duration
	Factor float64
	// Line is the request_rate event's line in the file.
	Line int
}

// RateSchedule returns the request_rate events in time order: the factor is
// 1 before the first and each holds until the next. Empty when the scenario
// does not change the request rate.
func (s *Scenario) RateSchedule() []RateChange {
	var out []RateChange
	for _, e := range s.Events {
		if e.Kind == KindRequestRate {
			out = append(out, RateChange{At: e.At, Factor: e.Factor, Line: e.Line})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// RateScheduleSpec writes a schedule as tracegen synth --rate-schedule
// takes it ("60s:1.5,1m40s:1"); "" for an empty one.
func RateScheduleSpec(rs []RateChange) string {
	steps := make([]synth.RateStep, len(rs))
	for i, r := range rs {
		steps[i] = synth.RateStep{At: r.At, Factor: r.Factor}
	}
	return synth.FormatRateSchedule(steps)
}

// Expand returns the timeline's changes before duration (> 0), ordered by
// time and, at equal times, by position in the file. Random walks draw
// from a generator seeded by (seed, event line), so an event's walk does not
// change when other events are added; initial gives the starting values of
// walks without an initial value (NeedsInitial). Integer fields (workers,
// queue_limit) are rounded; a ramp or walk step that leaves the value
// unchanged produces no change. request_rate events change no backend and
// produce none (RateSchedule lists them).
func (s *Scenario) Expand(duration time.Duration, seed uint64, initial map[BackendField]float64) ([]Change, error) {
	if duration <= 0 {
		return nil, errors.New("scenario: the run's duration is needed to expand the timeline")
	}
	var out []Change
	add := func(c Change) {
		if c.At < duration {
			out = append(out, c)
		}
	}
	round := func(field string, v float64) float64 {
		if isInteger(field) {
			return math.Round(v)
		}
		return v
	}
	for _, e := range s.Events {
		switch e.Kind {
		case KindSet:
			for _, b := range e.Backends {
				add(Change{At: e.At, Backend: b, Fields: e.Set, Line: e.Line, Kind: e.Kind})
			}
		case KindRamp:
			for _, b := range e.Backends {
				last := math.NaN()
				for t := e.Start; ; t += e.Step {
					if t > e.End {
						t = e.End
					}
					frac := float64(t-e.Start) / float64(e.End-e.Start)
					v := round(e.Field, e.From+(e.To-e.From)*frac)
					if v != last {
						add(Change{At: t, Backend: b, Fields: []FieldValue{{e.Field, v}}, Line: e.Line, Kind: e.Kind})
						last = v
					}
					if t == e.End {
						break
					}
				}
			}
		case KindRandomWalk:
			rng := rand.New(rand.NewPCG(seed, uint64(e.Line)))
			cur := make([]float64, len(e.Backends))
			for i, b := range e.Backends {
				v, ok := initial[BackendField{b, e.Field}]
				if e.Initial != nil {
					v, ok = *e.Initial, true // within [min, max]
				} else if !ok {
					return nil, fmt.Errorf("%s:%d: the current %s of %s is needed to start the random walk", s.File, e.Line, e.Field, b)
				}
				cur[i] = math.Min(math.Max(v, e.Min), e.Max)
				if cur[i] != v || e.Initial != nil { // an initial value is always sent
					add(Change{At: e.Start, Backend: b, Fields: []FieldValue{{e.Field, cur[i]}}, Line: e.Line, Kind: e.Kind})
				}
			}
			end := duration
			if e.HasEnd && e.End < end {
				end = e.End
			}
			for t := e.Start + e.Period; t <= end; t += e.Period {
				for i, b := range e.Backends {
					step := e.StepSize
					if rng.Uint64()&1 == 0 {
						step = -step
					}
					v := round(e.Field, math.Min(math.Max(cur[i]+step, e.Min), e.Max))
					if v != cur[i] {
						cur[i] = v
						add(Change{At: t, Backend: b, Fields: []FieldValue{{e.Field, v}}, Line: e.Line, Kind: e.Kind})
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}
