package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/keystream"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// streamSpec is one --stream BACKEND=FILE[,format=F][,skip=N].
type streamSpec struct {
	text    string
	backend string
	file    string
	format  keystream.Format
	skip    int64
}

// streamFlags collects the repeated --stream flag.
type streamFlags []streamSpec

// String is the flags as given.
func (s *streamFlags) String() string {
	parts := make([]string, len(*s))
	for i, sp := range *s {
		parts[i] = sp.text
	}
	return strings.Join(parts, " ")
}

// Set parses BACKEND=FILE[,format=F][,skip=N]. The options are read from
// the end, so a file name may hold commas and '=' (but not end in
// ",format=…" or ",skip=…").
func (s *streamFlags) Set(v string) error {
	backend, rest, ok := strings.Cut(v, "=")
	if !ok || backend == "" || rest == "" {
		return fmt.Errorf("%q is not BACKEND=FILE[,format=arc|fetchers|keysize][,skip=N]", v)
	}
	sp := streamSpec{text: v, backend: backend}
	seen := map[string]bool{}
	for {
		i := strings.LastIndexByte(rest, ',')
		if i < 0 {
			break
		}
		name, val, isOpt := strings.Cut(rest[i+1:], "=")
		if !isOpt || !optionName(name) {
			break
		}
		if seen[name] {
			return fmt.Errorf("%q: %s is given twice", v, name)
		}
		seen[name] = true
		switch name {
		case "format":
			f, err := keystream.ParseFormat(val)
			if err != nil || val == "" {
				return fmt.Errorf("%q: format %q is not one of arc, fetchers, keysize", v, val)
			}
			sp.format = f
		case "skip":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%q: skip=%s is not a number of records (a whole number ≥ 0)", v, val)
			}
			sp.skip = n
		default:
			return fmt.Errorf("%q: unknown option %q (known: format, skip)", v, name)
		}
		rest = rest[:i]
	}
	if rest == "" {
		return fmt.Errorf("%q: no file", v)
	}
	sp.file = rest
	for _, o := range *s {
		if o.backend == backend {
			return fmt.Errorf("%q: backend %s already has a stream (%s)", v, backend, o.text)
		}
	}
	*s = append(*s, sp)
	return nil
}

// optionName reports whether s looks like an option's name (lowercase
// letters), which must then be a known one.
func optionName(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz") == ""
}

// feed is one backend's stream during an import.
type feed struct {
	spec streamSpec
	r    *keystream.Reader
	used int64 // records put into the trace
}

func (f *feed) name() string {
	return fmt.Sprintf("stream %s (backend %s)", f.spec.file, f.spec.backend)
}

// importMemoryLimit is the soft memory limit of an import (GOMEMLIMIT
// overrides it); the collector works harder near it, never fails.
const importMemoryLimit = 64 << 20

// errShort stops the generation when a stream runs out.
type errShort struct{ f *feed }

// Error names the stream.
func (e *errShort) Error() string { return e.f.name() + " ran out" }

func cmdImport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("import", "tracegen import (--requests N | --duration D) --stream BACKEND=FILE[,format=arc|fetchers|keysize][,skip=N] ... [synth flags]", stderr)
	tf := newTraceFlags(fs, "output file (- for stdout); written to a temporary file beside it and renamed at the end",
		"print the fitted request mix's expected Table 1 instead of a trace (as tracegen synth)")
	var streams streamFlags
	fs.Var(&streams, "stream", "BACKEND=FILE[,format=arc|fetchers|keysize][,skip=N]: the backend's keys (and sizes) in order from FILE, after skipping N records (repeatable; format detected unless given)")
	o, g, err := tf.generator(fs, args)
	if err != nil {
		return err
	}
	if len(streams) == 0 && !*tf.describe {
		return errors.New("give at least one --stream BACKEND=FILE (without one, tracegen synth writes the same trace)")
	}
	if err := checkStreams(streams, g.Names()); err != nil {
		return err
	}
	if *tf.describe {
		return writeDescription(stdout, g)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// What an import holds is bounded (the streams' size tables, the
		// decompressors, the generator): a soft limit keeps the collector's
		// slack from doubling the peak (docs/benchmarks.md).
		debug.SetMemoryLimit(importMemoryLimit)
	}
	feeds := map[string]*feed{}
	defer func() {
		for _, f := range feeds {
			f.r.Close()
		}
	}()
	lim := tf.limit()
	if err := openFeeds(feeds, streams, o, lim); err != nil {
		return err
	}
	each := substitute(feeds, g)

	// Each stream is read as far as the run needs and no further (a
	// malformed line or a damaged zstd stream beyond is not met).
	start := time.Now()
	n, err := writeOut(*tf.out, stdout, stderr, func(w io.Writer) (int64, error) { return g.WriteEach(w, lim, each) })
	var short *errShort
	if errors.As(err, &short) {
		return shortStream(o, lim, short.f)
	}
	if err != nil {
		return err
	}
	logImport(stderr, n, *tf.out, time.Since(start), streams, feeds)
	return nil
}

// checkStreams: every stream's backend is one of the trace's.
func checkStreams(streams streamFlags, names []string) error {
	for _, sp := range streams {
		if !slices.Contains(names, sp.backend) {
			return fmt.Errorf("--stream %s: the trace has no backend %q (backends: %s; --backend-names names them)",
				sp.text, sp.backend, strings.Join(slices.Sorted(slices.Values(names)), ","))
		}
	}
	return nil
}

