package synth

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

func small(o Options) Options {
	o.Keys.Default = 5000
	return o
}

func write(t *testing.T, o Options, lim Limit) []byte {
	t.Helper()
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := g.Write(&buf, lim); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDeterministicBySeed(t *testing.T) {
	o := small(DefaultOptions())
	a := write(t, o, Limit{Requests: 2000})
	b := write(t, o, Limit{Requests: 2000})
	if !bytes.Equal(a, b) {
		t.Fatal("the same options and seed gave different traces")
	}
	o.Seed = 2
	c := write(t, o, Limit{Requests: 2000})
	if bytes.Equal(a, c) {
		t.Fatal("seeds 1 and 2 gave the same trace")
	}
	if n := bytes.Count(a, []byte("\n")); n != 2000 {
		t.Fatalf("%d lines, want 2000", n)
	}
}

// Every line parses, t counts requests, ts_ms increases with Poisson gaps
// of mean 1/rate, sizes and cacheability are functions of (backend, key),
// and a batch never repeats a key.
func TestTraceContents(t *testing.T) {
	o := small(DefaultOptions())
	o.Rate = 500
	o.Uncacheable = 0.1
	d, err := NewSizeDist(o.MeanSize.Default, o.SizeSigma, o.MinSize, o.MaxSize)
	if err != nil {
		t.Fatal(err)
	}
	out := write(t, o, Limit{Duration: 20 * time.Second})
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	prev := -1.0
	cacheable := map[string]bool{}
	var queries, uncached int
	for i, l := range lines {
		r, err := trace.Parse([]byte(l))
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if r.T != int64(i) || !r.HasTs || r.TsMs < prev || r.TsMs >= 20000 {
			t.Fatalf("line %d: t=%d ts_ms=%v after %v", i+1, r.T, r.TsMs, prev)
		}
		prev = r.TsMs
		for _, q := range r.Layers[0] {
			seen := map[string]bool{}
			for j, k := range q.Keys {
				if seen[k] {
					t.Fatalf("line %d: key %q twice in %s's batch", i+1, k, q.Backend)
				}
				seen[k] = true
				rank, err := strconv.ParseUint(k, 36, 32)
				if err != nil || int(rank) >= o.Keys.Default {
					t.Fatalf("line %d: key %q is not a rank below %d", i+1, k, o.Keys.Default)
				}
				if want := KeySize(q.Backend, int(rank), d); q.Sizes[j] != want {
					t.Fatalf("line %d: %s/%s has size %d, KeySize says %d", i+1, q.Backend, k, q.Sizes[j], want)
				}
				id := q.Backend + "/" + k
				if c, ok := cacheable[id]; ok && c != q.Cacheable[j] {
					t.Fatalf("line %d: %s changed cacheability", i+1, id)
				}
				cacheable[id] = q.Cacheable[j]
				queries++
				if !q.Cacheable[j] {
					uncached++
				}
			}
		}
	}
	// 10,000 expected arrivals; Poisson noise is 1%.
	if n := len(lines); n < 9500 || n > 10500 {
		t.Fatalf("%d requests in 20 s at 500/s", n)
	}
	if f := float64(uncached) / float64(queries); f < 0.05 || f > 0.2 {
		t.Fatalf("uncacheable share %.3f, configured 0.1 of keys", f)
	}
}

// A key space smaller than a batch caps the batch and still has no
// duplicates.
func TestAppendBase36(t *testing.T) {
	for _, v := range []uint32{0, 1, 35, 36, 1295, 1296, 99999, 1 << 26, math.MaxUint32} {
		if got, want := string(appendBase36([]byte("x"), v)), "x"+KeyString(int(v)); got != want {
			t.Errorf("appendBase36(%d) = %s, want %s", v, got, want)
		}
	}
}

func TestBatchDist(t *testing.T) {
	d := newBatchDist(1)
	if d.sample(0) != 1 || d.sample(math.MaxUint64) != 1 {
		t.Fatal("mean 1 must always give 1")
	}
	d = newBatchDist(5)
	src := rand.NewPCG(5, 6)
	sum := 0
	const n = 200000
	for i := 0; i < n; i++ {
		sum += d.sample(src.Uint64())
	}
	if m := float64(sum) / n; math.Abs(m-5) > 0.03 {
		t.Fatalf("1 + Poisson(4) has mean %v", m)
	}
}

func TestTinyKeySpace(t *testing.T) {
	o := DefaultOptions()
	o.Keys = PerBackend[int]{Default: 1000, By: map[string]int{"b2": 3}}
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		for _, q := range g.Next().Layers[0] {
			if q.Backend != "b2" {
				continue
			}
			if q.Len() > 3 {
				t.Fatalf("batch of %d from a 3-key space", q.Len())
			}
			seen := map[string]bool{}
			for _, k := range q.Keys {
				if seen[k] {
					t.Fatalf("duplicate key %q", k)
				}
				seen[k] = true
			}
		}
	}
}

