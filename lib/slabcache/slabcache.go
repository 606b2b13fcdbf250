// Package slabcache is the memory model of one memcached instance
// (docs/simulator.md, "Caches"): the simulator's caches, and what the
// oracle (experiment/feasibility) measures a backend's keys against.
package slabcache

import "github.com/robinhoodcache/robinhood/lib/costmodel"

// The memory model of one memcached instance (docs/simulator.md, "Caches").
// memcached stores an item in a chunk of the smallest slab class that holds
// it (classes grow by a factor of 1.25 from 96 bytes, up to half a 1 MiB
// page; a larger item spans several chunks of that largest class). Memory
// comes in 1 MiB pages, each given to one class when the class needs room
// and the limit allows another page; when it does not, the class evicts its
// own least recently used item (memcached keeps one LRU per class). The
// controller turns slab automove off, so pages stay with their class until
// a shrink takes them back — from the class with the most pages, as the
// controller's resize does (docs/controller.md), evicting that page's worth
// of the class's least recent items.
//
// The slab classes and what an item takes of them (costmodel.ClassOf,
// costmodel.ItemBytes, costmodel.ItemCharge) are in lib/costmodel, which
// the oracle's latency model shares.
const (
	pageBytes     = costmodel.PageBytes
	memcachedKey  = 250 // longest key memcached accepts
	itemSizeLimit = pageBytes
)

// slabClasses is each class's chunk size (costmodel.SlabClasses).
var slabClasses = costmodel.SlabClasses()

type entry struct {
	prev, next int32
	class      int32
	chunks     int32
	size       int64
	id         uint64 // the key's id (Cache)
	keyLen     int32
	// tag and weight feed Mass: a miniature's popularity mass of the items
	// it holds per backend (SetWeighted); 0 and 0 otherwise.
	tag    int32
	ref    int32
	weight float64
}

// slabClass is one class's pages, chunks in use and LRU list.
type slabClass struct {
	perPage    int64 // chunks per page
	pageBytes  int64 // a page's memory
	pages      int64
	used       int64 // chunks holding items
	head, tail int32 // most and least recent; -1 when empty
}

// Cache is one memcached instance's contents. Keys are named by the
// caller's ids (the simulator interns each backend's keys, see keys.go),
// with their length in bytes where memcached charges them. Not safe for
// concurrent use.
type Cache struct {
	page  int64 // bytes per page: 1 MiB, scaled in a miniature simulation
	limit int64
	pages int64
	// malloced is the memory of the pages the classes hold.
	malloced int64
	items    int64 // sum of item sizes (header, key, value): memcached's "bytes"
	classes  []slabClass
	// index[backend][key id] is the key's entry plus one (0: not held); see
	// cacheID.
	index   [][]int32
	n       int // items
	entries []entry
	free    []int32

	Hits, Misses, Evictions, OutOfMemory uint64

	// mass[tag] is the summed weight of the items of that tag.
	mass []float64
	// OnRemove, when set, hears of every weighted item that leaves (its
	// tag and ref, as SetWeighted was given them).
	OnRemove func(tag, ref int32)
}

// NewCache returns an empty cache with limitBytes of memory.
func NewCache(limitBytes int64) *Cache {
	return NewScaledCache(limitBytes, pageBytes)
}

// NewScaledCache returns an empty cache whose pages hold page bytes (a
// miniature simulation scales memcached's pages with its caches; a page
// always holds at least one chunk of every class).
func NewScaledCache(limitBytes, page int64) *Cache {
	c := &Cache{page: max(page, 1), limit: limitBytes, classes: make([]slabClass, len(slabClasses))}
	for i, size := range slabClasses {
		c.classes[i] = slabClass{perPage: max(c.page/size, 1), pageBytes: c.page, head: -1, tail: -1}
		if c.page < costmodel.ChunkMax {
			// A page smaller than the largest chunk cannot hold one: a
			// miniature's "page" is then one chunk of the class, so memory
			// is counted chunk by chunk.
			c.classes[i].perPage, c.classes[i].pageBytes = 1, size
		}
	}
	return c
}

// Classes is the number of slab classes holding pages (memcached's
// active_slabs): each keeps at least one page, partly empty.
func (c *Cache) Classes() int {
	n := 0
	for i := range c.classes {
		if c.classes[i].pages > 0 {
			n++
		}
	}
	return n
}

// Limit is the memory limit in bytes.
func (c *Cache) Limit() int64 { return c.limit }

// Len is the number of items.
func (c *Cache) Len() int { return c.n }

// Malloced is the memory of the pages the classes hold (memcached's
// total_malloced).
func (c *Cache) Malloced() int64 { return c.malloced }

// ItemBytes is the bytes the items hold (memcached's "bytes" stat).
func (c *Cache) ItemBytes() int64 { return c.items }

// SetLimit changes the limit; a lower one takes pages back from the classes
// with the most pages, evicting what no longer fits.
func (c *Cache) SetLimit(limitBytes int64) {
	c.limit = limitBytes
	for c.malloced > c.limit-c.limit%c.page {
		best := -1
		for i := range c.classes {
			if c.classes[i].pages > 0 && (best < 0 || c.classes[i].pages*c.classes[i].pageBytes > c.classes[best].pages*c.classes[best].pageBytes) {
				best = i
			}
		}
		cl := &c.classes[best]
		cl.pages--
		c.pages--
		c.malloced -= cl.pageBytes
		for cl.used > cl.pages*cl.perPage && cl.tail >= 0 {
			c.remove(cl.tail)
			c.Evictions++
		}
	}
}

