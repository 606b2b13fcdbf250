package dispatch

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// A policy's parameters are declared once, on its parameter struct: the
// json tag names a parameter, the doc tag says what it does, the range tag
// bounds it, a field whose type has a Values() []string method is one of
// those values, and the struct Params returns holds the defaults. Params
// and New check them here; Describe hands the same declaration to
// schema/policies.schema.yaml (scripts/genschema.py), which every reader of
// a topology, Go and Python, checks a dispatch block against.
//
// A range tag is an interval: "[lo,hi]", "(lo,hi]", "[lo,hi)" or "(lo,hi)"
// (a bracket includes its bound, a parenthesis excludes it); lo and hi are
// numbers, or Go durations for a duration parameter.

// enumerated is a parameter type that takes one of a fixed list of values.
type enumerated interface{ Values() []string }

var (
	durationType = reflect.TypeOf(config.Duration(0))
	enumType     = reflect.TypeOf((*enumerated)(nil)).Elem()
)

// interval is a parsed range tag.
type interval struct {
	lo, hi     float64 // seconds for a duration
	loX, hiX   bool    // the bound is excluded
	loS, hiS   string  // the bounds as written
	isDuration bool
}

func parseRange(tag string, isDuration bool) (interval, error) {
	iv := interval{isDuration: isDuration}
	if len(tag) < 5 {
		return iv, fmt.Errorf("range %q is not an interval like [lo,hi]", tag)
	}
	open, closing := tag[0], tag[len(tag)-1]
	lo, hi, ok := strings.Cut(tag[1:len(tag)-1], ",")
	if !ok || (open != '[' && open != '(') || (closing != ']' && closing != ')') {
		return iv, fmt.Errorf("range %q is not an interval like [lo,hi]", tag)
	}
	iv.loX, iv.hiX = open == '(', closing == ')'
	iv.loS, iv.hiS = strings.TrimSpace(lo), strings.TrimSpace(hi)
	var err error
	if iv.lo, err = rangeBound(iv.loS, isDuration); err != nil {
		return iv, fmt.Errorf("range %q: %w", tag, err)
	}
	if iv.hi, err = rangeBound(iv.hiS, isDuration); err != nil {
		return iv, fmt.Errorf("range %q: %w", tag, err)
	}
	if iv.lo > iv.hi {
		return iv, fmt.Errorf("range %q is empty", tag)
	}
	return iv, nil
}

func rangeBound(s string, isDuration bool) (float64, error) {
	if isDuration {
		d, err := time.ParseDuration(s)
		return d.Seconds(), err
	}
	return strconv.ParseFloat(s, 64)
}

// contains reports whether x (seconds for a duration) is in the interval;
// NaN never is.
func (iv interval) contains(x float64) bool {
	if math.IsNaN(x) {
		return false
	}
	if x < iv.lo || (iv.loX && x == iv.lo) {
		return false
	}
	return !(x > iv.hi || (iv.hiX && x == iv.hi))
}

// String is the interval as the contract's readers print it.
func (iv interval) String() string {
	open, closing := "[", "]"
	if iv.loX {
		open = "("
	}
	if iv.hiX {
		closing = ")"
	}
	return open + iv.loS + ", " + iv.hiS + closing
}

// paramKind is the declared type of a field, as the contract names it.
func paramKind(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Implements(enumType):
		return "string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	}
	return ""
}

// declared checks one field's value against its declaration.
func declared(name string, sf reflect.StructField, v reflect.Value) error {
	if e, ok := v.Interface().(enumerated); ok {
		got := v.String()
		for _, w := range e.Values() {
			if got == w {
				return nil
			}
		}
		return fmt.Errorf("%s: %s is not one of %s", name, config.Quote(got), strings.Join(e.Values(), ", "))
	}
	tag := sf.Tag.Get("range")
	if tag == "" {
		return nil
	}
	iv, err := parseRange(tag, sf.Type == durationType)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err) // a programming error, caught by the registry's test
	}
	var x float64
	var shown string
	switch {
	case sf.Type == durationType:
		d := v.Interface().(config.Duration).D()
		x, shown = d.Seconds(), config.Quote(d.String())
	case v.CanInt():
		x, shown = float64(v.Int()), strconv.FormatInt(v.Int(), 10)
	case v.CanFloat():
		x, shown = v.Float(), strconv.FormatFloat(v.Float(), 'g', -1, 64)
	default:
		return fmt.Errorf("%s: a range tag on a %s", name, sf.Type)
	}
	if iv.contains(x) {
		return nil
	}
	if iv.isDuration { // as the contract words a duration's bounds (schema/policies.schema.yaml)
		return fmt.Errorf("%s: %s %s", name, shown, iv.durationMessage(x))
	}
	return fmt.Errorf("%s: %s is out of range %s", name, shown, iv)
}

// durationMessage says which bound of a duration interval x (seconds)
// crosses; the contract's readers print the same (x-messages).
func (iv interval) durationMessage(x float64) string {
	switch {
	case x < iv.lo && iv.loX || x == iv.lo:
		return "must be above " + iv.loS
	case x < iv.lo:
		return "is below the minimum of " + iv.loS
	case iv.hiX:
		return "must be below " + iv.hiS
	}
	return "is above the maximum of " + iv.hiS
}

// validate checks every field of the parameter struct p points to against
// its declaration, in declaration order, then the struct's own Validate()
// error when it has one (a rule across fields).
func validate(p any) error {
	if p == nil {
		return nil
	}
	rv := reflect.ValueOf(p)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return nil
	}
	var first error
	eachField(rv.Elem(), func(name string, sf reflect.StructField, v reflect.Value) {
		if first == nil {
			first = declared(name, sf, v)
		}
	})
	if first != nil {
		return first
	}
	if v, ok := p.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}