// The fitted mix meets the profile's targets exactly in expectation, for
// any number of backends, in both match modes.
func TestFitMeetsTargets(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 10, 11, 20, 33} {
		for _, m := range []Match{MatchQuery, MatchBatch} {
			targets, err := onerfTargets(n, m)
			if err != nil {
				t.Fatal(err)
			}
			mix, err := Fit(targets, m, FitParams{Types: DefaultTypes, QueriesPerRequest: 50, Seed: uint64(n)})
			if err != nil {
				t.Fatalf("n=%d %s: %v", n, m, err)
			}
			if len(mix.Types) < 100 {
				t.Fatalf("n=%d: only %d request types", n, len(mix.Types))
			}
			sum := 0.0
			for _, ty := range mix.Types {
				sum += ty.Weight
				for _, v := range ty.BatchMean {
					if v < 1 {
						t.Fatalf("n=%d: batch mean %v below 1", n, v)
					}
				}
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("n=%d: weights sum to %v", n, sum)
			}
			st := mix.Predict()
			for b, tg := range mix.Targets {
				if rel(st[b].PairShare, tg.PairShare) > 1e-5 || rel(st[b].Batch, tg.Batch) > 1e-9 {
					t.Fatalf("n=%d %s backend %d: predicted %+v, target %+v", n, m, b+1, st[b], tg)
				}
				if !tg.FreeFanout && rel(st[b].Fanout, tg.Fanout) > 1e-5 {
					t.Fatalf("n=%d %s backend %d: fanout %v, target %v", n, m, b+1, st[b].Fanout, tg.Fanout)
				}
				if m == MatchQuery && len(mix.Clamped) == 0 && rel(st[b].QueryShare, tg.QueryShare) > 1e-5 {
					t.Fatalf("n=%d backend %d: query share %v, target %v", n, b+1, st[b].QueryShare, tg.QueryShare)
				}
			}
			if m == MatchQuery && rel(mix.QueriesPerRequest(), 50) > 1e-6 && len(mix.Clamped) == 0 {
				t.Fatalf("n=%d: %v queries per request, want 50", n, mix.QueriesPerRequest())
			}
		}
	}
}

func rel(a, b float64) float64 { return math.Abs(a-b) / math.Abs(b) }

