package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestItemChargeIsTheSmallestSlabClassThatHoldsTheItem(t *testing.T) {
	for i := 1; i < len(slabClasses); i++ {
		if slabClasses[i] <= slabClasses[i-1] || slabClasses[i]%chunkAlign != 0 && slabClasses[i] != chunkMax {
			t.Fatalf("class %d: %d after %d", i, slabClasses[i], slabClasses[i-1])
		}
	}
	if slabClasses[0] != 96 || slabClasses[len(slabClasses)-1] != chunkMax {
		t.Fatalf("classes run from %d to %d", slabClasses[0], slabClasses[len(slabClasses)-1])
	}
	for _, size := range []int64{0, 1, 100, 1000, 16384, 100000, chunkMax - 200, chunkMax, 900000} {
		item := int64(itemHeader+10+1) + size + 2
		c := ItemCharge(10, size)
		if c < item {
			t.Fatalf("size %d: charge %d below the item's %d bytes", size, c, item)
		}
		if item <= chunkMax {
			for _, k := range slabClasses {
				if k >= item && k < c {
					t.Fatalf("size %d: charged %d but class %d holds it", size, c, k)
				}
			}
		} else if c%chunkMax != 0 || c-item >= chunkMax {
			t.Fatalf("size %d: a chunked item is charged whole chunks, got %d", size, c)
		}
	}
}

// refLRU is the obvious LRU of the same rule: items charged their chunks,
// evicted from the least recent while the whole pages of any slab class
// exceed the limit.
type refLRU struct {
	limit int64
	order []string // least recent first
	size  map[string]int64
}

func (r *refLRU) pages() int64 {
	per := map[int]int64{}
	for _, k := range r.order {
		c, cl := chargeClass(len(k), r.size[k])
		per[cl] += c
	}
	var p int64
	for _, b := range per {
		p += pagesOf(b, pageBytes)
	}
	return p
}

func (r *refLRU) drop(k string) {
	for i, x := range r.order {
		if x == k {
			r.order = append(r.order[:i], r.order[i+1:]...)
			delete(r.size, k)
			return
		}
	}
}

func (r *refLRU) get(k string, size int64) bool {
	if s, ok := r.size[k]; ok && s == size {
		r.drop(k)
		r.order = append(r.order, k)
		r.size[k] = size
		return true
	}
	return false
}

func (r *refLRU) set(k string, size int64) {
	r.drop(k)
	if c, _ := chargeClass(len(k), size); c > r.limit {
		return
	}
	r.order = append(r.order, k)
	r.size[k] = size
	for len(r.order) > 1 && r.pages() > r.limit/pageBytes {
		r.drop(r.order[0])
	}
	if r.pages() > r.limit/pageBytes { // the new item alone does not fit
		r.drop(k)
	}
}

func (r *refLRU) shrinkTo(limit int64) {
	r.limit = limit
	for len(r.order) > 0 && r.pages() > r.limit/pageBytes {
		r.drop(r.order[0])
	}
}

func TestCacheMatchesAReferenceLRU(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCache(4 << 20)
	ref := &refLRU{limit: 4 << 20, size: map[string]int64{}}
	for i := range 20000 {
		k := fmt.Sprintf("k%d", int(rng.ExpFloat64()*60))
		size := int64(1000 + rng.IntN(3)*40000)
		if i%5000 == 4999 { // resizes, down and up
			lim := int64(2+rng.IntN(5)) << 20
			c.SetLimit(lim)
			ref.shrinkTo(lim)
		}
		got, want := c.Get(k, size), ref.get(k, size)
		if got != want {
			t.Fatalf("access %d (%s, %d B): hit %v, the reference says %v", i, k, size, got, want)
		}
		if !got {
			c.Set(k, size)
			ref.set(k, size)
		}
		if c.Len() != len(ref.order) || c.Malloced() != ref.pages()*pageBytes {
			t.Fatalf("access %d: %d items in %d B, the reference has %d in %d B", i, c.Len(), c.Malloced(), len(ref.order), ref.pages()*pageBytes)
		}
		if c.Malloced() > c.Limit() {
			t.Fatalf("access %d: %d B malloced over the %d B limit", i, c.Malloced(), c.Limit())
		}
	}
	if c.Hits == 0 || c.Evictions == 0 {
		t.Fatalf("the test should hit and evict: %d hits, %d evictions", c.Hits, c.Evictions)
	}
}

func TestCacheRefusesWhatMemcachedRefuses(t *testing.T) {
	c := NewCache(8 << 20)
	c.Set("big", 2<<20) // over memcached's 1 MiB item size
	c.Set(string(make([]byte, 300)), 10)
	if c.Len() != 0 {
		t.Fatalf("stored %d items memcached would refuse", c.Len())
	}
	c.Set("k", 100)
	if c.Get("k", 200) { // another size: the app server refetches
		t.Fatal("a hit on another size")
	}
	if !c.Get("k", 100) {
		t.Fatal("a miss on the stored size")
	}
}
