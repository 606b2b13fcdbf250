package slabcache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/costmodel"
)

// refSlabs is the obvious model of the same rule: per slab class, a list
// of keys (least recent first) and a page count; a class takes a free page
// while the limit allows, else evicts its own least recent key; a shrink
// takes pages from the class with the most (the lowest class on a tie).
type refSlabs struct {
	limit int64
	order map[int][]string
	pages map[int]int64
	size  map[string]int64
}

func newRef(limit int64) *refSlabs {
	return &refSlabs{limit: limit, order: map[int][]string{}, pages: map[int]int64{}, size: map[string]int64{}}
}

func (r *refSlabs) total() (p int64) {
	for _, n := range r.pages {
		p += n
	}
	return p
}

func (r *refSlabs) used(cl int) (u int64) {
	for _, k := range r.order[cl] {
		_, n := costmodel.ClassOf(len(k), r.size[k])
		u += n
	}
	return u
}

func (r *refSlabs) drop(k string) {
	cl, _ := costmodel.ClassOf(len(k), r.size[k])
	for i, x := range r.order[cl] {
		if x == k {
			r.order[cl] = append(r.order[cl][:i:i], r.order[cl][i+1:]...)
			delete(r.size, k)
			return
		}
	}
}

func (r *refSlabs) get(k string, size int64) bool {
	if s, ok := r.size[k]; ok && s == size {
		cl, _ := costmodel.ClassOf(len(k), size)
		r.drop(k)
		r.order[cl] = append(r.order[cl], k)
		r.size[k] = size
		return true
	}
	return false
}

func (r *refSlabs) set(k string, size int64) {
	if _, ok := r.size[k]; ok {
		r.drop(k)
	}
	cl, n := costmodel.ClassOf(len(k), size)
	per := pageBytes / slabClasses[cl]
	for r.used(cl)+n > r.pages[cl]*per {
		if r.total() < r.limit/pageBytes {
			r.pages[cl]++
		} else if len(r.order[cl]) > 0 {
			r.drop(r.order[cl][0])
		} else {
			return
		}
	}
	r.order[cl] = append(r.order[cl], k)
	r.size[k] = size
}

func (r *refSlabs) shrinkTo(limit int64) {
	r.limit = limit
	for r.total() > limit/pageBytes {
		best := -1
		for cl := range slabClasses {
			if r.pages[cl] > 0 && (best < 0 || r.pages[cl] > r.pages[best]) {
				best = cl
			}
		}
		r.pages[best]--
		per := pageBytes / slabClasses[best]
		for r.used(best) > r.pages[best]*per && len(r.order[best]) > 0 {
			r.drop(r.order[best][0])
		}
	}
}

func TestCacheMatchesAReferenceModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCache(4 << 20)
	ref := newRef(4 << 20)
	ids := []map[string]uint64{{}, {}, {}} // one per backend, as the shared cache's
	idOf := func(b int, key string) uint64 {
		id, ok := ids[b][key]
		if !ok {
			id = uint64(len(ids[b]))
			ids[b][key] = id
		}
		return uint64(b)<<32 | id // as the simulator names a backend's key
	}
	sizes := []int64{900, 5000, 40000, 200000, 700000}
	for i := range 20000 {
		b := rng.IntN(len(ids))
		kb := fmt.Sprintf("k%d", int(rng.ExpFloat64()*20))
		k := fmt.Sprintf("%d:%s", b, kb)
		size := sizes[int(rng.ExpFloat64())%len(sizes)]
		if i%5000 == 4999 { // resizes, down and up
			lim := int64(2+rng.IntN(5)) << 20
			c.SetLimit(lim)
			ref.shrinkTo(lim)
		}
		id := idOf(b, kb)
		got, want := c.Get(id, size), ref.get(k, size)
		if got != want {
			t.Fatalf("access %d (%s, %d B): hit %v, the reference says %v", i, k, size, got, want)
		}
		if !got {
			c.Set(id, len(k), size)
			ref.set(k, size)
		}
		if c.Len() != len(ref.size) || c.Malloced() != ref.total()*pageBytes {
			t.Fatalf("access %d: %d items in %d B, the reference has %d in %d B", i, c.Len(), c.Malloced(), len(ref.size), ref.total()*pageBytes)
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
	c.Set(1, 3, 2<<20) // over memcached's 1 MiB item size
	c.Set(2, 300, 10)  // a key over 250 bytes
	if c.Len() != 0 {
		t.Fatalf("stored %d items memcached would refuse", c.Len())
	}
	c.Set(3, 1, 100)
	if c.Get(3, 200) { // another size: the app server refetches
		t.Fatal("a hit on another size")
	}
	if !c.Get(3, 100) {
		t.Fatal("a miss on the stored size")
	}
}
