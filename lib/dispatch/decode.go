package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// Params decodes and validates a policy's parameters: spec is a topology's
// dispatch block (`dispatch: {policy: NAME, <parameters>}`). Decoding is
// strict and every error names the field: an unknown name lists the known
// policies, an unknown parameter the policy's parameters, a value of the
// wrong kind what was expected. It returns the filled parameter struct, the
// defaults where spec sets nothing (nil for a policy without parameters),
// ready for New.
func Params(spec config.Dispatch) (any, error) {
	f, err := Lookup(spec.Policy)
	if err != nil {
		return nil, err
	}
	if f.Params == nil {
		for _, k := range sortedKeys(spec.Params) {
			return nil, fmt.Errorf("%s: unknown parameter (policy %s takes none)", k, spec.Policy)
		}
		return nil, nil
	}
	p := f.Params()
	fields := map[string]reflect.Value{}
	var names []string
	eachField(reflect.ValueOf(p).Elem(), func(name string, _ reflect.StructField, v reflect.Value) {
		fields[name] = v
		names = append(names, name)
	})
	for _, k := range sortedKeys(spec.Params) {
		fv, ok := fields[k]
		if !ok {
			return nil, fmt.Errorf("%s: unknown parameter of policy %s (known: %s)", k, spec.Policy, strings.Join(names, ", "))
		}
		if f, ok := spec.Params[k].(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return nil, fmt.Errorf("%s: %s is not a number", k, config.FormatValue(f))
		}
		b, err := json.Marshal(spec.Params[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if err := json.Unmarshal(b, fv.Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return nil, fmt.Errorf("%s: %s is not %s", k, config.FormatValue(spec.Params[k]), kindName(fv.Type()))
			}
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	if err := validate(p); err != nil {
		return nil, err
	}
	return p, nil
}

// Param describes one parameter of a policy: its declaration (declare.go).
type Param struct {
	Name string `json:"name"`
	// Type is what the contract calls it: number, integer, boolean,
	// duration or string.
	Type    string `json:"type"`
	Default any    `json:"default"`
	Doc     string `json:"doc,omitempty"`
	// Minimum and Maximum bound it (numbers, or duration strings for a
	// duration), excluded when the Exclusive flag is set.
	Minimum          any  `json:"minimum,omitempty"`
	Maximum          any  `json:"maximum,omitempty"`
	ExclusiveMinimum bool `json:"exclusive_minimum,omitempty"`
	ExclusiveMaximum bool `json:"exclusive_maximum,omitempty"`
	// Enum lists the values a string parameter takes.
	Enum []string `json:"enum,omitempty"`
}

// Description describes a registered policy.
type Description struct {
	Name    string  `json:"name"`
	Summary string  `json:"summary"`
	Params  []Param `json:"params"`
}

// Describe lists every registered policy with its parameters (named by
// their json tags, documented by their doc tags) and their defaults.
func Describe() []Description {
	var out []Description
	for _, n := range Names() {
		f, _ := Lookup(n)
		d := Description{Name: n, Summary: f.Summary, Params: []Param{}}
		if f.Params != nil {
			eachField(reflect.ValueOf(f.Params()).Elem(), func(name string, sf reflect.StructField, v reflect.Value) {
				def := v.Interface()
				if dur, ok := def.(config.Duration); ok {
					def = dur.D().String()
				}
				d.Params = append(d.Params, describeParam(name, sf, def))
			})
		}
		out = append(out, d)
	}
	return out
}

func describeParam(name string, sf reflect.StructField, def any) Param {
	p := Param{Name: name, Type: paramKind(sf.Type), Default: def, Doc: sf.Tag.Get("doc")}
	if e, ok := reflect.Zero(sf.Type).Interface().(enumerated); ok {
		p.Enum = e.Values()
	}
	if tag := sf.Tag.Get("range"); tag != "" {
		iv, err := parseRange(tag, sf.Type == durationType)
		if err != nil {
			panic(fmt.Sprintf("dispatch: parameter %s: %v", name, err)) // a programming error
		}
		p.ExclusiveMinimum, p.ExclusiveMaximum = iv.loX, iv.hiX
		if iv.isDuration {
			p.Minimum, p.Maximum = iv.loS, iv.hiS
		} else {
			p.Minimum, p.Maximum = jsonNumber(iv.loS), jsonNumber(iv.hiS)
		}
	}
	return p
}

// jsonNumber is a bound as written: an integer stays one.
func jsonNumber(s string) any {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// eachField calls fn for every parameter of the struct v, in declaration
// order; the fields of an embedded struct without a json name (BudgetParams)
// are its own, as encoding/json has them.
func eachField(v reflect.Value, fn func(name string, sf reflect.StructField, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct && sf.Tag.Get("json") == "" {
			eachField(v.Field(i), fn)
			continue
		}
		if name := jsonName(sf); name != "" {
			fn(name, sf, v.Field(i))
		}
	}
}

func jsonName(sf reflect.StructField) string {
	if !sf.IsExported() {
		return ""
	}
	tag, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	if tag == "-" {
		return ""
	}
	if tag == "" {
		return sf.Name
	}
	return tag
}

func kindName(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(config.Duration(0)):
		return "a duration"
	case t == reflect.TypeOf(QRule("")):
		return "one of " + string(QCorrected) + ", " + string(QAsPrinted)
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t.String() == "time.Duration" {
			return "a duration in nanoseconds"
		}
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
