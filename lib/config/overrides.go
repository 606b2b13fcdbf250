package config

import (
	"errors"
	"flag"
	"strings"
)

// Overrides applies command-line flags onto a document before it is
// validated, so a flag and the topology field it overrides go through the
// same rules, and an error caused by a flag says so:
//
//	rbc_server.window (from --window): "5" is not a duration (...)
type Overrides struct {
	// byPath maps a document path to the flag that set it.
	byPath map[string]string
}

// Set puts v at field of doc (a mapping at path prefix, for messages),
// recording that --flag set it.
func (o *Overrides) Set(doc map[string]any, prefix, field, flagName string, v any) {
	if o.byPath == nil {
		o.byPath = map[string]string{}
	}
	doc[field] = v
	o.byPath[join(prefix, field)] = flagName
}

// Annotate adds "(from --flag)" to the path of a validation error caused
// by a flag's value.
func (o *Overrides) Annotate(err error) error {
	var ce *Error
	if !errors.As(err, &ce) {
		return err
	}
	for p, f := range o.byPath {
		if ce.Path == p || strings.HasPrefix(ce.Path, p+".") || strings.HasPrefix(ce.Path, p+"[") || strings.HasPrefix(p, ce.Path+".") {
			return &Error{Path: ce.Path + " (from --" + f + ")", Message: ce.Message}
		}
	}
	return err
}

// SetFlags returns the names of the flags given on the command line.
func SetFlags(fs *flag.FlagSet) map[string]bool {
	out := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { out[f.Name] = true })
	return out
}
