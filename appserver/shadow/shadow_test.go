package shadow

import (
	"container/list"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/loghist"
	"github.com/robinhoodcache/robinhood/lib/model"
)

// lru is an exact LRU cache of capacity bytes.
type lru struct {
	capacity, used int64
	order          *list.List
	items          map[string]*list.Element
}

type entry struct {
	key  string
	size int64
}

func newLRU(c int64) *lru {
	return &lru{capacity: c, order: list.New(), items: map[string]*list.Element{}}
}

func (c *lru) access(k string, size int64) bool {
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		return true
	}
	c.items[k] = c.order.PushFront(&entry{k, size})
	c.used += size
	for c.used > c.capacity {
		e := c.order.Back()
		c.order.Remove(e)
		delete(c.items, e.Value.(*entry).key)
		c.used -= e.Value.(*entry).size
	}
	return false
}

// run feeds a seeded Zipf trace to a "real" exact LRU of realBytes (the
// partition as memcached behaves, limit or not) and to the model told the
// limit; it returns the shadow hits and the extra hits an exact LRU of
// realBytes + shadow gets, over the second half (after the estimate settles).
func run(t *testing.T, limit, realBytes, shadowBytes int64) (shadowHits, extra int, m *Model) {
	r := rand.New(rand.NewPCG(7, 7))
	z := rand.NewZipf(r, 1.05, 1, 20_000)
	real, bigger := newLRU(realBytes), newLRU(realBytes+shadowBytes)
	m = New(shadowBytes, 4*(limit+shadowBytes))
	const n = 400_000
	for i := range n {
		k := z.Uint64()
		key := strconv.FormatUint(k, 10)
		size := int64(500 + (k*7919)%3000)
		hit := real.access(key, size)
		bigHit := bigger.access(key, size)
		sh := m.Observe(key, size, hit, limit)
		if i < n/2 {
			continue
		}
		if sh {
			shadowHits++
		}
		if !hit && bigHit {
			extra++
		}
	}
	return shadowHits, extra, m
}

// Against an exact LRU of the partition's limit as the real cache, and
// against one of 80% of it (memcached's overhead): the shadow hits are the
// extra hits an exact LRU with shadow more bytes gets, within 5%.
func TestShadowHitsAreTheExtraHitsOfALargerLRU(t *testing.T) {
	const limit, shadowBytes = 4 << 20, 1 << 20
	for _, realBytes := range []int64{limit, limit * 8 / 10} {
		sh, extra, m := run(t, limit, realBytes, shadowBytes)
		t.Logf("real cache %d bytes: shadow hits %d, extra hits %d, effective size %d", realBytes, sh, extra, m.Effective())
		if extra == 0 || float64(abs(sh-extra)) > 0.05*float64(extra) {
			t.Errorf("real cache %d bytes: shadow hits %d, extra hits of the larger LRU %d", realBytes, sh, extra)
		}
		if e := m.Effective(); float64(abs64(e-realBytes)) > 0.05*float64(realBytes) {
			t.Errorf("effective size %d, real %d", e, realBytes)
		}
		if m.Objects() > 20_000 {
			t.Fatalf("model holds %d objects", m.Objects())
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestUnknownLimitCountsNothing(t *testing.T) {
	m := New(1<<20, 0)
	m.Observe("a", 10, false, 0)
	if m.Observe("a", 10, false, 0) {
		t.Fatal("a shadow hit without a known limit")
	}
	// A miss at distance 10 with a limit of 5 and 1 MB of shadow: a shadow hit.
	if !m.Observe("a", 10, false, 5) || m.Observe("a", 10, true, 5) {
		t.Fatal("a miss just beyond the effective size is a shadow hit; a hit is not")
	}
}

// A model keyed by ids answers as the one keyed by names, query for query,
// through resizes and depth-limited compactions.
func TestByIDMatchesByName(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	byName, byID := New(64<<10, 1<<20), NewByID(64<<10, 1<<20)
	limit := int64(256 << 10)
	for i := range 50_000 {
		if i%5000 == 0 {
			limit = int64(64+r.IntN(512)) << 10
		}
		k := int32(r.ExpFloat64() * 400)
		size := int64(100 + int(k)%4000)
		hit := r.IntN(2) == 0
		a := byName.Observe(strconv.Itoa(int(k)), size, hit, limit)
		b := byID.ObserveID(k, size, hit, limit)
		if a != b || byName.Effective() != byID.Effective() || byName.Objects() != byID.Objects() {
			t.Fatalf("query %d: by name %v %d %d, by id %v %d %d", i, a, byName.Effective(), byName.Objects(),
				b, byID.Effective(), byID.Objects())
		}
	}
}

// The distance histogram is the partition's miss-ratio curve in limit
// bytes: with a real cache that keeps 80% of its limit (memcached's
// overhead), the curve read at a limit of x MiB is the miss ratio of a real
// cache of 80% of x, at a quarter, half, twice and four times the limit.
func TestDistancesAreTheCurveInLimitBytes(t *testing.T) {
	const limit = 4 << 20
	r := rand.New(rand.NewPCG(7, 7))
	z := rand.NewZipf(r, 1.05, 1, 20_000)
	real := newLRU(limit * 8 / 10)
	sizes := []int64{1, 2, 4, 8, 16}
	refs := make([]*lru, len(sizes))
	misses := make([]int, len(sizes))
	for i, mb := range sizes {
		refs[i] = newLRU(mb << 20 * 8 / 10)
	}
	m := New(1<<20, 8*limit)
	m.Distances = &loghist.Histogram{}
	const n = 400_000
	counted := 0
	for i := range n {
		k := z.Uint64()
		key := strconv.FormatUint(k, 10)
		size := int64(500 + (k*7919)%3000)
		hit := real.access(key, size)
		for j, ref := range refs {
			if !ref.access(key, size) && i >= n/2 {
				misses[j]++
			}
		}
		m.Observe(key, size, hit, limit)
		if i == n/2-1 {
			m.Distances.Drain() // the second half only, as the references
		}
		if i >= n/2 {
			counted++
		}
	}
	h := loghist.Counts{}
	h.Add(m.Distances.Drain())
	if h.Total() != uint64(counted) {
		t.Fatalf("histogram holds %d queries, want %d", h.Total(), counted)
	}
	curve := model.CurveFromDistances(h, 32)
	for j, mb := range sizes {
		want := float64(misses[j]) / float64(counted)
		t.Logf("limit %d MiB: curve %.3f, real %.3f", mb, curve[mb], want)
		if got := curve[mb]; math.Abs(got-want) > 0.02 {
			t.Errorf("limit %d MiB: curve %.3f, a real cache of 80%% of it misses %.3f", mb, got, want)
		}
	}
}

func TestScaleCountsFullSystemBytes(t *testing.T) {
	m := New(0, 1<<30)
	m.Distances = &loghist.Histogram{}
	m.Scale(0.5)
	m.Observe("a", 1<<20, false, 1<<30)
	m.Observe("b", 1<<20, false, 1<<30)
	m.Observe("a", 1<<20, true, 1<<30) // distance 2 MiB in the miniature: 4 MiB in the full system
	s := m.Distances.Drain()
	if len(s.Index) != 2 || s.Index[0] != uint32(loghist.Index(4096)) || s.Index[1] != loghist.Buckets-1 || s.Count[1] != 2 {
		t.Fatalf("histogram %+v, want one query at 4096 KiB and two first accesses", s)
	}
}