// Get looks a key up with the size the query expects: a hit moves it to the
// front of its class; a miss, or an item of another size (which the app
// server refetches and refills), counts a miss.
func (c *Cache) Get(key uint64, size int64) bool {
	i, ok := c.lookup(key)
	if !ok || c.entries[i].size != size {
		c.Misses++
		return false
	}
	c.Hits++
	c.touch(i)
	return true
}

// Set stores a key of keyLen bytes after a miss (a fill), replacing an
// older value. An item memcached would refuse (over 1 MiB, a key too long)
// is not stored, nor one whose class has no room, may take no new page and
// holds nothing to evict (memcached's out-of-memory error).
func (c *Cache) Set(key uint64, keyLen int, size int64) { c.SetWeighted(key, keyLen, size, 0, 0, 0) }

// Contains reports whether key is held with this size, without touching it
// or counting a hit or a miss: a look at the cache's state.
func (c *Cache) Contains(key uint64, size int64) bool {
	i, ok := c.lookup(key)
	return ok && c.entries[i].size == size
}

// Mass is the summed weight of the items of a tag (SetWeighted).
func (c *Cache) Mass(tag int) float64 {
	if tag < len(c.mass) {
		return max(c.mass[tag], 0)
	}
	return 0
}

// SetWeighted is Set with the item counted in Mass(tag) with weight w while
// it is held; ref is the caller's name for it (OnRemove).
func (c *Cache) SetWeighted(key uint64, keyLen int, size int64, tag, ref int, w float64) {
	if keyLen > memcachedKey || costmodel.ItemBytes(keyLen, size) > itemSizeLimit {
		return
	}
	if i, ok := c.lookup(key); ok {
		c.remove(i)
	}
	class, n := costmodel.ClassOf(keyLen, size)
	cl := &c.classes[class]
	for cl.used+n > cl.pages*cl.perPage {
		switch {
		case c.malloced+cl.pageBytes <= c.limit-c.limit%c.page:
			cl.pages++
			c.pages++
			c.malloced += cl.pageBytes
		case cl.tail >= 0:
			c.remove(cl.tail)
			c.Evictions++
		default:
			c.OutOfMemory++
			return
		}
	}
	var i int32
	if k := len(c.free); k > 0 {
		i = c.free[k-1]
		c.free = c.free[:k-1]
	} else {
		c.entries = append(c.entries, entry{})
		i = int32(len(c.entries) - 1)
	}
	c.entries[i] = entry{prev: -1, next: cl.head, class: int32(class), chunks: int32(n), size: size, id: key, keyLen: int32(keyLen), tag: int32(tag), ref: int32(ref), weight: w}
	if w != 0 {
		for len(c.mass) <= tag {
			c.mass = append(c.mass, 0)
		}
		c.mass[tag] += w
	}
	if cl.head >= 0 {
		c.entries[cl.head].prev = i
	}
	cl.head = i
	if cl.tail < 0 {
		cl.tail = i
	}
	cl.used += n
	*c.slot(key) = i + 1
	c.n++
	c.items += costmodel.ItemBytes(keyLen, size)
}

// lookup is the entry holding key.
func (c *Cache) lookup(key uint64) (int32, bool) {
	b, id := key>>32, uint32(key)
	if b >= uint64(len(c.index)) || uint64(id) >= uint64(len(c.index[b])) {
		return 0, false
	}
	i := c.index[b][id]
	return i - 1, i > 0
}

// slot is key's place in the index, grown to hold it.
func (c *Cache) slot(key uint64) *int32 {
	b, id := int(key>>32), int(uint32(key))
	if b >= len(c.index) {
		c.index = append(c.index, make([][]int32, b+1-len(c.index))...)
	}
	if ids := c.index[b]; id >= len(ids) {
		grown := make([]int32, max(2*len(ids), id+1, 1024))
		copy(grown, ids)
		c.index[b] = grown
	}
	return &c.index[b][id]
}

func (c *Cache) touch(i int32) {
	e := &c.entries[i]
	cl := &c.classes[e.class]
	if cl.head == i {
		return
	}
	c.entries[e.prev].next = e.next
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		cl.tail = e.prev
	}
	e.prev, e.next = -1, cl.head
	c.entries[cl.head].prev = i
	cl.head = i
}

func (c *Cache) remove(i int32) {
	e := &c.entries[i]
	cl := &c.classes[e.class]
	if e.prev >= 0 {
		c.entries[e.prev].next = e.next
	} else {
		cl.head = e.next
	}
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		cl.tail = e.prev
	}
	*c.slot(e.id) = 0
	c.n--
	cl.used -= int64(e.chunks)
	c.items -= costmodel.ItemBytes(int(e.keyLen), e.size)
	if e.weight != 0 {
		c.mass[e.tag] -= e.weight
		if c.OnRemove != nil {
			c.OnRemove(e.tag, e.ref)
		}
	}
	c.free = append(c.free, i)
}