// The alias table's exact probabilities equal the normalized weights.
func TestAliasExact(t *testing.T) {
	f := func(raw []uint16) bool {
		if len(raw) == 0 {
			return true
		}
		w := make([]float64, len(raw))
		sum := 0.0
		for i, v := range raw {
			w[i] = float64(v) + 0.5
			sum += w[i]
		}
		a := newAlias(w)
		p := make([]float64, len(w))
		n := float64(len(w))
		for col, word := range a {
			keep := float64(word>>32) / (1 << 32)
			p[col] += keep / n
			p[word&0xffffffff] += (1 - keep) / n
		}
		for i := range w {
			if math.Abs(p[i]-w[i]/sum) > 1e-6 {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
	// sample agrees with the exact rule (keep when the high half is below).
	a := alias{uint64(1<<31)<<32 | 1, uint64(math.MaxUint32)<<32 | 1}
	for _, c := range []struct {
		u    uint64
		want int
	}{
		{0, 0}, {uint64(1<<31-1) << 32, 0}, {uint64(1<<31) << 32, 1}, {uint64(math.MaxUint32)<<32 | 0xffffffff, 1},
	} {
		if got := a.sample(c.u); got != c.want {
			t.Errorf("sample(%#x) = %d, want %d", c.u, got, c.want)
		}
	}
}

// The Zipf table gives every head rank its exact probability and every
// tail rank its Zipf probability within the block ratio; draws follow it.
func TestZipf(t *testing.T) {
	for _, c := range []struct {
		n int
		s float64
	}{{100000, 0.9}, {5000, 1}, {300, 0.5}, {1 << 22, 1.2}, {7, 0}} {
		z := newZipf(c.n, c.s)
		h := 0.0
		for r := 0; r < c.n; r++ {
			h += math.Pow(float64(r+1), -c.s)
		}
		for _, r := range []int{0, 1, 2, c.n / 3, c.n / 2, c.n - 1} {
			want := math.Pow(float64(r+1), -c.s) / h
			tol := 1e-6
			if r >= zipfHead {
				tol = 0.011 // within a block: zipfBlockRatio^s
			}
			if got := z.prob(r); math.Abs(got-want)/want > tol {
				t.Errorf("n=%d s=%v: P(rank %d) = %.6g, Zipf %.6g", c.n, c.s, r, got, want)
			}
		}
		if c.n > zipfHead && len(z.table) > zipfHead+1500 {
			t.Errorf("n=%d: %d table entries", c.n, len(z.table))
		}
	}
	z := newZipf(100000, 0.9)
	src := rand.NewPCG(3, 4)
	counts := map[int]int{}
	const n = 2000000
	tail := 0
	for i := 0; i < n; i++ {
		r := z.sample(src.Uint64())
		if r < 0 || r >= 100000 {
			t.Fatalf("rank %d", r)
		}
		counts[r]++
		if r >= 50000 {
			tail++
		}
	}
	for _, r := range []int{0, 1, 9, 99} {
		want := z.prob(r) * n
		if math.Abs(float64(counts[r])-want) > 5*math.Sqrt(want) {
			t.Errorf("rank %d drawn %d times, expected %.0f", r, counts[r], want)
		}
	}
	wantTail := 0.0
	for r := 50000; r < 100000; r++ {
		wantTail += math.Pow(float64(r+1), -0.9)
	}
	h := 0.0
	for r := 0; r < 100000; r++ {
		h += math.Pow(float64(r+1), -0.9)
	}
	wantTail *= n / h
	if math.Abs(float64(tail)-wantTail) > 5*math.Sqrt(wantTail) {
		t.Errorf("%d draws in ranks ≥ 50000, expected %.0f", tail, wantTail)
	}
}

func TestSizeDist(t *testing.T) {
	for _, c := range []struct {
		mean, sigma float64
		lo, hi      int64
	}{{2048, 1.8, 1, 512 << 10}, {23000, 1.8, 1, 512 << 10}, {100, 0, 1, 1000}, {500, 2.5, 10, 100000}} {
		d, err := NewSizeDist(c.mean, c.sigma, c.lo, c.hi)
		if err != nil {
			t.Fatal(err)
		}
		if rel(d.TableMean(), c.mean) > 0.005 {
			t.Errorf("%+v: table mean %v", c, d.TableMean())
		}
		prev := int64(0)
		for i := 0; i < sizeTable; i++ {
			v := int64(d.table[i])
			if v < c.lo || v > c.hi || v < prev {
				t.Fatalf("%+v: entry %d = %d (after %d)", c, i, v, prev)
			}
			prev = v
		}
	}
	// Heavy tail: with the testbed default the median is far below the
	// mean and the top quantiles reach hundreds of KB.
	d, _ := NewSizeDist(DefaultMeanSize, DefaultSizeSigma, DefaultMinSize, DefaultMaxSize)
	if med := d.Quantile(0.5); med > 600 || med < 200 {
		t.Errorf("median %d", med)
	}
	if top := d.Quantile(0.99999); top < 200<<10 {
		t.Errorf("P99.999 %d", top)
	}
	for _, bad := range []struct {
		mean, sigma float64
		lo, hi      int64
	}{{0, 1, 1, 10}, {5, 1, 0, 10}, {5, 1, 10, 5}, {50, 1, 1, 10}, {5, -1, 1, 10}, {5, 9, 1, 10}} {
		if _, err := NewSizeDist(bad.mean, bad.sigma, bad.lo, bad.hi); err == nil {
			t.Errorf("NewSizeDist%+v accepted", bad)
		}
	}
}

func TestOptionErrors(t *testing.T) {
	cases := map[string]func(*Options){
		`profile "nope" is unknown`:         func(o *Options) { o.Profile = "nope" },
		`match: "x"`:                        func(o *Options) { o.Match = "x" },
		"rate: 0":                           func(o *Options) { o.Rate = 0 },
		"backends: 0":                       func(o *Options) { o.Backends = 0 },
		"backend-names: 2 names given":      func(o *Options) { o.Names = []string{"a", "b"} },
		`backend-names: "a b"`:              func(o *Options) { o.Backends, o.Names = 2, []string{"a b", "c"} },
		`backend-names: "a" is given twice`: func(o *Options) { o.Backends, o.Names = 2, []string{"a", "a"} },
		`keys: no backend is named "zz"`:    func(o *Options) { o.Keys.By = map[string]int{"zz": 5} },
		"backend b3: keys: 0":               func(o *Options) { o.Keys.By = map[string]int{"b3": 0} },
		"backend b1: zipf: exponent -1":     func(o *Options) { o.Zipf.Default = -1 },
		"mean-size 0":                       func(o *Options) { o.MeanSize.Default = 0 },
		"types: 0":                          func(o *Options) { o.Types = 0 },
		"uncacheable":                       func(o *Options) { o.Uncacheable = 2 },
	}
	for want, mut := range cases {
		o := small(DefaultOptions())
		mut(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want error containing %q, got %v", want, err)
		}
	}
	if _, err := New(small(DefaultOptions())); err != nil {
		t.Fatal(err)
	}
	var g Generator
	_ = g
	if _, err := (&Generator{}).Write(&bytes.Buffer{}, Limit{}); err == nil {
		t.Error("Write without a limit accepted")
	}
}