// openFeeds opens every stream into feeds (the caller closes them, also
// on an error).
func openFeeds(feeds map[string]*feed, streams streamFlags, o synth.Options, lim synth.Limit) error {
	// What the run takes from each backend's stream, counted once on a fresh
	// generator when a fetchers stream's first pass needs to know where to
	// stop; the streams of every format are read no further either.
	var need map[string]int64
	needed := func(backend string) func() (int64, error) {
		return func() (int64, error) {
			if need == nil {
				var err error
				if need, err = queriesPerBackend(o, lim); err != nil {
					return 0, err
				}
			}
			return need[backend], nil
		}
	}
	for _, sp := range streams {
		r, err := keystream.Open(sp.file, keystream.Options{Format: sp.format, Skip: sp.skip, MinSize: o.MinSize,
			MaxSize: o.MaxSize, Needed: needed(sp.backend), SizeSlots: keystream.DefaultSizeSlots / len(streams)})
		if err != nil {
			return fmt.Errorf("--stream %s: %w", sp.text, err)
		}
		feeds[sp.backend] = &feed{spec: sp, r: r}
	}
	return nil
}

// substitute is what puts the streams' keys into a request: every query
// to a backend with a stream takes its next records' keys (and sizes, or
// the synthesized size of the key).
func substitute(feeds map[string]*feed, g *synth.Generator) func(req *trace.Request) error {
	return func(req *trace.Request) error {
		for _, layer := range req.Layers {
			for i := range layer {
				q := &layer[i]
				f := feeds[q.Backend]
				if f == nil {
					continue
				}
				q.IDs = q.IDs[:0] // the ids name the synthetic keys
				for j := range q.Keys {
					rec, err := f.r.Next()
					if err == io.EOF {
						return &errShort{f}
					}
					if err != nil {
						return fmt.Errorf("--stream %s: %w", f.spec.text, err)
					}
					q.Keys[j] = rec.Key
					if rec.HasSize {
						q.Sizes[j] = rec.Size
					} else {
						q.Sizes[j], _ = g.SizeOf(q.Backend, rec.Key)
					}
					f.used++
				}
			}
		}
		return nil
	}
}

// logImport logs the trace written, what each stream gave, and a warning
// for each stream whose size table filled.
func logImport(stderr io.Writer, n int64, out string, el time.Duration, streams streamFlags, feeds map[string]*feed) {
	var attrs []any
	for _, sp := range streams {
		f := feeds[sp.backend]
		attrs = append(attrs, "records_"+sp.backend, f.used, "format_"+sp.backend, string(f.r.Format()))
		if keys, full := f.r.SizeTable(); full {
			slog.New(slog.NewTextHandler(stderr, nil)).Warn("the stream's size table is full: keys met after it filled take the synthesized size on a miss (docs/workloads.md, \"Formats\")",
				"stream", sp.text, "keys_remembered", keys)
		}
	}
	logWritten(stderr, n, out, el, attrs...)
}

// queriesPerBackend counts, on a fresh generator, the queries the whole
// run sends each backend: the records it takes from the backend's stream.
func queriesPerBackend(o synth.Options, lim synth.Limit) (map[string]int64, error) {
	g, err := synth.New(o)
	if err != nil {
		return nil, err
	}
	need := map[string]int64{}
	if _, err := g.Each(lim, func(r *trace.Request) error {
		for _, l := range r.Layers {
			for i := range l {
				need[l[i].Backend] += int64(l[i].Len())
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return need, nil
}

// shortStream is the error of a stream that ran out: how many records it
// has, how many the whole run takes from it.
func shortStream(o synth.Options, lim synth.Limit, f *feed) error {
	need, err := queriesPerBackend(o, lim)
	if err != nil {
		return err
	}
	had := f.r.Count()
	return fmt.Errorf("%s ran out: it has %d records (%d after skip=%d), the run needs %d (its queries to %s); give a shorter --duration or --requests, a smaller skip, or a longer stream",
		f.name(), had, had-f.spec.skip, f.spec.skip, need[f.spec.backend], f.spec.backend)
}

// writeOut writes to stdout when out is "-", else to the file out
// (writeAtomically).
func writeOut(out string, stdout, stderr io.Writer, write func(io.Writer) (int64, error)) (int64, error) {
	if out == "-" {
		return write(stdout)
	}
	return writeAtomically(out, write, stderr)
}

// writeAtomically writes a file through a temporary file in its folder,
// renamed over it at the end; on any error the temporary file is removed and
// nothing appears at path. SIGINT or SIGTERM while it writes removes the
// temporary file too, then ends the process (status 128 + the signal's
// number, as a shell reports a process the signal ended), saying so on
// stderr. A nil stderr leaves the signals to the caller (capture ends its
// log on one and writes what it has).
func writeAtomically(path string, write func(io.Writer) (int64, error), stderr io.Writer) (n int64, err error) {
	// The signals are caught before the temporary file exists, so no signal
	// can find it there with the default action (which would leave it).
	sigs := make(chan os.Signal, 1)
	if stderr != nil {
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	}
	stopped := func(s os.Signal, report bool) {
		if report {
			fmt.Fprintf(stderr, "tracegen: %v while writing %s: stopped, nothing written there\n", s, path)
		}
		os.Exit(128 + int(s.(syscall.Signal)))
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		signal.Stop(sigs)
		if len(sigs) > 0 {
			stopped(<-sigs, true)
		}
		return 0, err
	}
	var mu sync.Mutex // held by the rename, and by a signal's clean-up to the end
	renamed := false
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			mu.Lock()
			if !renamed {
				os.Remove(tmp.Name())
			}
			stopped(s, !renamed)
		case <-done:
		}
	}()
	defer func() {
		signal.Stop(sigs)
		close(done)
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if n, err = write(tmp); err != nil {
		return n, err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return n, err
	}
	if err = tmp.Close(); err != nil {
		return n, err
	}
	mu.Lock()
	defer mu.Unlock()
	err = os.Rename(tmp.Name(), path)
	renamed = err == nil
	return n, err
}
