package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"gopkg.in/yaml.v3"

	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/schema"
)

// Error is an invalid document: Path names the field ("" for the document
// itself) and Message says what is wrong with its value. The Python reader
// (robinhood_common.contract) produces the same Path and Message for the
// same document.
type Error struct {
	Path    string
	Message string
}

func (e *Error) Error() string {
	p := e.Path
	if p == "" {
		p = "(document)"
	}
	return p + ": " + e.Message
}

func errAt(path, format string, a ...any) *Error {
	return &Error{Path: path, Message: fmt.Sprintf(format, a...)}
}

// join is the path of a property or map entry below path (or of an array
// item, when key starts with "[": a rule's field on an array).
func join(path, key string) string {
	if strings.HasPrefix(key, "[") {
		return path + key
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// keywords the readers implement; a schema using any other is rejected when
// it is loaded (so a keyword is never silently ignored).
var keywords = map[string]bool{
	"$schema": true, "$id": true, "$ref": true, "$defs": true, "$comment": true, "title": true,
	"description": true, "examples": true, "type": true, "properties": true,
	"additionalProperties": true, "required": true, "items": true, "enum": true, "pattern": true,
	"minLength": true, "minimum": true, "maximum": true, "exclusiveMinimum": true,
	"exclusiveMaximum": true, "minItems": true, "maxItems": true, "default": true, "format": true,
	"x-shorthand": true, "x-rules": true, "x-let": true, "x-messages": true, "x-unit": true,
	"x-variants": true, "x-default": true,
}

// omap is a YAML mapping of the schema with its key order.
type omap struct {
	keys []string
	vals map[string]any
}

func (m *omap) get(k string) (any, bool) {
	if m == nil {
		return nil, false
	}
	v, ok := m.vals[k]
	return v, ok
}

func (m *omap) str(k string) string {
	v, _ := m.get(k)
	s, _ := v.(string)
	return s
}

func (m *omap) sub(k string) *omap {
	v, _ := m.get(k)
	o, _ := v.(*omap)
	return o
}

func (m *omap) set(k string, v any) {
	if _, ok := m.vals[k]; !ok {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
}

// fromNode converts a YAML node of a schema file, keeping mapping order.
func fromNode(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		return fromNode(n.Content[0])
	case yaml.MappingNode:
		m := &omap{vals: map[string]any{}}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := fromNode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m.set(n.Content[i].Value, v)
		}
		return m, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := fromNode(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.AliasNode:
		return fromNode(n.Alias)
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	return plain(v)
}

// plainValue converts an ordered schema value (a default) to the document
// representation.
func plainValue(v any) any {
	switch x := v.(type) {
	case *omap:
		out := make(map[string]any, len(x.keys))
		for _, k := range x.keys {
			out[k] = plainValue(x.vals[k])
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plainValue(e)
		}
		return out
	}
	return v
}

// Contract is a set of schema files by $id (their file names).
type Contract struct {
	docs map[string]*omap
	mu   sync.Mutex
	eff  map[*omap]*omap
}

var (
	defaultOnce     sync.Once
	defaultContract *Contract
	defaultErr      error
)

// Default is the contract of package schema (the files in schema/).
func Default() *Contract {
	defaultOnce.Do(func() {
		files := map[string][]byte{}
		defaultErr = fs.WalkDir(schema.Files, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(schema.Files, p)
			files[p] = b
			return err
		})
		if defaultErr == nil {
			defaultContract, defaultErr = NewContract(files)
		}
	})
	if defaultErr != nil {
		panic(fmt.Sprintf("config: the embedded schema is broken: %v", defaultErr))
	}
	return defaultContract
}

// NewContract parses schema files (name → YAML) and checks that they use
// only the keywords and formats the readers implement and that every CEL
// expression compiles.
func NewContract(files map[string][]byte) (*Contract, error) {
	c := &Contract{docs: map[string]*omap{}, eff: map[*omap]*omap{}}
	for name, b := range files {
		var n yaml.Node
		if err := yaml.Unmarshal(b, &n); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		v, err := fromNode(&n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		m, ok := v.(*omap)
		if !ok {
			return nil, fmt.Errorf("%s: a schema is a mapping", name)
		}
		c.docs[name] = m
	}
	for name, d := range c.docs {
		if err := c.audit(d, name); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Contract) audit(n *omap, where string) error {
	if n == nil {
		return nil
	}
	for _, k := range n.keys {
		if !keywords[k] {
			return fmt.Errorf("%s: keyword %q is not implemented by the readers", where, k)
		}
	}
	if f := n.str("format"); f != "" && f != "duration" && f != "address" {
		return fmt.Errorf("%s: format %q is not one of duration, address", where, f)
	}
	for _, k := range []string{"properties", "$defs"} {
		if m := n.sub(k); m != nil {
			for _, name := range m.keys {
				if err := c.audit(m.sub(name), where+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if err := c.audit(n.sub(k), where+"/"+k); err != nil {
			return err
		}
	}
	if err := c.auditVariants(n, where); err != nil {
		return err
	}
	lets := letsOf(n)
	for _, r := range rulesOf(n) {
		for _, e := range []string{r.rule, r.message, r.fieldExpr} {
			if e == "" {
				continue
			}
			s, err := substitute(e, lets)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if _, err := program(s); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
	}
	return nil
}

// auditVariants checks an x-variants keyword: {field: FIELD, cases: REF,
// open: BOOL}, REF naming a node whose properties are the cases.
func (c *Contract) auditVariants(n *omap, where string) error {
	xv, ok := n.get("x-variants")
	if !ok {
		return nil
	}
	m, _ := xv.(*omap)
	if m == nil || m.str("field") == "" || m.str("cases") == "" {
		return fmt.Errorf("%s: x-variants needs field (a property) and cases (a $ref)", where)
	}
	for _, k := range m.keys {
		if k != "field" && k != "cases" && k != "open" {
			return fmt.Errorf("%s: x-variants: %q is not one of field, cases, open", where, k)
		}
	}
	if _, ok := n.sub("properties").get(m.str("field")); !ok && n.str("$ref") == "" {
		return fmt.Errorf("%s: x-variants: field %q is not a property", where, m.str("field"))
	}
	base, _, _ := strings.Cut(where, "/")
	cases, _, err := c.resolve(m.str("cases"), base)
	if err != nil {
		return fmt.Errorf("%s: x-variants: %w", where, err)
	}
	if cases.sub("properties") == nil {
		return fmt.Errorf("%s: x-variants: %s has no properties (the cases)", where, m.str("cases"))
	}
	return nil
}

type rule struct{ rule, message, field, fieldExpr string }

func rulesOf(n *omap) []rule {
	v, _ := n.get("x-rules")
	l, _ := v.([]any)
	out := make([]rule, 0, len(l))
	for _, e := range l {
		m, _ := e.(*omap)
		out = append(out, rule{rule: m.str("rule"), message: m.str("message"), field: m.str("field"), fieldExpr: m.str("fieldExpression")})
	}
	return out
}

func letsOf(n *omap) map[string]string {
	out := map[string]string{}
	if m := n.sub("x-let"); m != nil {
		for _, k := range m.keys {
			out[k] = m.str(k)
		}
	}
	return out
}

func (c *Contract) resolve(ref, base string) (*omap, string, error) {
	file, pointer, _ := strings.Cut(ref, "#")
	if file == "" {
		file = base
	}
	doc, ok := c.docs[file]
	if !ok {
		return nil, "", fmt.Errorf("$ref %q: no schema %q", ref, file)
	}
	node := doc
	for _, part := range strings.Split(pointer, "/") {
		if part == "" {
			continue
		}
		next := node.sub(part)
		if next == nil {
			return nil, "", fmt.Errorf("$ref %q: %q not found", ref, part)
		}
		node = next
	}
	return node, file, nil
}

// effective merges a node's $ref chain into it: the node's own keywords
// win, x-rules and x-let accumulate (the referenced ones first). The
// "__base__" key holds the file nested references are relative to.
func (c *Contract) effective(n *omap, base string) (*omap, string, error) {
	c.mu.Lock()
	if e, ok := c.eff[n]; ok {
		c.mu.Unlock()
		return e, e.str("__base__"), nil
	}
	c.mu.Unlock()
	out := &omap{vals: map[string]any{}}
	ref := n.str("$ref")
	if ref == "" {
		for _, k := range n.keys {
			out.set(k, n.vals[k])
		}
		out.set("__base__", base)
	} else {
		file, _, _ := strings.Cut(ref, "#")
		if file == "" {
			file = base
		}
		tnode, _, err := c.resolve(ref, base)
		if err != nil {
			return nil, "", err
		}
		target, tbase, err := c.effective(tnode, file)
		if err != nil {
			return nil, "", err
		}
		for _, k := range target.keys {
			out.set(k, target.vals[k])
		}
		for _, k := range n.keys {
			switch k {
			case "$ref":
			case "x-rules":
				tr, _ := target.vals[k].([]any)
				nr, _ := n.vals[k].([]any)
				out.set(k, append(append([]any{}, tr...), nr...))
			case "x-let":
				merged := &omap{vals: map[string]any{}}
				for _, src := range []*omap{target.sub(k), n.sub(k)} {
					if src != nil {
						for _, lk := range src.keys {
							merged.set(lk, src.vals[lk])
						}
					}
				}
				out.set(k, merged)
			default:
				out.set(k, n.vals[k])
			}
		}
		out.set("__base__", tbase)
	}
	c.mu.Lock()
	c.eff[n] = out
	c.mu.Unlock()
	return out, out.str("__base__"), nil
}

// Read validates doc (a YAML/JSON tree: map[string]any, []any, numbers,
// strings, bools, nil) against target ("topology.schema.yaml" or
// "topology.schema.yaml#/$defs/limits"), with path as the prefix of error
// paths, and returns it normalized: defaults filled in, shorthands
// expanded, integers as int64 and numbers as float64. The first problem is
// an *Error.
func (c *Contract) Read(target string, doc any, path string) (any, error) {
	file, pointer, _ := strings.Cut(target, "#")
	node, ok := c.docs[file]
	if !ok {
		return nil, fmt.Errorf("config: no schema %q", file)
	}
	if pointer != "" {
		var err error
		if node, _, err = c.resolve("#"+pointer, file); err != nil {
			return nil, err
		}
	}
	doc, err := plain(doc)
	if err != nil {
		return nil, &Error{Path: path, Message: err.Error()}
	}
	r := &reader{c: c}
	norm, _, walk, err := r.check(node, file, doc, path)
	if err != nil {
		return nil, err
	}
	if err := r.rules(walk, walk.celv); err != nil {
		return nil, err
	}
	return norm, nil
}

// plain converts a decoded YAML or JSON tree to the reader's
// representation (map[string]any, []any, int64, float64, string, bool,
// nil).
func plain(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			p, err := plain(e)
			if err != nil {
				return nil, err
			}
			out[k] = p
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("key %s is not a string", FormatValue(k))
			}
			p, err := plain(e)
			if err != nil {
				return nil, err
			}
			out[ks] = p
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			p, err := plain(e)
			if err != nil {
				return nil, err
			}
			out[i] = p
		}
		return out, nil
	case int:
		return int64(x), nil
	case int64, float64, string, bool, nil:
		return x, nil
	case uint64:
		if x > math.MaxInt64 {
			return float64(x), nil
		}
		return int64(x), nil
	case float32:
		return float64(x), nil
	case time.Time:
		return x.Format(time.RFC3339), nil
	}
	return nil, fmt.Errorf("unsupported value %v (%T)", v, v)
}

// walkNode is what the structural pass saw at one node, for the rules.
type walkNode struct {
	schema   *omap
	path     string
	celv     any
	key      string
	index    int64
	before   []any
	children []*walkNode
}

type reader struct{ c *Contract }

var articles = map[string]string{
	"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
	"number": "a number", "boolean": "true or false",
}

func typeOK(t string, v any) (bool, error) {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok, nil
	case "array":
		_, ok := v.([]any)
		return ok, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "integer":
		switch x := v.(type) {
		case int64:
			return true, nil
		case float64:
			return x == math.Trunc(x) && !math.IsInf(x, 0), nil
		}
		return false, nil
	case "number":
		switch x := v.(type) {
		case int64:
			return true, nil
		case float64:
			return !math.IsNaN(x) && !math.IsInf(x, 0), nil
		}
		return false, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	}
	return false, fmt.Errorf("type %q is not implemented", t)
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func numOf(v any) (float64, bool) { return asFloat(v) }

func (r *reader) message(s *omap, kw, def string) string {
	if m := s.sub("x-messages"); m != nil {
		if t := m.str(kw); t != "" {
			return t
		}
	}
	return def
}

func (r *reader) check(node *omap, base string, v any, path string) (norm, celv any, w *walkNode, err error) {
	s, base, err := r.c.effective(node, base)
	if err != nil {
		return nil, nil, nil, err
	}
	if sh := s.str("x-shorthand"); sh != "" && v != nil {
		switch v.(type) {
		case map[string]any, []any:
		default:
			v = map[string]any{sh: v}
		}
	}
	if tv, ok := s.get("type"); ok {
		var tl []string
		switch x := tv.(type) {
		case string:
			tl = []string{x}
		case []any:
			for _, e := range x {
				tl = append(tl, e.(string))
			}
		}
		matched := ""
		for _, t := range tl {
			ok, err := typeOK(t, v)
			if err != nil {
				return nil, nil, nil, err
			}
			if ok {
				matched = t
				break
			}
		}
		if matched == "" {
			switch s.str("format") {
			case "duration":
				return nil, nil, nil, errAt(path, "%s is not a duration (%s)", FormatValue(v), DurationHint)
			case "address":
				return nil, nil, nil, errAt(path, "%s is not a host:port address (port 0-65535)", FormatValue(v))
			}
			want := make([]string, len(tl))
			for i, t := range tl {
				want[i] = articles[t]
			}
			return nil, nil, nil, errAt(path, "%s is not %s", FormatValue(v), strings.Join(want, " or "))
		}
		if f, ok := v.(float64); ok && matched == "integer" {
			v = int64(f)
		} else if i, ok := v.(int64); ok && matched == "number" {
			v = float64(i)
		}
	}
	if ev, ok := s.get("enum"); ok {
		list, _ := ev.([]any)
		found := false
		names := make([]string, len(list))
		for i, e := range list {
			names[i] = fmt.Sprint(e)
			if e == v {
				found = true
			}
		}
		if !found {
			return nil, nil, nil, errAt(path, "%s is not one of %s", FormatValue(v), strings.Join(names, ", "))
		}
	}
	celv = v
	if str, ok := v.(string); ok {
		if ml, ok := s.get("minLength"); ok {
			n := int(ml.(int64))
			if len([]rune(str)) < n {
				def := fmt.Sprintf("must be at least %d characters", n)
				if n == 1 {
					def = "must not be empty"
				}
				return nil, nil, nil, errAt(path, "%s", r.message(s, "minLength", def))
			}
		}
		if p := s.str("pattern"); p != "" {
			re, err := regexp.Compile(p)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("schema pattern %q: %w", p, err)
			}
			if !re.MatchString(str) {
				return nil, nil, nil, errAt(path, "%s %s", FormatValue(str), r.message(s, "pattern", "does not match "+p))
			}
		}
		switch s.str("format") {
		case "duration":
			d, err := time.ParseDuration(str)
			if err != nil {
				return nil, nil, nil, errAt(path, "%s is not a duration (%s)", FormatValue(str), DurationHint)
			}
			celv = d.Seconds()
			// A duration's bounds are in seconds.
			if err := r.bounds(s, str, d.Seconds(), path); err != nil {
				return nil, nil, nil, err
			}
		case "address":
			if !IsAddress(str) {
				return nil, nil, nil, errAt(path, "%s is not a host:port address (port 0-65535)", FormatValue(str))
			}
		}
	}
	if f, ok := numOf(v); ok {
		if err := r.bounds(s, v, f, path); err != nil {
			return nil, nil, nil, err
		}
	}
	w = &walkNode{schema: s, path: path, index: -1}
	switch x := v.(type) {
	case map[string]any:
		v, celv, err = r.checkObject(s, base, x, path, w)
	case []any:
		v, celv, err = r.checkArray(s, base, x, path, w)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	w.celv = celv
	return v, celv, w, nil
}

func bound(s *omap, k string) (float64, bool) {
	v, ok := s.get(k)
	if !ok {
		return 0, false
	}
	return asFloat(v)
}

func (r *reader) bounds(s *omap, raw any, v float64, path string) error {
	lo, hasLo := bound(s, "minimum")
	loX := false
	if x, ok := bound(s, "exclusiveMinimum"); ok {
		lo, hasLo, loX = x, true, true
	}
	hi, hasHi := bound(s, "maximum")
	hiX := false
	if x, ok := bound(s, "exclusiveMaximum"); ok {
		hi, hasHi, hiX = x, true, true
	}
	below := hasLo && (v < lo || (loX && v == lo))
	above := hasHi && (v > hi || (hiX && v == hi))
	if !below && !above {
		return nil
	}
	unit := ""
	if u := s.str("x-unit"); u != "" {
		unit = " " + u
	}
	val := FormatValue(raw)
	msgs := s.sub("x-messages")
	if below && loX && msgs.str("exclusiveMinimum") != "" {
		return errAt(path, "%s %s", val, msgs.str("exclusiveMinimum"))
	}
	if below && msgs.str("minimum") != "" {
		return errAt(path, "%s %s", val, msgs.str("minimum"))
	}
	if above && msgs.str("maximum") != "" {
		return errAt(path, "%s %s", val, msgs.str("maximum"))
	}
	loS, hiS := schemaNumber(s, "minimum", "exclusiveMinimum"), schemaNumber(s, "maximum", "exclusiveMaximum")
	if hasLo && hasHi {
		open, closing := "[", "]"
		if loX {
			open = "("
		}
		if hiX {
			closing = ")"
		}
		return errAt(path, "%s is out of range %s%s, %s%s%s", val, open, loS, hiS, closing, unit)
	}
	if below {
		if loX {
			return errAt(path, "%s must be above %s%s", val, loS, unit)
		}
		return errAt(path, "%s is below the minimum of %s%s", val, loS, unit)
	}
	if hiX {
		return errAt(path, "%s must be below %s%s", val, hiS, unit)
	}
	return errAt(path, "%s is above the maximum of %s%s", val, hiS, unit)
}

// schemaNumber is a bound as written in the schema (an integer stays one).
func schemaNumber(s *omap, k, kx string) string {
	v, ok := s.get(kx)
	if !ok {
		v, _ = s.get(k)
	}
	return FormatValue(v)
}

func (r *reader) checkObject(s *omap, base string, v map[string]any, path string, w *walkNode) (any, any, error) {
	props := s.sub("properties")
	extraV, hasExtra := s.get("additionalProperties")
	if !hasExtra {
		extraV = true
	}
	sorted := make([]string, 0, len(v))
	for k := range v {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	if b, ok := extraV.(bool); ok && !b {
		for _, k := range sorted {
			if _, known := props.get(k); !known {
				known := "none"
				if props != nil && len(props.keys) > 0 {
					known = strings.Join(props.keys, ", ")
				}
				return nil, nil, errAt(join(path, k), "unknown field (known: %s)", known)
			}
		}
	}
	if rv, ok := s.get("required"); ok {
		for _, e := range rv.([]any) {
			k := e.(string)
			if v[k] != nil {
				continue
			}
			sub := props.sub(k)
			hasDef := false
			if sub != nil {
				es, _, err := r.c.effective(sub, base)
				if err != nil {
					return nil, nil, err
				}
				_, hasDef = es.get("default")
			}
			if !hasDef {
				return nil, nil, errAt(join(path, k), "is required")
			}
		}
	}
	norm := map[string]any{}
	celv := map[string]any{}
	if props != nil {
		for _, k := range props.keys {
			sub := props.sub(k)
			val := v[k]
			if val == nil {
				es, _, err := r.c.effective(sub, base)
				if err != nil {
					return nil, nil, err
				}
				d, ok := es.get("default")
				if !ok {
					continue
				}
				val = plainValue(d)
			}
			n, c, child, err := r.check(sub, base, val, join(path, k))
			if err != nil {
				return nil, nil, err
			}
			norm[k], celv[k] = n, c
			w.children = append(w.children, child)
		}
	}
	switch extra := extraV.(type) {
	case *omap:
		for _, k := range sorted {
			if _, known := props.get(k); known {
				continue
			}
			if v[k] == nil {
				return nil, nil, errAt(join(path, k), "is empty")
			}
			n, c, child, err := r.check(extra, base, v[k], join(path, k))
			if err != nil {
				return nil, nil, err
			}
			child.key = k
			norm[k], celv[k] = n, c
			w.children = append(w.children, child)
		}
	case bool:
		if extra {
			for _, k := range sorted {
				if _, known := props.get(k); !known {
					norm[k], celv[k] = v[k], v[k]
				}
			}
		}
	}
	if err := r.checkVariant(s, base, v, path, norm, celv, w); err != nil {
		return nil, nil, err
	}
	return norm, celv, nil
}

// checkVariant applies an x-variants keyword: the value of its field
// names a case (a schema among the properties of the node "cases" refers
// to), and the object's other fields are checked against it. A name that
// is not a case is an error unless the variants are open (the component
// then checks it). Fields the case normalizes replace the unchecked ones.
func (r *reader) checkVariant(s *omap, base string, v map[string]any, path string, norm, celv map[string]any, w *walkNode) error {
	xv := s.sub("x-variants")
	if xv == nil {
		return nil
	}
	on := xv.str("field")
	name, _ := norm[on].(string)
	cases, cbase, err := r.c.resolve(xv.str("cases"), base)
	if err != nil {
		return err
	}
	props := cases.sub("properties")
	node := props.sub(name)
	if node == nil {
		if open, _ := xv.get("open"); open == true {
			return nil
		}
		return errAt(join(path, on), "%s is not one of %s", FormatValue(name), strings.Join(props.keys, ", "))
	}
	rest := make(map[string]any, len(v))
	for k, e := range v {
		if k != on {
			rest[k] = e
		}
	}
	n, c, child, err := r.check(node, cbase, rest, path)
	if err != nil {
		return err
	}
	for k, e := range n.(map[string]any) {
		norm[k] = e
	}
	for k, e := range c.(map[string]any) {
		celv[k] = e
	}
	w.children = append(w.children, child.children...) // the parameters are this object's fields
	return nil
}

func (r *reader) checkArray(s *omap, base string, v []any, path string, w *walkNode) (any, any, error) {
	plural := func(n int) string {
		if n == 1 {
			return ""
		}
		return "s"
	}
	if mv, ok := s.get("minItems"); ok {
		if n := int(mv.(int64)); len(v) < n {
			return nil, nil, errAt(path, "%s", r.message(s, "minItems", fmt.Sprintf("needs at least %d item%s", n, plural(n))))
		}
	}
	if mv, ok := s.get("maxItems"); ok {
		if n := int(mv.(int64)); len(v) > n {
			return nil, nil, errAt(path, "%s", r.message(s, "maxItems", fmt.Sprintf("takes at most %d item%s", n, plural(n))))
		}
	}
	items := s.sub("items")
	if items == nil {
		return v, v, nil
	}
	norm := make([]any, 0, len(v))
	celv := make([]any, 0, len(v))
	for i, e := range v {
		n, c, child, err := r.check(items, base, e, path+"["+strconv.Itoa(i)+"]")
		if err != nil {
			return nil, nil, err
		}
		child.index = int64(i)
		child.before = celv[:len(celv):len(celv)] // the items before it; later appends never touch this prefix
		norm = append(norm, n)
		celv = append(celv, c)
		w.children = append(w.children, child)
	}
	return norm, celv, nil
}

func (r *reader) rules(w *walkNode, root any) error {
	s := w.schema
	rules := rulesOf(s)
	if len(rules) > 0 {
		lets := letsOf(s)
		before := w.before
		if before == nil {
			before = []any{}
		}
		act := map[string]any{"self": w.celv, "root": root, "key": w.key, "index": w.index, "before": before}
		for _, ru := range rules {
			ok, err := r.eval(ru.rule, lets, act, w.path)
			if err != nil {
				return err
			}
			if b, isBool := ok.(bool); isBool && b {
				continue
			}
			field := ru.field
			if ru.fieldExpr != "" {
				fv, err := r.eval(ru.fieldExpr, lets, act, w.path)
				if err != nil {
					return err
				}
				field = fmt.Sprint(fv)
			}
			mv, err := r.eval(ru.message, lets, act, w.path)
			if err != nil {
				return err
			}
			p := w.path
			if field != "" {
				p = join(p, field)
			}
			return &Error{Path: p, Message: fmt.Sprint(mv)}
		}
	}
	for _, c := range w.children {
		if err := r.rules(c, root); err != nil {
			return err
		}
	}
	return nil
}

// ErrSchema marks a failure of the schema itself (a rule that cannot be
// evaluated), not of the document.
var ErrSchema = errors.New("schema error")

func (r *reader) eval(expr string, lets map[string]string, act map[string]any, path string) (any, error) {
	s, err := substitute(expr, lets)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	p, err := program(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	out, _, err := p.Eval(act)
	if err != nil {
		where := path
		if where == "" {
			where = "(document)"
		}
		return nil, fmt.Errorf("%w: %s: CEL %q failed: %v", ErrSchema, where, expr, err)
	}
	return out.Value(), nil
}

var _ = cel.DynType

// The bounds of a configuration file (docs/topology.md, "Limits"): its size,
// and its YAML nodes counting every alias as the nodes it repeats (so an
// alias bomb is refused before it is expanded). The Python reader
// (robinhood_common.contract) has the same bounds and messages; the shared
// cases are in tests/config.
// Collections may nest at most MaxConfigDepth deep as written (aliases not
// followed), so deep nesting is refused before anything recursive meets it.
const (
	MaxConfigBytes = 2 << 20
	MaxConfigNodes = 250_000
	MaxConfigDepth = 64
)

var (
	tooLarge     = fmt.Sprintf("the file is more than %d bytes, the most a configuration file may have", MaxConfigBytes)
	tooManyNodes = fmt.Sprintf("more than %d YAML nodes, counting what aliases repeat: a configuration file may have at most %d",
		MaxConfigNodes, MaxConfigNodes)
	tooDeep = fmt.Sprintf("more than %d levels of nesting: a configuration file may nest its lists and mappings at most %d deep",
		MaxConfigDepth, MaxConfigDepth)
)

// nestingDepth is how deep n's collections nest as written (aliases are not
// followed: their size is countNodes' to bound), without recursion.
func nestingDepth(root *yaml.Node) int {
	type at struct {
		n *yaml.Node
		d int
	}
	deepest, stack := 0, []at{{root, 0}}
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		d := top.d
		if top.n.Kind == yaml.MappingNode || top.n.Kind == yaml.SequenceNode {
			d++
			deepest = max(deepest, d)
		}
		for _, k := range top.n.Content {
			stack = append(stack, at{k, d})
		}
	}
	return deepest
}

// countNodes is n's node count with aliases expanded (a scalar 1, a
// collection 1 + its items', mapping keys included; an alias its target's),
// memoized per node, and stopping early past MaxConfigNodes.
func countNodes(n *yaml.Node, memo map[*yaml.Node]int) int {
	if c, ok := memo[n]; ok {
		return c
	}
	c := 0
	switch n.Kind {
	case yaml.DocumentNode:
		for _, k := range n.Content {
			c += countNodes(k, memo)
		}
	case yaml.AliasNode:
		c = countNodes(n.Alias, memo)
	case yaml.MappingNode, yaml.SequenceNode:
		c = 1
		for _, k := range n.Content {
			if c += countNodes(k, memo); c > MaxConfigNodes {
				break
			}
		}
	default:
		c = 1
	}
	memo[n] = c
	return c
}

// ReadConfigFile reads a configuration file of at most MaxConfigBytes,
// without reading more of a larger one; a path that is not a regular file
// (a named pipe, a device) is refused without blocking (lib/safefile).
func ReadConfigFile(path string) ([]byte, error) {
	b, err := safefile.ReadFile(path, MaxConfigBytes)
	if errors.Is(err, safefile.ErrTooLarge) {
		return nil, &Error{Message: tooLarge}
	}
	return b, err
}

// CheckSize refuses a document of more than MaxConfigBytes: an *Error at
// the document.
func CheckSize(b []byte) error {
	if len(b) > MaxConfigBytes {
		return &Error{Message: tooLarge}
	}
	return nil
}

// CheckBounds applies the bounds of a configuration file to a document
// another reader parsed (a scenario): at most MaxConfigDepth levels of
// nesting and MaxConfigNodes nodes, counting what aliases repeat; an *Error
// at the document otherwise.
func CheckBounds(root *yaml.Node) error {
	if nestingDepth(root) > MaxConfigDepth {
		return &Error{Message: tooDeep}
	}
	if n := countNodes(root, map[*yaml.Node]int{}); n > MaxConfigNodes {
		return &Error{Message: tooManyNodes}
	}
	return nil
}

// ParseYAML decodes a YAML document into the reader's representation; an
// empty document, bad YAML or a document beyond the bounds is an *Error at
// the document.
func ParseYAML(b []byte, what string) (any, error) {
	if err := CheckSize(b); err != nil {
		return nil, err
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil {
		if err.Error() == "EOF" {
			return nil, &Error{Message: "empty " + what}
		}
		if strings.Contains(err.Error(), "exceeded max depth") { // yaml.v3's own bound (10000), far past ours
			return nil, &Error{Message: tooDeep}
		}
		return nil, &Error{Message: "not valid YAML: " + err.Error()}
	}
	if err := CheckBounds(&root); err != nil {
		return nil, err
	}
	var v any
	if err := root.Decode(&v); err != nil {
		return nil, &Error{Message: "not valid YAML: " + err.Error()}
	}
	if v == nil {
		return nil, &Error{Message: "empty " + what}
	}
	p, err := plain(v)
	if err != nil {
		return nil, &Error{Message: err.Error()}
	}
	return p, nil
}
