package sim

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
const (
	pageBytes     = 1 << 20
	chunkMax      = pageBytes / 2
	itemHeader    = 56 // item header with CAS
	minChunk      = 96
	growthFactor  = 1.25
	chunkAlign    = 8
	memcachedKey  = 250 // longest key memcached accepts
	itemSizeLimit = pageBytes
)

var slabClasses = func() []int64 {
	var out []int64
	size := float64(minChunk)
	for size <= chunkMax/growthFactor {
		c := int64(size)
		if r := c % chunkAlign; r != 0 {
			c += chunkAlign - r
		}
		out = append(out, c)
		size = float64(c) * growthFactor
	}
	return append(out, chunkMax)
}()

// ItemCharge is the memory one item takes in memcached: its chunk (or its
// chunks, for an item larger than the largest class).
func ItemCharge(keyLen int, size int64) int64 {
	class, n := classOf(keyLen, size)
	return slabClasses[class] * n
}

// classOf is an item's slab class and how many of its chunks it takes.
func classOf(keyLen int, size int64) (class int, chunks int64) {
	item := itemBytes(keyLen, size)
	if item > chunkMax {
		return len(slabClasses) - 1, (item + chunkMax - 1) / chunkMax
	}
	lo, hi := 0, len(slabClasses)-1
	for lo < hi {
		m := (lo + hi) / 2
		if slabClasses[m] >= item {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo, 1
}

// itemBytes is an item's size as memcached counts it: header, key, value.
func itemBytes(keyLen int, size int64) int64 { return int64(itemHeader+keyLen+1) + size + 2 }

type entry struct {
	prev, next int32
	class      int32
	chunks     int32
	size       int64
	key        string
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

// Cache is one memcached instance's contents. Not safe for concurrent use.
type Cache struct {
	page  int64 // bytes per page: 1 MiB, scaled in a miniature simulation
	limit int64
	pages int64
	// malloced is the memory of the pages the classes hold.
	malloced int64
	items    int64 // sum of item sizes (header, key, value): memcached's "bytes"
	classes  []slabClass
	index    map[string]int32
	entries  []entry
	free     []int32

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
	c := &Cache{page: max(page, 1), limit: limitBytes, index: map[string]int32{}, classes: make([]slabClass, len(slabClasses))}
	for i, size := range slabClasses {
		c.classes[i] = slabClass{perPage: max(c.page/size, 1), pageBytes: c.page, head: -1, tail: -1}
		if c.page < chunkMax {
			// A page smaller than the largest chunk cannot hold one: a
			// miniature's "page" is then one chunk of the class, so memory
			// is counted chunk by chunk.
			c.classes[i].perPage, c.classes[i].pageBytes = 1, size
		}
	}
	return c
}

// Limit is the memory limit in bytes.
func (c *Cache) Limit() int64 { return c.limit }

// Len is the number of items.
func (c *Cache) Len() int { return len(c.index) }

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
func (c *Cache) Get(key string, size int64) bool {
	i, ok := c.index[key]
	if !ok || c.entries[i].size != size {
		c.Misses++
		return false
	}
	c.Hits++
	c.touch(i)
	return true
}

// Set stores a key after a miss (a fill), replacing an older value. An item
// memcached would refuse (over 1 MiB, a key too long) is not stored, nor one
// whose class has no room, may take no new page and holds nothing to evict
// (memcached's out-of-memory error).
func (c *Cache) Set(key string, size int64) { c.SetWeighted(key, size, 0, 0, 0) }

// Contains reports whether key is held with this size, without touching it
// or counting a hit or a miss: a look at the cache's state.
func (c *Cache) Contains(key string, size int64) bool {
	i, ok := c.index[key]
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
func (c *Cache) SetWeighted(key string, size int64, tag, ref int, w float64) {
	if len(key) > memcachedKey || itemBytes(len(key), size) > itemSizeLimit {
		return
	}
	if i, ok := c.index[key]; ok {
		c.remove(i)
	}
	class, n := classOf(len(key), size)
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
	c.entries[i] = entry{prev: -1, next: cl.head, class: int32(class), chunks: int32(n), size: size, key: key, tag: int32(tag), ref: int32(ref), weight: w}
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
	c.index[key] = i
	c.items += itemBytes(len(key), size)
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
	delete(c.index, e.key)
	cl.used -= int64(e.chunks)
	c.items -= itemBytes(len(e.key), e.size)
	if e.weight != 0 {
		c.mass[e.tag] -= e.weight
		if c.OnRemove != nil {
			c.OnRemove(e.tag, e.ref)
		}
	}
	e.key = ""
	c.free = append(c.free, i)
}
