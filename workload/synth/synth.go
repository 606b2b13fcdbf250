// Package synth synthesizes request traces (docs/workloads.md) whose structure follows
// a profile — today "onerf", the paper's Table 1 extended to N backends —
// with Poisson arrivals, Zipf key popularity per backend and heavy-tailed
// object sizes that are a pure function of (backend, key).
//
// A Generator fits a mix of hundreds of request types to the profile at
// start-up (Fit), then draws requests from it. The same Options and seed
// give the same requests, byte for byte. docs/workloads.md describes the
// model and its defaults.
package synth

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// PerBackend is a setting with a default and per-backend overrides.
type PerBackend[T any] struct {
	Default T
	By      map[string]T
}

// For returns the value for the named backend.
func (p PerBackend[T]) For(name string) T {
	if v, ok := p.By[name]; ok {
		return v
	}
	return p.Default
}

// Defaults of Options, chosen for the project's 2-core testbed
// (docs/workloads.md explains each).
const (
	DefaultRate              = 200.0
	DefaultTypes             = 400
	DefaultQueriesPerRequest = 50.0
	DefaultKeys              = 100000
	DefaultZipf              = 0.9
	DefaultMeanSize          = 2048.0
	DefaultSizeSigma         = 1.8
	DefaultMinSize           = 1
	DefaultMaxSize           = 512 << 10
)

// Options configure a Generator.
type Options struct {
	Profile  string
	Backends int
	// Names are the backend names, most queried first; empty means b1…bN.
	Names             []string
	Match             Match
	QueriesPerRequest float64
	Types             int
	Seed              uint64
	// Rate is the mean arrival rate in requests per second.
	Rate float64
	// RateSchedule multiplies Rate piecewise (empty: Rate throughout):
	// Poisson arrivals at the current rate.
	RateSchedule []RateStep
	Keys         PerBackend[int]
	Zipf         PerBackend[float64]
	MeanSize     PerBackend[float64]
	SizeSigma    float64
	MinSize      int64
	MaxSize      int64
	Uncacheable  float64
}

// DefaultOptions returns the onerf profile with the testbed defaults.
func DefaultOptions() Options {
	return Options{
		Profile:           "onerf",
		Backends:          DefaultBackends,
		Match:             MatchQuery,
		QueriesPerRequest: DefaultQueriesPerRequest,
		Types:             DefaultTypes,
		Seed:              1,
		Rate:              DefaultRate,
		Keys:              PerBackend[int]{Default: DefaultKeys},
		Zipf:              PerBackend[float64]{Default: DefaultZipf},
		MeanSize:          PerBackend[float64]{Default: DefaultMeanSize},
		SizeSigma:         DefaultSizeSigma,
		MinSize:           DefaultMinSize,
		MaxSize:           DefaultMaxSize,
	}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// DefaultNames returns b1…bn.
func DefaultNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "b" + strconv.Itoa(i+1)
	}
	return out
}

// batchDist samples 1 + Poisson(λ) through an alias table over its
// probabilities (up to where the tail is below 10^-12).
type batchDist struct{ table alias }

func newBatchDist(mean float64) batchDist {
	lambda := mean - 1
	if lambda <= 0 {
		return batchDist{table: newAlias([]float64{1})}
	}
	var pmf []float64
	s := 0.0
	for k := 0; ; k++ {
		lg, _ := math.Lgamma(float64(k + 1))
		p := math.Exp(-lambda + float64(k)*math.Log(lambda) - lg)
		pmf = append(pmf, p)
		s += p
		if (s > 1-1e-12 && float64(k) > lambda) || k > 100000 {
			break
		}
	}
	return batchDist{table: newAlias(pmf)}
}

func (b *batchDist) sample(u uint64) int { return 1 + b.table.sample(u) }

type genType struct {
	backends []int // indices into Generator.names, in name order
	batch    []batchDist
}

// Generator draws requests. It is not safe for concurrent use.
type Generator struct {
	names []string
	mix   *Mix
	types alias
	typ   []genType
	ks    []*keyspace
	src   *rand.PCG
	rng   *rand.Rand
	rate  float64
	// sched is the rate schedule; nil means the constant rate.
	sched *schedule

	n   int64   // requests drawn
	now float64 // arrival time in ms
	req trace.Request
	// keybuf holds the key strings of the current request back to back;
	// keyEnd[j][i] is where key i of backend slot j ends.
	keybuf []byte
	keyEnd [][]int
	ranks  []int32 // the current batch's ranks
	set    []int32 // open-addressing set for drawBatch
}

