package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
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
	if v, ok := p.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Param describes one parameter of a policy.
type Param struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Default any    `json:"default"`
	Doc     string `json:"doc,omitempty"`
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
				d.Params = append(d.Params, Param{Name: name, Type: kindName(sf.Type), Default: def, Doc: sf.Tag.Get("doc")})
			})
		}
		out = append(out, d)
	}
	return out
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
