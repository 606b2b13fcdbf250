package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Upper bounds of the limits. They only reject values that are certainly
// mistakes (a typo of three zeros), not values that are merely large.
const (
	MaxWorkers    = 1_000_000
	MaxRate       = 1e9
	MaxDelayMs    = 3_600_000 // one hour
	MaxQueueLimit = 100_000_000
)

// Limits is the capacity of a backend. The JSON names are those of the admin
// API (GET/PUT /admin/limits).
type Limits struct {
	// Workers is the number of operations that may be in service at once (≥ 1).
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
	// QueueLimit bounds the waiting operations: a batch arriving while the
	// queue holds QueueLimit or more operations is rejected. 0 means unbounded.
	QueueLimit int `json:"queue_limit"`
}

// DefaultLimits are the limits of a backend started without limit flags:
// eight workers and no other constraint.
func DefaultLimits() Limits { return Limits{Workers: 8} }

// Field names, in the order the admin API documents them.
const (
	FieldWorkers        = "workers"
	FieldRate           = "rate"
	FieldExtraLatencyMs = "extra_latency_ms"
	FieldHiccupProb     = "hiccup_prob"
	FieldHiccupMs       = "hiccup_ms"
	FieldQueueLimit     = "queue_limit"
)

// Fields lists every limit field name.
var Fields = []string{FieldWorkers, FieldRate, FieldExtraLatencyMs, FieldHiccupProb, FieldHiccupMs, FieldQueueLimit}

// FieldError says which field of a limits update is wrong and why.
type FieldError struct {
	Field string
	// Value is the offending value as written (JSON text or Go value).
	Value string
	// Reason says what the field must be.
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s, got %s", e.Field, e.Reason, e.Value)
}

func fieldErr(field string, v any, reason string) *FieldError {
	var s string
	switch x := v.(type) {
	case float64:
		s = strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		s = x
	default:
		s = fmt.Sprint(x)
	}
	return &FieldError{Field: field, Value: s, Reason: reason}
}

// Validate checks every field and returns the first violation as a
// *FieldError.
func (l Limits) Validate() error {
	if l.Workers < 1 || l.Workers > MaxWorkers {
		return fieldErr(FieldWorkers, l.Workers, fmt.Sprintf("must be an integer in [1, %d]", MaxWorkers))
	}
	if err := checkRange(FieldRate, l.Rate, 0, MaxRate, "operations per second, 0 = unlimited"); err != nil {
		return err
	}
	if err := checkRange(FieldExtraLatencyMs, l.ExtraLatencyMs, 0, MaxDelayMs, "milliseconds"); err != nil {
		return err
	}
	if err := checkRange(FieldHiccupProb, l.HiccupProb, 0, 1, "a probability"); err != nil {
		return err
	}
	if err := checkRange(FieldHiccupMs, l.HiccupMs, 0, MaxDelayMs, "milliseconds"); err != nil {
		return err
	}
	if l.QueueLimit < 0 || l.QueueLimit > MaxQueueLimit {
		return fieldErr(FieldQueueLimit, l.QueueLimit, fmt.Sprintf("must be an integer in [0, %d] (0 = unbounded)", MaxQueueLimit))
	}
	return nil
}

func checkRange(field string, v, lo, hi float64, unit string) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
		return fieldErr(field, v, fmt.Sprintf("must be a number in [%g, %g] (%s)", lo, hi, unit))
	}
	return nil
}

// Get returns the value of a field by its JSON name, as a float64 (the
// metrics export every limit this way).
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
	case FieldQueueLimit:
		return float64(l.QueueLimit), true
	}
	return 0, false
}

// Diff lists the fields that differ between l and o as "field=old→new", in
// the order of Fields.
func (l Limits) Diff(o Limits) []string {
	var out []string
	for _, f := range Fields {
		a, _ := l.Get(f)
		b, _ := o.Get(f)
		if a != b {
			out = append(out, fmt.Sprintf("%s=%s→%s", f, fmtNum(a), fmtNum(b)))
		}
	}
	return out
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Patch is a partial update of Limits: nil fields are left unchanged.
type Patch struct {
	Workers        *int
	Rate           *float64
	ExtraLatencyMs *float64
	HiccupProb     *float64
	HiccupMs       *float64
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
	if p.QueueLimit != nil {
		l.QueueLimit = *p.QueueLimit
	}
	return l
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
	var err error
	for _, k := range keys {
		v := raw[k]
		switch k {
		case FieldWorkers:
			p.Workers, err = parseInt(k, v, 1, MaxWorkers)
		case FieldQueueLimit:
			p.QueueLimit, err = parseInt(k, v, 0, MaxQueueLimit)
		case FieldRate:
			p.Rate, err = parseFloat(k, v, 0, MaxRate, "operations per second, 0 = unlimited")
		case FieldExtraLatencyMs:
			p.ExtraLatencyMs, err = parseFloat(k, v, 0, MaxDelayMs, "milliseconds")
		case FieldHiccupProb:
			p.HiccupProb, err = parseFloat(k, v, 0, 1, "a probability")
		case FieldHiccupMs:
			p.HiccupMs, err = parseFloat(k, v, 0, MaxDelayMs, "milliseconds")
		}
		if err != nil {
			return Patch{}, err
		}
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

func parseFloat(field string, raw json.RawMessage, lo, hi float64, unit string) (*float64, error) {
	f, err := parseNumber(field, raw)
	if err != nil {
		return nil, err
	}
	if f < lo || f > hi {
		return nil, &FieldError{Field: field, Value: string(raw), Reason: fmt.Sprintf("must be a number in [%g, %g] (%s)", lo, hi, unit)}
	}
	return &f, nil
}

func parseInt(field string, raw json.RawMessage, lo, hi int) (*int, error) {
	f, err := parseNumber(field, raw)
	if err != nil {
		return nil, err
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return nil, &FieldError{Field: field, Value: string(raw), Reason: fmt.Sprintf("must be an integer in [%d, %d]", lo, hi)}
	}
	i := int(f)
	return &i, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
