// Package trace reads and writes request trace lines in the format of the
// original RobinHood release (docs/workloads.md):
//
//	{"t": 7, "ts_ms": 1234.5, "d": [{"catalog": {"S": [2048], "U": ["k1"], "C": [1]}}]}
//
// t is the request's index or timestamp, ts_ms an optional arrival time in
// milliseconds from the start of the trace, and d a list of layers (normally
// one), each mapping a backend name to its queries: object sizes in bytes
// (S), keys (U) and cacheable flags (C). Layers run one after another; the
// backends of one layer are queried in parallel. The same JSON is the body of
// an application server's POST /v1/request.
package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// MaxObjectSize is the largest object size a query may ask for (64 MiB).
const MaxObjectSize = 64 << 20

// Request is one trace line.
type Request struct {
	T int64 `json:"t"`
	// TsMs is the arrival time in ms from the trace start; HasTs tells
	// whether the line carried it.
	TsMs   float64
	HasTs  bool
	Layers []Layer
}

// Layer is the set of backends queried in parallel.
type Layer []BackendQueries

// BackendQueries is one backend's batch of queries within a layer.
type BackendQueries struct {
	Backend   string
	Sizes     []int64
	Keys      []string
	Cacheable []bool
	// IDs, when set (the workload generator's requests, never a trace
	// file's), names each key by a dense non-negative id unique within the
	// backend: its rank. A consumer that interns keys can take these
	// instead (the simulator, sim/keys.go).
	IDs []int32
}

// ValueBytes is the sum of the sizes every query of the request asks for
// (saturating at the largest int64).
func (r *Request) ValueBytes() int64 {
	var n int64
	for _, l := range r.Layers {
		for i := range l {
			for _, s := range l[i].Sizes {
				if s > 0 {
					if n > math.MaxInt64-s {
						return math.MaxInt64
					}
					n += s
				}
			}
		}
	}
	return n
}

// Len is the number of queries in the batch.
func (b *BackendQueries) Len() int { return len(b.Keys) }

// Queries is the total number of queries of the request.
func (r *Request) Queries() int {
	n := 0
	for _, l := range r.Layers {
		for i := range l {
			n += l[i].Len()
		}
	}
	return n
}

type wireQueries struct {
	S []json.Number     `json:"S"`
	U []json.RawMessage `json:"U"`
	C []json.RawMessage `json:"C"`
}

type wireRequest struct {
	T    *json.Number              `json:"t"`
	TsMs *json.Number              `json:"ts_ms"`
	D    []map[string]*wireQueries `json:"d"`
}

// Parse decodes and validates one trace line. The error names the field at
// fault (for example `d[0].catalog.S[3]: size -1 is negative`). The plain
// shape of a line takes a hand-written fast path (fast.go, about ten times
// faster than encoding/json); anything else, including every malformed line,
// goes through encoding/json, so both accept the same lines with the same result.
func Parse(line []byte) (*Request, error) {
	if r, ok := parseFast(line); ok {
		return r, nil
	}
	return parseSlow(line)
}

