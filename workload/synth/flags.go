package synth

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Flags registers the generator's options on fs — the flags of
// `tracegen synth`, which `bin/sim arm --synth` takes too — and returns a
// function that builds the Options once fs is parsed. Errors name the flag.
func Flags(fs *flag.FlagSet) func() (Options, error) {
	d := DefaultOptions()
	profile := fs.String("profile", d.Profile, "workload profile: "+strings.Join(ProfileNames(), ", "))
	backends := fs.Int("backends", d.Backends, "number of backends (onerf: Table 1's ten, extended or cut as docs/workloads.md says)")
	names := fs.String("backend-names", "", "comma-separated backend names, most queried first (default b1..bN)")
	match := fs.String("match", string(d.Match), "Table 1 column to reproduce besides request % and fanout: query (query %, 50 queries/request) or batch (mean batch sizes)")
	qpr := fs.Float64("queries-per-request", d.QueriesPerRequest, "mean queries per request with --match query")
	types := fs.Int("types", d.Types, "number of request types to draw")
	rate := fs.Float64("rate", d.Rate, "mean arrival rate, requests/s (Poisson); sets ts_ms")
	rateSchedule := fs.String("rate-schedule", "", "piecewise-constant multipliers of --rate, AT:FACTOR,... (e.g. 0s:1,60s:1.5,100s:1): Poisson arrivals at the current rate")
	seed := fs.Uint64("seed", d.Seed, "random seed: the same seed and flags give a byte-identical trace")
	keys := fs.String("keys", strconv.Itoa(d.Keys.Default), "key-space size per backend: N or N,NAME=N,...")
	zipf := fs.String("zipf", strconv.FormatFloat(d.Zipf.Default, 'g', -1, 64), "Zipf exponent of key popularity: S or S,NAME=S,...")
	meanSize := fs.String("mean-size", strconv.FormatFloat(d.MeanSize.Default, 'g', -1, 64), "mean object size in bytes: B or B,NAME=B,...")
	sigma := fs.Float64("size-sigma", d.SizeSigma, "shape (σ) of the log-normal object sizes")
	minSize := fs.Int64("min-size", d.MinSize, "smallest object size, bytes")
	maxSize := fs.Int64("max-size", d.MaxSize, "largest object size, bytes (memcached's item limit is 1 MB)")
	uncacheable := fs.Float64("uncacheable", d.Uncacheable, "fraction of keys that are not cacheable (C = 0)")
	return func() (Options, error) {
		o := d
		o.Profile, o.Backends, o.Match, o.QueriesPerRequest, o.Types = *profile, *backends, Match(*match), *qpr, *types
		o.Rate, o.Seed, o.SizeSigma, o.MinSize, o.MaxSize, o.Uncacheable = *rate, *seed, *sigma, *minSize, *maxSize, *uncacheable
		if *names != "" {
			o.Names = strings.Split(*names, ",")
			set := false
			fs.Visit(func(f *flag.Flag) { set = set || f.Name == "backends" })
			if !set {
				o.Backends = len(o.Names)
			}
		}
		var err error
		if o.Keys, err = perBackend("keys", *keys, d.Keys.Default, atoi); err != nil {
			return o, err
		}
		if o.Zipf, err = perBackend("zipf", *zipf, d.Zipf.Default, atof); err != nil {
			return o, err
		}
		if o.MeanSize, err = perBackend("mean-size", *meanSize, d.MeanSize.Default, atof); err != nil {
			return o, err
		}
		if o.RateSchedule, err = ParseRateSchedule(*rateSchedule); err != nil {
			return o, err
		}
		return o, nil
	}
}

// ParseArgs is Options from `tracegen synth` flags alone (no --requests,
// --duration or --out): what `bin/sim arm --synth "ARGS"` generates in
// process.
func ParseArgs(args []string) (Options, error) {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	build := Flags(fs)
	if err := fs.Parse(args); err != nil {
		return Options{}, fmt.Errorf("synth: %w", err)
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("synth: unexpected argument %q", fs.Arg(0))
	}
	o, err := build()
	if err != nil {
		return o, fmt.Errorf("synth: %w", err)
	}
	return o, nil
}

// perBackend parses "DEFAULT[,NAME=VALUE...]" (or only NAME=VALUE items).
func perBackend[T any](flagName, spec string, def T, conv func(string) (T, error)) (PerBackend[T], error) {
	out := PerBackend[T]{Default: def}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, named := strings.Cut(item, "=")
		if !named {
			val = name
		}
		v, err := conv(val)
		if err != nil {
			return out, fmt.Errorf("--%s: %q: %v", flagName, item, err)
		}
		if !named {
			out.Default = v
			continue
		}
		if out.By == nil {
			out.By = map[string]T{}
		}
		if _, dup := out.By[name]; dup {
			return out, fmt.Errorf("--%s: backend %q is given twice", flagName, name)
		}
		out.By[name] = v
	}
	return out, nil
}

func atoi(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("not an integer")
	}
	return v, nil
}

func atof(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, errors.New("not a number")
	}
	return v, nil
}