// New validates the options, fits the request mix and builds the key
// spaces. Errors name the option at fault.
func New(o Options) (*Generator, error) {
	prof, err := Lookup(o.Profile)
	if err != nil {
		return nil, err
	}
	if o.Match != MatchQuery && o.Match != MatchBatch {
		return nil, fmt.Errorf("match: %q is not one of query, batch", o.Match)
	}
	if !(o.Rate > 0) || math.IsInf(o.Rate, 0) {
		return nil, fmt.Errorf("rate: %v requests/s must be positive", o.Rate)
	}
	if err := checkSchedule(o.RateSchedule); err != nil {
		return nil, err
	}
	names := o.Names
	if len(names) == 0 {
		if o.Backends < 1 {
			return nil, fmt.Errorf("backends: %d must be at least 1", o.Backends)
		}
		names = DefaultNames(o.Backends)
	} else if o.Backends != 0 && o.Backends != len(names) {
		return nil, fmt.Errorf("backend-names: %d names given for --backends %d", len(names), o.Backends)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if !nameRE.MatchString(n) {
			return nil, fmt.Errorf("backend-names: %q must be 1-64 characters of letters, digits, '_', '.', '-'", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("backend-names: %q is given twice", n)
		}
		seen[n] = true
	}
	for _, ov := range []struct {
		flag  string
		names []string
	}{{"keys", keysOf(o.Keys.By)}, {"zipf", keysOf(o.Zipf.By)}, {"mean-size", keysOf(o.MeanSize.By)}} {
		for _, n := range ov.names {
			if !seen[n] {
				return nil, fmt.Errorf("%s: no backend is named %q (backends: %s)", ov.flag, n, strings.Join(names, ","))
			}
		}
	}
	targets, err := prof.Targets(len(names), o.Match)
	if err != nil {
		return nil, err
	}
	mix, err := Fit(targets, o.Match, FitParams{Types: o.Types, QueriesPerRequest: o.QueriesPerRequest, Seed: o.Seed})
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", o.Profile, err)
	}
	g := &Generator{names: names, mix: mix, rate: o.Rate, sched: newSchedule(o.RateSchedule, o.Rate)}
	g.src = rand.NewPCG(o.Seed, 0x7472616365) // "trace"
	g.rng = rand.New(g.src)
	sizes := map[float64]*SizeDist{}
	for _, name := range names {
		mean := o.MeanSize.For(name)
		d, ok := sizes[mean]
		if !ok {
			if d, err = NewSizeDist(mean, o.SizeSigma, o.MinSize, o.MaxSize); err != nil {
				return nil, err
			}
			sizes[mean] = d
		}
		ks, err := newKeyspace(name, o.Keys.For(name), o.Zipf.For(name), d, o.Uncacheable)
		if err != nil {
			return nil, fmt.Errorf("backend %s: %w", name, err)
		}
		g.ks = append(g.ks, ks)
	}
	// Types with backends in name order, so the trace writer's sort is a
	// no-op and keys come out in the order they were drawn.
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return names[order[a]] < names[order[b]] })
	pos := make([]int, len(names))
	for p, i := range order {
		pos[i] = p
	}
	weights := make([]float64, len(mix.Types))
	for i, t := range mix.Types {
		weights[i] = t.Weight
		gt := genType{}
		idx := make([]int, len(t.Backends))
		for j := range idx {
			idx[j] = j
		}
		sort.Slice(idx, func(a, b int) bool { return pos[t.Backends[idx[a]]] < pos[t.Backends[idx[b]]] })
		for _, j := range idx {
			gt.backends = append(gt.backends, t.Backends[j])
			gt.batch = append(gt.batch, newBatchDist(t.BatchMean[j]))
		}
		g.typ = append(g.typ, gt)
	}
	g.types = newAlias(weights)
	g.req.HasTs = true
	g.req.Layers = []trace.Layer{make(trace.Layer, 0, len(names))}
	return g, nil
}

