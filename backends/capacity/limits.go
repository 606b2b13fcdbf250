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
	FieldPurgeDelayMs   = config.FieldPurgeDelayMs
	FieldPurgeCostMs    = config.FieldPurgeCostMs
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

// Patch is a partial update of Limits: the fields not set are left
// unchanged. Its fields are config.LimitTable's.
type Patch struct {
	set  uint64
	vals [maxFields]float64
}

// maxFields bounds the limit fields a Patch can hold.
const maxFields = 64

func init() {
	if len(config.LimitTable) > maxFields {
		panic("capacity: more limit fields than a Patch holds")
	}
}

// NewPatch is a patch setting the given fields; it panics on an unknown one
// (for literals in code and tests; input goes through ParsePatch or Set).
func NewPatch(fields map[string]float64) Patch {
	var p Patch
	for k, v := range fields {
		if !p.Set(k, v) {
			panic("capacity: unknown limit field " + k)
		}
	}
	return p
}

// Apply returns l with the fields set in p replaced. It does not validate.
func (p Patch) Apply(l Limits) Limits {
	for i, f := range config.LimitTable {
		if p.set&(1<<i) != 0 {
			f.Set(&l, p.vals[i])
		}
	}
	return l
}

// Set sets the named field of p to v (rounded for the integer fields) and
// reports whether the field exists. It does not validate.
func (p *Patch) Set(field string, v float64) bool {
	f, i, ok := config.LimitByName(field)
	if !ok {
		return false
	}
	if f.Int {
		v = math.Round(v)
	}
	p.set |= 1 << i
	p.vals[i] = v
	return true
}

// Fields lists the fields p sets, in the order of config.LimitTable.
func (p Patch) Fields() []string {
	var out []string
	for i, f := range config.LimitTable {
		if p.set&(1<<i) != 0 {
			out = append(out, f.Name)
		}
	}
	return out
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
		if lf, _, _ := config.LimitByName(k); lf.Int {
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
