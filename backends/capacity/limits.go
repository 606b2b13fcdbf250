package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// Limits is the capacity of a backend: the configuration contract's type
// (schema/topology.schema.yaml, $defs/limits), whose ranges and defaults
// are the schema's. The JSON names are those of the admin API (GET/PUT
// /admin/limits).
type Limits = config.Limits

// Field names, in the order the admin API documents them.
const (
	FieldWorkers        = config.FieldWorkers
	FieldRate           = config.FieldRate
	FieldExtraLatencyMs = config.FieldExtraLatencyMs
	FieldHiccupProb     = config.FieldHiccupProb
	FieldHiccupMs       = config.FieldHiccupMs
	FieldCostMs         = config.FieldCostMs
	FieldStallProb      = config.FieldStallProb
	FieldStallMs        = config.FieldStallMs
	FieldQueueLimit     = config.FieldQueueLimit
)

// Fields lists every limit field name.
var Fields = config.LimitFields

// DefaultLimits are the limits of a backend started without limit flags
// (the schema's defaults: eight workers and no other constraint).
func DefaultLimits() Limits { return config.DefaultLimits() }

// FieldError says which field of a limits update is wrong and why.
type FieldError struct {
	Field string
	// Value is the offending value as written (JSON text or Go value).
	Value string
	// Reason says what the field must be.
	Reason string
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return e.Field + ": " + e.Reason
	}
	return fmt.Sprintf("%s: %s, got %s", e.Field, e.Reason, e.Value)
}

// fieldError converts a schema validation error of a limits document.
func fieldError(err error) error {
	var ce *config.Error
	if errors.As(err, &ce) {
		return &FieldError{Field: ce.Path, Reason: ce.Message}
	}
	return err
}

// Patch is a partial update of Limits: nil fields are left unchanged.
type Patch struct {
	Workers        *int
	Rate           *float64
	ExtraLatencyMs *float64
	HiccupProb     *float64
	HiccupMs       *float64
	CostMs         *float64
	StallProb      *float64
	StallMs        *float64
	QueueLimit     *int
}

// Apply returns l with the fields set in p replaced. It does not validate.
func (p Patch) Apply(l Limits) Limits {
	if p.Workers != nil {
		l.Workers = *p.Workers
	}
	if p.Rate != nil {
		l.Rate = *p.Rate
	}
	if p.ExtraLatencyMs != nil {
		l.ExtraLatencyMs = *p.ExtraLatencyMs
	}
	if p.HiccupProb != nil {
		l.HiccupProb = *p.HiccupProb
	}
	if p.HiccupMs != nil {
		l.HiccupMs = *p.HiccupMs
	}
	if p.CostMs != nil {
		l.CostMs = *p.CostMs
	}
	if p.StallProb != nil {
		l.StallProb = *p.StallProb
	}
	if p.StallMs != nil {
		l.StallMs = *p.StallMs
	}
	if p.QueueLimit != nil {
		l.QueueLimit = *p.QueueLimit
	}
	return l
}

// Set sets the named field of p to v (rounded for the integer fields) and
// reports whether the field exists. It does not validate.
func (p *Patch) Set(field string, v float64) bool {
	iv := int(math.Round(v))
	switch field {
	case FieldWorkers:
		p.Workers = &iv
	case FieldQueueLimit:
		p.QueueLimit = &iv
	case FieldRate:
		p.Rate = &v
	case FieldExtraLatencyMs:
		p.ExtraLatencyMs = &v
	case FieldHiccupProb:
		p.HiccupProb = &v
	case FieldHiccupMs:
		p.HiccupMs = &v
	case FieldCostMs:
		p.CostMs = &v
	case FieldStallProb:
		p.StallProb = &v
	case FieldStallMs:
		p.StallMs = &v
	default:
		return false
	}
	return true
}

// ErrMalformed marks a body that is not a JSON object.
var ErrMalformed = errors.New("malformed JSON")

// ParsePatch parses the body of PUT /admin/limits: one JSON object holding
// any subset of the limit fields. Malformed JSON, a non-object, an unknown
// field, a non-number, a fractional integer field or an out-of-range value
// is an error naming the field and the value (a *FieldError, or ErrMalformed
// wrapped with the parser's message). Ranges are checked here too, so a
// patch that parses cleanly only fails Validate when combined fields matter.
func ParsePatch(body []byte) (Patch, error) {
	var p Patch
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return p, fmt.Errorf("%w: %v (want a JSON object such as {\"workers\": 4})", ErrMalformed, err)
	}
	if raw == nil {
		return p, fmt.Errorf("%w: got null (want a JSON object such as {\"workers\": 4})", ErrMalformed)
	}
	if rest := bytes.TrimSpace(body[dec.InputOffset():]); len(rest) > 0 {
		return p, fmt.Errorf("%w: trailing data %q after the JSON object", ErrMalformed, truncate(string(rest), 40))
	}
	// Report unknown fields first and in a stable order.
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := (Limits{}).Get(k); !ok {
			return p, &FieldError{Field: truncate(k, 64), Value: truncate(string(raw[k]), 40), Reason: "unknown field (known: " + strings.Join(Fields, ", ") + ")"}
		}
	}
	// Types here, ranges by the schema: the patch's fields as a limits
	// document (the others take their defaults, which are valid).
	doc := map[string]any{}
	for _, k := range keys {
		f, err := parseNumber(k, raw[k])
		if err != nil {
			return Patch{}, err
		}
		if k == FieldWorkers || k == FieldQueueLimit {
			if f != math.Trunc(f) || math.Abs(f) > 1e15 {
				return Patch{}, &FieldError{Field: k, Value: string(raw[k]), Reason: "must be an integer"}
			}
			doc[k] = int64(f)
		} else {
			doc[k] = f
		}
	}
	l, err := config.ReadLimits(doc, "")
	if err != nil {
		return Patch{}, fieldError(err)
	}
	for _, k := range keys {
		v, _ := l.Get(k)
		p.Set(k, v)
	}
	return p, nil
}

func parseNumber(field string, raw json.RawMessage) (float64, error) {
	var n json.Number
	// json.Number also accepts a quoted number; the admin API does not.
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] == '"' {
		return 0, &FieldError{Field: field, Value: truncate(string(raw), 40), Reason: "must be a JSON number"}
	}
	if err := json.Unmarshal(raw, &n); err != nil || n == "" {
		return 0, &FieldError{Field: field, Value: string(raw), Reason: "must be a JSON number"}
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, &FieldError{Field: field, Value: string(raw), Reason: "must be a finite number"}
	}
	return f, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
