package mrc

import (
	"container/list"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// lru is the brute-force reference: one LRU cache of capacity bytes, exactly
// as the package documents the model.
type lru struct {
	capacity, used int64
	order          *list.List // front = most recent
	items          map[string]*list.Element
}

type item struct {
	key  string
	size int64
}

func newLRU(c int64) *lru {
	return &lru{capacity: c, order: list.New(), items: map[string]*list.Element{}}
}

// access returns whether key was resident, then makes it the most recent
// with its (possibly new) size and evicts from the least recent end.
func (c *lru) access(key string, size int64) bool {
	hit := false
	if e, ok := c.items[key]; ok {
		hit = true
		it := e.Value.(*item)
		c.used += size - it.size
		it.size = size
		c.order.MoveToFront(e)
	} else {
		c.items[key] = c.order.PushFront(&item{key, size})
		c.used += size
	}
	for c.used > c.capacity {
		e := c.order.Back()
		it := e.Value.(*item)
		c.order.Remove(e)
		delete(c.items, it.key)
		c.used -= it.size
	}
	return hit
}

type access struct {
	backend, key string
	size         int64
}

// zipfTrace draws accesses over two backends with Zipf-like popularity and
// a fixed size per key (the sizes tracegen synth gives), plus some objects
// larger than the smallest caches.
func zipfTrace(n int, seed uint64) []access { return zipfKeys(n, seed, 1.1, 5000) }

func zipfKeys(n int, seed uint64, s float64, keys uint64) []access {
	r := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(r, s, 1, keys-1)
	out := make([]access, n)
	for i := range out {
		k := z.Uint64()
		b := "a"
		if k%3 == 0 {
			b = "b"
		}
		size := int64(100 + (k*7919)%4000)
		if k%97 == 0 {
			size = 300_000 // larger than the smallest caches
		}
		out[i] = access{b, strconv.FormatUint(k, 10), size}
	}
	return out
}

func reference(acc []access, sizes []int64) map[string][]float64 {
	out := map[string][]float64{}
	for _, backend := range []string{"a", "b"} {
		for _, s := range sizes {
			c := newLRU(s)
			var n, miss int
			for _, a := range acc {
				if a.backend != backend {
					continue
				}
				n++
				if !c.access(a.key, a.size) {
					miss++
				}
			}
			out[backend] = append(out[backend], float64(miss)/float64(n))
		}
	}
	return out
}

var sizes = []int64{1 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 64 << 20}

func build(t testing.TB, acc []access, rate float64) []Curve {
	o := Options{Sizes: sizes, SampleRate: rate}
	if rate > 0 && rate < 1 {
		hh := NewHeavyHitters(1000)
		for _, a := range acc {
			hh.Observe(a.backend, a.key)
		}
		o.Always = hh.Contains
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acc {
		b.Access(a.backend, a.key, a.size)
	}
	return b.Curves()
}

// Exact mode equals an LRU simulation at every size.
func TestExactEqualsLRU(t *testing.T) {
	acc := zipfTrace(200_000, 7)
	want := reference(acc, sizes)
	for _, c := range build(t, acc, 0) {
		for j, p := range c.Points {
			if p.MissRatio != want[c.Backend][j] {
				t.Errorf("backend %s at %d bytes: miss ratio %v, LRU %v", c.Backend, p.Bytes, p.MissRatio, want[c.Backend][j])
			}
		}
		if c.Tracked != c.Accesses {
			t.Errorf("exact mode tracked %d of %d accesses", c.Tracked, c.Accesses)
		}
	}
}

// Sizes that grow between accesses are re-charged exactly as the LRU does.
func TestGrowingSizesEqualLRU(t *testing.T) {
	acc := zipfTrace(50_000, 3)
	for i := range acc {
		acc[i].size += int64(i / 1000) // every object grows over time
	}
	want := reference(acc, sizes)
	for _, c := range build(t, acc, 0) {
		for j, p := range c.Points {
			if p.MissRatio != want[c.Backend][j] {
				t.Errorf("backend %s at %d bytes: %v, LRU %v", c.Backend, p.Bytes, p.MissRatio, want[c.Backend][j])
			}
		}
	}
}

// The documented exception: an object that shrinks lets the stack model keep
// an object the LRU had already evicted.
func TestShrinkingSizeIsTheDocumentedException(t *testing.T) {
	acc := []access{{"a", "x", 6}, {"a", "y", 5}, {"a", "z", 1}, {"a", "y", 1}, {"a", "x", 6}}
	// LRU(10): x(6); y(5) evicts x; z(1); y shrinks to 1; x misses (it was evicted).
	// Stack: x's distance at its 2nd access is 1+1+6 = 8 ≤ 10, a hit.
	b, _ := New(Options{Sizes: []int64{10}})
	for _, a := range acc {
		b.Access(a.backend, a.key, a.size)
	}
	got := b.Curves()[0].Points[0].MissRatio
	lru := reference(acc, []int64{10})["a"][0]
	if got != 3.0/5 || lru != 4.0/5 {
		t.Fatalf("stack %v, LRU %v; want 3/5 and 4/5", got, lru)
	}
}

// Sampled mode (SHARDS, with the heavy hitters tracked exactly) stays
// close to the exact curve. The bounds are the ones docs/algorithms.md
// states, measured over six hash salts on traces like this one.
func TestSampledIsClose(t *testing.T) {
	acc := zipfKeys(500_000, 11, 1.01, 10_000)
	exact := build(t, acc, 0)
	for _, c := range []struct{ rate, mae, worst float64 }{{0.5, 0.02, 0.05}, {0.1, 0.05, 0.15}} {
		sampled := build(t, acc, c.rate)
		var worst, sum float64
		n := 0
		for i, cur := range sampled {
			for j, p := range cur.Points {
				d := math.Abs(p.MissRatio - exact[i].Points[j].MissRatio)
				worst = math.Max(worst, d)
				sum += d
				n++
			}
			if cur.Tracked >= cur.Accesses {
				t.Errorf("rate %g tracked every access", c.rate)
			}
		}
		t.Logf("rate %g: mean absolute error %.4f, worst %.4f", c.rate, sum/float64(n), worst)
		if sum/float64(n) > c.mae || worst > c.worst {
			t.Errorf("rate %g: mean error %.4f (bound %.2f), worst %.4f (bound %.2f)", c.rate, sum/float64(n), c.mae, worst, c.worst)
		}
	}
}

// Misra–Gries keeps every key above 1/(k+1) of the accesses.
func TestHeavyHittersKeepThePopularKeys(t *testing.T) {
	acc := zipfKeys(200_000, 5, 1.01, 10_000)
	counts := map[string]int{}
	hh := NewHeavyHitters(100)
	for _, a := range acc {
		if a.backend == "a" {
			counts[a.key]++
			hh.Observe("a", a.key)
		}
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	for k, c := range counts {
		if c*101 > total && !hh.Contains("a", k) {
			t.Errorf("key %s with %d of %d accesses is missing", k, c, total)
		}
	}
	if hh.Contains("b", "1") {
		t.Error("a backend never observed has heavy hitters")
	}
}

func TestAddCountsCacheableQueriesOnly(t *testing.T) {
	b, _ := New(Options{Sizes: []int64{1000}})
	r := &trace.Request{Layers: []trace.Layer{{{Backend: "a", Keys: []string{"k", "k", "u"}, Sizes: []int64{10, 10, 10}, Cacheable: []bool{true, true, false}}}}}
	b.Add(r)
	c := b.Curves()[0]
	if c.Accesses != 2 || c.Cold != 1 || c.Points[0].MissRatio != 0.5 {
		t.Fatalf("%+v", c)
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []Options{{}, {Sizes: []int64{0}}, {Sizes: []int64{1}, SampleRate: 2}, {Sizes: []int64{1}, SampleRate: -0.1}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func BenchmarkExact(b *testing.B) {
	acc := zipfTrace(100_000, 1)
	b.ResetTimer()
	for range b.N {
		bl, _ := New(Options{Sizes: sizes})
		for _, a := range acc {
			bl.Access(a.backend, a.key, a.size)
		}
	}
	b.ReportMetric(float64(b.N*len(acc))/b.Elapsed().Seconds(), "accesses/s")
}
