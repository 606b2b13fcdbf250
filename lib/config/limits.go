package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/robinhoodcache/robinhood/schema"
)

// Limits is a backend's capacity (docs/backends.md): the topology's
// backends[].limits, the admin API's GET/PUT /admin/limits body, and what a
// scenario sets. Its ranges and defaults are the schema's ($defs/limits).
type Limits struct {
	// Workers is the number of operations that may be in service at once.
	Workers int `json:"workers"`
	// Rate is the token-bucket rate in operations per second; 0 means unlimited.
	Rate float64 `json:"rate"`
	// ExtraLatencyMs is added to the service time of every operation, while
	// it holds its worker.
	ExtraLatencyMs float64 `json:"extra_latency_ms"`
	// HiccupProb is the probability that an operation takes HiccupMs longer.
	HiccupProb float64 `json:"hiccup_prob"`
	// HiccupMs is the length of a hiccup.
	HiccupMs float64 `json:"hiccup_ms"`
	// CostMs is the mean inherent cost P of a query (exponential), drawn
	// from the query's key: every copy of a query costs the same on any
	// replica. 0 means none.
	CostMs float64 `json:"cost_ms"`
	// StallProb is the probability that admitting an operation stalls the
	// whole replica for StallMs (no admission, every operation in service
	// finishes StallMs later).
	StallProb float64 `json:"stall_prob"`
	// StallMs is the length of a whole-replica stall.
	StallMs float64 `json:"stall_ms"`
	// QueueLimit bounds the waiting operations: a batch arriving while the
	// queue holds QueueLimit or more operations is rejected. 0 means unbounded.
	QueueLimit int `json:"queue_limit"`
	// PurgeDelayMs is how long a purge takes to reach the replica: until
	// then the purged queries may still be admitted and served.
	PurgeDelayMs float64 `json:"purge_delay_ms"`
	// PurgeCostMs is the worker time stopping a running query costs: a
	// stopped query holds its worker this much longer (at most what it
	// still had to run). Purging a queued query is free.
	PurgeCostMs float64 `json:"purge_cost_ms"`
}

// LimitsDef is the schema definition of Limits.
const LimitsDef = schema.Topology + "#/$defs/limits"

// Limit field names, in the order of the schema.
const (
	FieldWorkers        = "workers"
	FieldRate           = "rate"
	FieldExtraLatencyMs = "extra_latency_ms"
	FieldHiccupProb     = "hiccup_prob"
	FieldHiccupMs       = "hiccup_ms"
	FieldCostMs         = "cost_ms"
	FieldStallProb      = "stall_prob"
	FieldStallMs        = "stall_ms"
	FieldQueueLimit     = "queue_limit"
	FieldPurgeDelayMs   = "purge_delay_ms"
	FieldPurgeCostMs    = "purge_cost_ms"
)

// LimitField is one limit field: the one table every reader and writer of
// limits goes through (the topology's limits, bin/backend's flags, the admin
// API, scenarios, the simulator, the oracle's phases). Adding a limit is a
// field of Limits, its schema entry ($defs/limits) and a row here.
type LimitField struct {
	// Name is the field's name in the schema, the admin API and scenarios.
	Name string
	// Int marks an integer field (values are rounded when set).
	Int bool
	// Help says what it is, with its unit (bin/backend's flag help).
	Help string
	ptrF func(*Limits) *float64
	ptrI func(*Limits) *int
}

// Flag is the field's command-line flag: its name with '-' for '_'.
func (f LimitField) Flag() string { return strings.ReplaceAll(f.Name, "_", "-") }

// Get returns the field of l as a float64.
func (f LimitField) Get(l Limits) float64 {
	if f.Int {
		return float64(*f.ptrI(&l))
	}
	return *f.ptrF(&l)
}

// Set sets the field of l (an integer field to v rounded).
func (f LimitField) Set(l *Limits, v float64) {
	if f.Int {
		*f.ptrI(l) = int(math.Round(v))
		return
	}
	*f.ptrF(l) = v
}

