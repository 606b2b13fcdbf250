package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// Factory is a dispatch policy as registered: what it does, its
// parameters, and how to build one backend's Dispatcher.
type Factory struct {
	// Summary is one line on what the policy does (listed by
	// --list-dispatch-policies).
	Summary string
	// Params returns a pointer to a new parameter struct holding the
	// defaults; nil when the policy takes no parameters. Fields are named
	// by their json tags and documented by their doc tags; a struct with a
	// Validate() error method is validated after decoding.
	Params func() any
	// New builds the Dispatcher of one backend's replicas from validated
	// parameters (the pointer Params returned, filled in; nil without
	// Params).
	New func(params any, rs *Replicas) (Dispatcher, error)
}

var (
	regMu    sync.RWMutex
	registry = map[string]Factory{}
)

// Register adds a policy under name; called from the init function of the
// policy's file. It panics on an empty name, a missing constructor or a
// name registered twice (programming errors).
func Register(name string, f Factory) {
	if name == "" || f.New == nil {
		panic("dispatch.Register: a policy needs a name and a New function")
	}
	if f.Params != nil {
		if p := f.Params(); reflect.TypeOf(p).Kind() != reflect.Pointer || reflect.TypeOf(p).Elem().Kind() != reflect.Struct {
			panic(fmt.Sprintf("dispatch.Register(%q): Params must return a pointer to a struct", name))
		}
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("dispatch.Register: %q is registered twice", name))
	}
	registry[name] = f
}

// Names lists the registered policies in sorted order.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func lookup(name string) (Factory, error) {
	regMu.RLock()
	f, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return Factory{}, fmt.Errorf("policy: %s is not one of %s", config.Quote(name), strings.Join(Names(), ", "))
	}
	return f, nil
}

// Params decodes and validates a policy's parameters (the topology's
// dispatch block without "policy"); errors name the field. It returns the
// filled parameter struct (nil for a policy without parameters).
func Params(spec config.Dispatch) (any, error) {
	f, err := lookup(spec.Policy)
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
	fields := paramFields(reflect.TypeOf(p).Elem())
	for _, k := range sortedKeys(spec.Params) {
		if _, ok := fields[k]; !ok {
			return nil, fmt.Errorf("%s: unknown parameter of policy %s (known: %s)", k, spec.Policy, strings.Join(fieldNames(reflect.TypeOf(p).Elem()), ", "))
		}
	}
	b, err := json.Marshal(spec.Params)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%s: %s is not %s", te.Field, config.FormatValue(spec.Params[te.Field]), kindName(te.Type))
		}
		return nil, err
	}
	if v, ok := p.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Build returns the Dispatcher of spec's policy over rs, with its
// parameters validated by Params.
func Build(spec config.Dispatch, rs *Replicas) (Dispatcher, error) {
	p, err := Params(spec)
	if err != nil {
		return nil, err
	}
	f, _ := lookup(spec.Policy)
	return f.New(p, rs)
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

// Describe lists every registered policy with its parameters and defaults.
func Describe() []Description {
	var out []Description
	for _, n := range Names() {
		f, _ := lookup(n)
		d := Description{Name: n, Summary: f.Summary, Params: []Param{}}
		if f.Params != nil {
			v := reflect.ValueOf(f.Params()).Elem()
			t := v.Type()
			for i := range t.NumField() {
				sf := t.Field(i)
				name := jsonName(sf)
				if name == "" {
					continue
				}
				d.Params = append(d.Params, Param{Name: name, Type: kindName(sf.Type), Default: v.Field(i).Interface(), Doc: sf.Tag.Get("doc")})
			}
		}
		out = append(out, d)
	}
	return out
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

func paramFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for _, n := range fieldNames(t) {
		out[n] = true
	}
	return out
}

func fieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := jsonName(t.Field(i)); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func kindName(t reflect.Type) string {
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
		if t == reflect.TypeOf(config.Duration(0)) {
			return "a duration"
		}
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
