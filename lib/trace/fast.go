package trace

import (
	"sort"
	"strconv"
)

// parseFast parses the plain form of a trace line — keys "t", "ts_ms" and
// "d" at most once each; backend objects with exactly "S", "U" and "C";
// integer sizes; keys that are strings of printable ASCII without escapes,
// or integers; flags 0, 1, true, false — and reports false for anything
// else (unusual or invalid), leaving it to parseSlow (encoding/json). Whenever
// it reports true, parseSlow would return an equal Request (FuzzParseFast).
func parseFast(b []byte) (*Request, bool) {
	p := fastParser{b: b}
	r := &Request{}
	var seenT, seenTs, seenD bool
	if !p.consume('{') {
		return nil, false
	}
	for {
		key, ok := p.str()
		if !ok || !p.consume(':') {
			return nil, false
		}
		switch key {
		case "t":
			if seenT {
				return nil, false
			}
			seenT = true
			lit, ok := p.integer()
			if !ok {
				return nil, false
			}
			v, err := strconv.ParseInt(lit, 10, 64)
			if err != nil {
				return nil, false
			}
			r.T = v
		case "ts_ms":
			if seenTs {
				return nil, false
			}
			seenTs = true
			lit, ok := p.number()
			if !ok {
				return nil, false
			}
			f, err := strconv.ParseFloat(lit, 64)
			if err != nil || f < 0 {
				return nil, false
			}
			r.TsMs, r.HasTs = f, true
		case "d":
			if seenD {
				return nil, false
			}
			seenD = true
			if r.Layers, ok = p.layers(); !ok {
				return nil, false
			}
		default:
			return nil, false
		}
		if p.consume(',') {
			continue
		}
		if p.consume('}') {
			break
		}
		return nil, false
	}
	p.ws()
	if p.i != len(p.b) || !seenD {
		return nil, false
	}
	return r, true
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// consume skips whitespace and then c, reporting whether c was there.
func (p *fastParser) consume(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) peek() byte {
	p.ws()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// str reads a string of printable ASCII without escapes.
func (p *fastParser) str() (string, bool) {
	if !p.consume('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := string(p.b[start:p.i])
			p.i++
			return s, true
		}
		if c < 0x20 || c > 0x7e || c == '\\' {
			return "", false
		}
		p.i++
	}
	return "", false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// integer reads -?(0|[1-9][0-9]*) followed by a delimiter.
func (p *fastParser) integer() (string, bool) {
	p.ws()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	if !p.digits() {
		return "", false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return "", false
	}
	return string(p.b[start:p.i]), true
}

// digits reads 0|[1-9][0-9]*.
func (p *fastParser) digits() bool {
	if p.i >= len(p.b) || !isDigit(p.b[p.i]) {
		return false
	}
	if p.b[p.i] == '0' {
		p.i++
		return p.i >= len(p.b) || !isDigit(p.b[p.i])
	}
	for p.i < len(p.b) && isDigit(p.b[p.i]) {
		p.i++
	}
	return true
}

// number reads a JSON number.
func (p *fastParser) number() (string, bool) {
	p.ws()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	if !p.digits() {
		return "", false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		n := p.i
		for p.i < len(p.b) && isDigit(p.b[p.i]) {
			p.i++
		}
		if p.i == n {
			return "", false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		n := p.i
		for p.i < len(p.b) && isDigit(p.b[p.i]) {
			p.i++
		}
		if p.i == n {
			return "", false
		}
	}
	return string(p.b[start:p.i]), true
}

func (p *fastParser) layers() ([]Layer, bool) {
	if !p.consume('[') {
		return nil, false
	}
	layers := make([]Layer, 0, 1)
	if p.consume(']') {
		return layers, true
	}
	for {
		l, ok := p.layer()
		if !ok {
			return nil, false
		}
		layers = append(layers, l)
		if p.consume(',') {
			continue
		}
		if p.consume(']') {
			return layers, true
		}
		return nil, false
	}
}

func (p *fastParser) layer() (Layer, bool) {
	if !p.consume('{') {
		return nil, false
	}
	layer := make(Layer, 0, 4)
	if p.consume('}') {
		return layer, true
	}
	for {
		name, ok := p.str()
		if !ok || name == "" || !p.consume(':') {
			return nil, false
		}
		for i := range layer {
			if layer[i].Backend == name {
				return nil, false // encoding/json keeps the last; leave it to parseSlow
			}
		}
		q, ok := p.queries(name)
		if !ok {
			return nil, false
		}
		layer = append(layer, q)
		if p.consume(',') {
			continue
		}
		if p.consume('}') {
			break
		}
		return nil, false
	}
	sort.Slice(layer, func(i, j int) bool { return layer[i].Backend < layer[j].Backend })
	return layer, true
}

func (p *fastParser) queries(name string) (BackendQueries, bool) {
	q := BackendQueries{Backend: name}
	if !p.consume('{') {
		return q, false
	}
	var seenS, seenU, seenC bool
	for {
		key, ok := p.str()
		if !ok || !p.consume(':') {
			return q, false
		}
		switch key {
		case "S":
			if seenS {
				return q, false
			}
			seenS = true
			if q.Sizes, ok = p.sizes(); !ok {
				return q, false
			}
		case "U":
			if seenU {
				return q, false
			}
			seenU = true
			if q.Keys, ok = p.keys(); !ok {
				return q, false
			}
		case "C":
			if seenC {
				return q, false
			}
			seenC = true
			if q.Cacheable, ok = p.flags(); !ok {
				return q, false
			}
		default:
			return q, false
		}
		if p.consume(',') {
			continue
		}
		if p.consume('}') {
			break
		}
		return q, false
	}
	if !seenS || !seenU || !seenC || len(q.Sizes) != len(q.Keys) || len(q.Cacheable) != len(q.Keys) {
		return q, false
	}
	return q, true
}

// list reads a JSON array, calling elem for each element.
func (p *fastParser) list(elem func() bool) bool {
	if !p.consume('[') {
		return false
	}
	if p.consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.consume(',') {
			continue
		}
		return p.consume(']')
	}
}

func (p *fastParser) sizes() ([]int64, bool) {
	out := make([]int64, 0, 8)
	ok := p.list(func() bool {
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '-' {
			return false // negative: parseSlow names it
		}
		lit, ok := p.integer()
		if !ok {
			return false
		}
		v, err := strconv.ParseInt(lit, 10, 64)
		if err != nil || v > MaxObjectSize {
			return false
		}
		out = append(out, v)
		return true
	})
	return out, ok
}

func (p *fastParser) keys() ([]string, bool) {
	out := make([]string, 0, 8)
	ok := p.list(func() bool {
		if p.peek() == '"' {
			k, ok := p.str()
			if !ok || k == "" {
				return false
			}
			out = append(out, k)
			return true
		}
		// Integer object ids are keys too; the key is the literal.
		lit, ok := p.integer()
		if !ok || len(lit) > 18 {
			return false
		}
		out = append(out, lit)
		return true
	})
	return out, ok
}

func (p *fastParser) flags() ([]bool, bool) {
	out := make([]bool, 0, 8)
	ok := p.list(func() bool {
		p.ws()
		rest := p.b[p.i:]
		switch {
		case len(rest) > 0 && (rest[0] == '0' || rest[0] == '1'):
			out = append(out, rest[0] == '1')
			p.i++
		case len(rest) >= 4 && string(rest[:4]) == "true":
			out = append(out, true)
			p.i += 4
		case len(rest) >= 5 && string(rest[:5]) == "false":
			out = append(out, false)
			p.i += 5
		default:
			return false
		}
		// The literal must end here ("10" or "truex" are not flags).
		if p.i < len(p.b) {
			switch c := p.b[p.i]; {
			case c == ',' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			default:
				return false
			}
		}
		return true
	})
	return out, ok
}