// parseSlow is Parse by encoding/json: the reference the fast path is held to.
func parseSlow(line []byte) (*Request, error) {
	var w wireRequest
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("malformed JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("malformed JSON: trailing data after the request object")
	}
	r := &Request{}
	if w.T != nil {
		t, err := w.T.Int64()
		if err != nil {
			f, ferr := w.T.Float64()
			if ferr != nil {
				return nil, fmt.Errorf("t: %q is not a number", w.T.String())
			}
			t = int64(f)
		}
		r.T = t
	}
	if w.TsMs != nil {
		f, err := w.TsMs.Float64()
		if err != nil || f < 0 {
			return nil, fmt.Errorf("ts_ms: %q is not a non-negative number", w.TsMs.String())
		}
		r.TsMs, r.HasTs = f, true
	}
	if w.D == nil {
		return nil, errors.New(`d: missing (a request needs "d": [ {backend: {S, U, C}} ])`)
	}
	r.Layers = make([]Layer, 0, len(w.D))
	for li, m := range w.D {
		names := make([]string, 0, len(m))
		for name := range m {
			names = append(names, name)
		}
		sort.Strings(names)
		layer := make(Layer, 0, len(names))
		for _, name := range names {
			q := m[name]
			where := fmt.Sprintf("d[%d].%s", li, name)
			if name == "" {
				return nil, fmt.Errorf("d[%d]: empty backend name", li)
			}
			if q == nil {
				return nil, fmt.Errorf("%s: null instead of {S, U, C}", where)
			}
			if len(q.S) != len(q.U) || len(q.C) != len(q.U) {
				return nil, fmt.Errorf("%s: S, U and C must have the same length (got %d, %d, %d)", where, len(q.S), len(q.U), len(q.C))
			}
			bq := BackendQueries{
				Backend:   name,
				Sizes:     make([]int64, len(q.S)),
				Keys:      make([]string, len(q.U)),
				Cacheable: make([]bool, len(q.C)),
			}
			for i, s := range q.S {
				v, err := s.Int64()
				if err != nil {
					return nil, fmt.Errorf("%s.S[%d]: %q is not an integer size", where, i, s.String())
				}
				if v < 0 {
					return nil, fmt.Errorf("%s.S[%d]: size %d is negative", where, i, v)
				}
				if v > MaxObjectSize {
					return nil, fmt.Errorf("%s.S[%d]: size %d exceeds the %d-byte limit", where, i, v, MaxObjectSize)
				}
				bq.Sizes[i] = v
			}
			for i, raw := range q.U {
				k, err := parseKey(raw)
				if err != nil {
					return nil, fmt.Errorf("%s.U[%d]: %v", where, i, err)
				}
				bq.Keys[i] = k
			}
			for i, raw := range q.C {
				c, err := parseFlag(raw)
				if err != nil {
					return nil, fmt.Errorf("%s.C[%d]: %v", where, i, err)
				}
				bq.Cacheable[i] = c
			}
			layer = append(layer, bq)
		}
		r.Layers = append(r.Layers, layer)
	}
	return r, nil
}

// parseKey accepts a JSON string or a JSON number (some traces use integer
// object ids) and returns the key text.
func parseKey(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("empty key")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("bad key string: %v", err)
		}
		if s == "" {
			return "", errors.New("empty key")
		}
		return s, nil
	}
	if _, err := strconv.ParseFloat(string(raw), 64); err != nil {
		return "", fmt.Errorf("key %s is neither a string nor a number", raw)
	}
	return string(raw), nil
}

func parseFlag(raw json.RawMessage) (bool, error) {
	switch string(bytes.TrimSpace(raw)) {
	case "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("cacheable flag %s is not 0 or 1", raw)
}

// AppendJSON appends r as one trace line (without the newline) to dst.
// Backends within a layer are written in sorted order and numbers in their
// shortest form, so the same request always gives the same bytes.
func AppendJSON(dst []byte, r *Request) []byte {
	dst = append(dst, `{"t": `...)
	dst = strconv.AppendInt(dst, r.T, 10)
	if r.HasTs {
		dst = append(dst, `, "ts_ms": `...)
		dst = strconv.AppendFloat(dst, r.TsMs, 'f', -1, 64)
	}
	dst = append(dst, `, "d": [`...)
	for li, l := range r.Layers {
		if li > 0 {
			dst = append(dst, ", "...)
		}
		dst = append(dst, '{')
		for n, i := range sortedOrder(l) {
			q := &l[i]
			if n > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendString(dst, q.Backend)
			dst = append(dst, `: {"S": [`...)
			for j, s := range q.Sizes {
				if j > 0 {
					dst = append(dst, ", "...)
				}
				dst = strconv.AppendInt(dst, s, 10)
			}
			dst = append(dst, `], "U": [`...)
			for j, k := range q.Keys {
				if j > 0 {
					dst = append(dst, ", "...)
				}
				dst = appendString(dst, k)
			}
			dst = append(dst, `], "C": [`...)
			for j, c := range q.Cacheable {
				if j > 0 {
					dst = append(dst, ", "...)
				}
				if c {
					dst = append(dst, '1')
				} else {
					dst = append(dst, '0')
				}
			}
			dst = append(dst, "]}"...)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, "]}"...)
	return dst
}

// sortedOrder returns the indexes of l's batches in backend-name order. Layers
// are usually sorted already (Parse and the synthesiser produce them so); that
// case allocates nothing.
func sortedOrder(l Layer) []int {
	var small [16]int
	order := small[:0]
	if len(l) > len(small) {
		order = make([]int, 0, len(l))
	}
	sorted := true
	for i := range l {
		order = append(order, i)
		if i > 0 && l[i-1].Backend > l[i].Backend {
			sorted = false
		}
	}
	if !sorted {
		order = append([]int(nil), order...)
		sort.Slice(order, func(a, b int) bool { return l[order[a]].Backend < l[order[b]].Backend })
	}
	return order
}

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