func keysOf[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Names returns the backend names, most queried first.
func (g *Generator) Names() []string { return g.names }

// Mix returns the fitted request mix.
func (g *Generator) Mix() *Mix { return g.mix }

// Next draws the next request. The returned request and its slices are
// reused by the following call.
func (g *Generator) Next() *trace.Request {
	g.arrive()
	r := &g.req
	r.T = g.n
	r.TsMs = math.Round(g.now*1000) / 1000 // µs resolution keeps lines short
	g.n++

	ty := &g.typ[g.types.sample(g.src.Uint64())]
	layer := r.Layers[0][:0]
	g.keybuf = g.keybuf[:0]
	for len(g.keyEnd) < len(ty.backends) {
		g.keyEnd = append(g.keyEnd, nil)
	}
	for j, b := range ty.backends {
		ks := g.ks[b]
		k := min(ty.batch[j].sample(g.src.Uint64()), ks.n)
		if cap(layer) > len(layer) {
			layer = layer[:len(layer)+1]
		} else {
			layer = append(layer, trace.BackendQueries{})
		}
		q := &layer[j]
		q.Backend = g.names[b]
		q.Sizes, q.Keys, q.Cacheable, q.IDs = q.Sizes[:0], q.Keys[:0], q.Cacheable[:0], q.IDs[:0]
		ends := g.keyEnd[j][:0]
		ranks := g.drawBatch(ks, k)
		for _, rank := range ranks {
			q.Sizes = append(q.Sizes, ks.size(int(rank)))
			q.Cacheable = append(q.Cacheable, ks.cacheable(int(rank)))
			q.IDs = append(q.IDs, rank)
			g.keybuf = appendBase36(g.keybuf, uint32(rank))
			ends = append(ends, len(g.keybuf))
		}
		g.keyEnd[j] = ends
	}
	// One string for all keys of the request; each key is a substring.
	all := string(g.keybuf)
	start := 0
	for j := range layer {
		q := &layer[j]
		for _, end := range g.keyEnd[j] {
			q.Keys = append(q.Keys, all[start:end])
			start = end
		}
	}
	r.Layers[0] = layer
	return r
}

// arrive advances the clock to the next arrival: exponential gaps at the
// rate, or, with a schedule, at the rate of the moment (one exponential
// draw either way, so a trace without a schedule is what it always was).
func (g *Generator) arrive() {
	if g.sched == nil {
		g.now += g.rng.ExpFloat64() / g.rate * 1000
		return
	}
	g.now = g.sched.next(g.now, g.rng.ExpFloat64())
}

// RateFactor is the schedule's multiplier of the base rate at tMs (1
// without a schedule).
func (g *Generator) RateFactor(tMs float64) float64 { return g.sched.factorAt(tMs) }

// appendBase36 appends v in base 36 with lowercase digits, as
// strconv.FormatUint(v, 36) (KeyString) writes it.
func appendBase36(dst []byte, v uint32) []byte {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var buf [7]byte // 36^7 > 2^32
	i := len(buf)
	for v >= 36 {
		q := v / 36
		i--
		buf[i] = digits[v-q*36]
		v = q
	}
	i--
	buf[i] = digits[v]
	return append(dst, buf[i:]...)
}

// drawBatch draws k distinct Zipf ranks (k ≤ the key space); duplicates,
// found with a small open-addressing set, are redrawn.
func (g *Generator) drawBatch(ks *keyspace, k int) []int32 {
	ranks := g.ranks[:0]
	for i := 0; i < k; i++ {
		ranks = append(ranks, int32(ks.pop.sample(g.src.Uint64())))
	}
	size := 16
	for size < 2*k {
		size *= 2
	}
	if cap(g.set) < size {
		g.set = make([]int32, size)
	}
	set := g.set[:size]
	for i := range set {
		set[i] = -1
	}
	mask := uint32(size - 1)
	insert := func(r int32) bool {
		for h := uint32(r) * 0x9E3779B1 & mask; ; h = (h + 1) & mask {
			switch set[h] {
			case r:
				return false
			case -1:
				set[h] = r
				return true
			}
		}
	}
	for i := range ranks {
		if insert(ranks[i]) {
			continue
		}
		redrawn := false
		for attempt := 0; attempt < 64 && !redrawn; attempt++ {
			ranks[i] = int32(ks.pop.sample(g.src.Uint64()))
			redrawn = insert(ranks[i])
		}
		if !redrawn {
			// The batch covers most of a small key space: take the
			// next free rank.
			r := int32(g.src.Uint64() % uint64(ks.n))
			for !insert(r) {
				r = (r + 1) % int32(ks.n)
			}
			ranks[i] = r
		}
	}
	g.ranks = ranks
	return ranks
}

// Limit says when a trace ends: after Requests requests or at Duration,
// whichever comes first (zero means no limit; one of them must be set).
type Limit struct {
	Requests int64
	Duration time.Duration
}

// Write streams requests to w until the limit, one line each, through a
// buffered writer and one reused line buffer. It returns the number of
// requests written.
func (g *Generator) Write(w io.Writer, lim Limit) (int64, error) {
	return g.WriteEach(w, lim, nil)
}

// WriteEach is Write with each called on every request before it is
// written (nil: none): the hook through which `tracegen import` puts real
// keys into the generated requests. each may change the request's keys,
// sizes and flags in place (the request and its slices are the generator's,
// reused by the next request; IDs must be cleared when keys change); an
// error from it stops the trace and is returned.
func (g *Generator) WriteEach(w io.Writer, lim Limit, each func(*trace.Request) error) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	var line []byte
	n, err := g.Each(lim, func(r *trace.Request) error {
		if each != nil {
			if err := each(r); err != nil {
				return err
			}
		}
		line = trace.AppendJSON(line[:0], r)
		line = append(line, '\n')
		_, err := bw.Write(line)
		return err
	})
	if err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// Each calls f with every request of the trace up to the limit, in order —
// the requests Write would write — and returns how many it was called with
// successfully; f's first error stops it and is returned. The request and
// its slices are reused by the next request.
func (g *Generator) Each(lim Limit, f func(*trace.Request) error) (int64, error) {
	if lim.Requests <= 0 && lim.Duration <= 0 {
		return 0, errors.New("give --requests or --duration")
	}
	var n int64
	endMs := float64(lim.Duration) / float64(time.Millisecond)
	for lim.Requests <= 0 || n < lim.Requests {
		r := g.Next()
		if lim.Duration > 0 && r.TsMs >= endMs {
			break
		}
		if err := f(r); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
