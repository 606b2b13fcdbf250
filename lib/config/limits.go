package config

import (
	"fmt"
	"strconv"

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
)

// LimitFields lists every limit field name.
var LimitFields = []string{FieldWorkers, FieldRate, FieldExtraLatencyMs, FieldHiccupProb, FieldHiccupMs, FieldCostMs, FieldStallProb, FieldStallMs, FieldQueueLimit}

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
	return map[string]any{
		FieldWorkers: int64(l.Workers), FieldRate: l.Rate, FieldExtraLatencyMs: l.ExtraLatencyMs,
		FieldHiccupProb: l.HiccupProb, FieldHiccupMs: l.HiccupMs, FieldCostMs: l.CostMs, FieldStallProb: l.StallProb, FieldStallMs: l.StallMs,
		FieldQueueLimit: int64(l.QueueLimit),
	}
}

// Get returns the value of a field by name, as a float64 (the metrics
// export every limit this way).
func (l Limits) Get(field string) (float64, bool) {
	switch field {
	case FieldWorkers:
		return float64(l.Workers), true
	case FieldRate:
		return l.Rate, true
	case FieldExtraLatencyMs:
		return l.ExtraLatencyMs, true
	case FieldHiccupProb:
		return l.HiccupProb, true
	case FieldHiccupMs:
		return l.HiccupMs, true
	case FieldCostMs:
		return l.CostMs, true
	case FieldStallProb:
		return l.StallProb, true
	case FieldStallMs:
		return l.StallMs, true
	case FieldQueueLimit:
		return float64(l.QueueLimit), true
	}
	return 0, false
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