// LimitTable has every limit field, in the order of the schema.
var LimitTable = []LimitField{
	{Name: FieldWorkers, Int: true, Help: "queries in service at once", ptrI: func(l *Limits) *int { return &l.Workers }},
	{Name: FieldRate, Help: "rate limit in queries/s, token bucket, 0 = unlimited", ptrF: func(l *Limits) *float64 { return &l.Rate }},
	{Name: FieldExtraLatencyMs, Help: "extra service time per query, ms", ptrF: func(l *Limits) *float64 { return &l.ExtraLatencyMs }},
	{Name: FieldHiccupProb, Help: "probability that a query hiccups", ptrF: func(l *Limits) *float64 { return &l.HiccupProb }},
	{Name: FieldHiccupMs, Help: "length of a hiccup, ms", ptrF: func(l *Limits) *float64 { return &l.HiccupMs }},
	{Name: FieldCostMs, Help: "mean inherent cost of a query, ms, drawn from its key: the same for every copy on any replica, 0 = none", ptrF: func(l *Limits) *float64 { return &l.CostMs }},
	{Name: FieldStallProb, Help: "probability that admitting a query stalls the whole replica", ptrF: func(l *Limits) *float64 { return &l.StallProb }},
	{Name: FieldStallMs, Help: "length of a whole-replica stall, ms", ptrF: func(l *Limits) *float64 { return &l.StallMs }},
	{Name: FieldQueueLimit, Int: true, Help: "queue bound: batches arriving while this many queries wait are rejected, 0 = unbounded", ptrI: func(l *Limits) *int { return &l.QueueLimit }},
	{Name: FieldPurgeDelayMs, Help: "time a purge takes to reach the replica, ms (the purged queries may start meanwhile)", ptrF: func(l *Limits) *float64 { return &l.PurgeDelayMs }},
	{Name: FieldPurgeCostMs, Help: "worker time stopping a running query costs, ms (at most what it had left)", ptrF: func(l *Limits) *float64 { return &l.PurgeCostMs }},
}

// LimitFields lists every limit field name, in the order of LimitTable.
var LimitFields = func() []string {
	out := make([]string, len(LimitTable))
	for i, f := range LimitTable {
		out[i] = f.Name
	}
	return out
}()

// LimitByName returns the row of a limit field.
func LimitByName(name string) (LimitField, int, bool) {
	for i, f := range LimitTable {
		if f.Name == name {
			return f, i, true
		}
	}
	return LimitField{}, -1, false
}

// DefaultLimits are the schema's defaults.
func DefaultLimits() Limits {
	l, err := ReadLimits(map[string]any{}, "")
	if err != nil {
		panic(err)
	}
	return l
}

// ReadLimits validates a limits document (a subset of the fields; the rest
// take the schema's defaults) and returns it typed.
func ReadLimits(doc map[string]any, path string) (Limits, error) {
	norm, err := Default().Read(LimitsDef, doc, path)
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	return l, decode(norm, &l)
}

// Validate checks every field against the schema.
func (l Limits) Validate() error {
	_, err := ReadLimits(l.Doc(), "")
	return err
}

// Doc is l as a document (field name → value).
func (l Limits) Doc() map[string]any {
	out := make(map[string]any, len(LimitTable))
	for _, f := range LimitTable {
		if f.Int {
			out[f.Name] = int64(*f.ptrI(&l))
		} else {
			out[f.Name] = *f.ptrF(&l)
		}
	}
	return out
}

// Get returns the value of a field by name, as a float64 (the metrics
// export every limit this way).
func (l Limits) Get(field string) (float64, bool) {
	f, _, ok := LimitByName(field)
	if !ok {
		return 0, false
	}
	return f.Get(l), true
}

// Attrs is l as alternating field names and values, every limit in the
// order of LimitTable: the log attributes of a line that states them.
func (l Limits) Attrs() []any {
	out := make([]any, 0, 2*len(LimitTable))
	for _, f := range LimitTable {
		if f.Int {
			out = append(out, f.Name, *f.ptrI(&l))
		} else {
			out = append(out, f.Name, *f.ptrF(&l))
		}
	}
	return out
}

// Diff lists the fields that differ between l and o as "field=old→new", in
// the order of LimitFields.
func (l Limits) Diff(o Limits) []string {
	var out []string
	for _, f := range LimitFields {
		a, _ := l.Get(f)
		b, _ := o.Get(f)
		if a != b {
			out = append(out, fmt.Sprintf("%s=%s→%s", f, fmtNum(a), fmtNum(b)))
		}
	}
	return out
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
