package sim

import "math"

// The memory model of one memcached instance (docs/simulator.md, "Caches").
// memcached stores an item in a chunk of the smallest slab class that holds
// it (classes grow by a factor of 1.25 from 96 bytes, up to half a 1 MiB
// page; larger items span several such chunks) and counts its memory in
// whole pages against the limit. The model keeps one LRU list per instance
// (memcached keeps one per slab class; with slab automove off, as the
// controller sets it, the pages stay where the fill put them) and charges
// each item its chunk, so internal fragmentation is counted; an instance
// holds items while the pages their chunks need (whole pages per class, as
// memcached allocates them) fit in the limit.
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
	c, _ := chargeClass(keyLen, size)
	return c
}

// chargeClass is an item's charge and its slab class (len(slabClasses) for
// items spanning several chunks).
func chargeClass(keyLen int, size int64) (int64, int) {
	item := int64(itemHeader+keyLen+1) + size + 2
	if item > chunkMax {
		return int64(math.Ceil(float64(item)/chunkMax)) * chunkMax, len(slabClasses)
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
	return slabClasses[lo], lo
}

type entry struct {
	prev, next int32
	charge     int64
	size       int64
	class      int32
	key        string
}

// Cache is one memcached instance's contents: an LRU list of keys charged
// their chunks, within a limit. Not safe for concurrent use.
type Cache struct {
	page    int64 // bytes per page: 1 MiB, scaled in a miniature simulation
	limit   int64
	charged int64
	// class[c] is the bytes charged in slab class c; pages their whole pages.
	class   []int64
	pages   int64
	items   int64 // sum of item sizes (header, key, value): memcached's "bytes"
	index   map[string]int32
	entries []entry
	free    []int32
	head    int32 // most recent; -1 when empty
	tail    int32

	Hits, Misses, Evictions uint64
}

// NewCache returns an empty cache with limitBytes of memory.
func NewCache(limitBytes int64) *Cache {
	return NewScaledCache(limitBytes, pageBytes)
}

// NewScaledCache returns an empty cache whose pages hold page bytes (a
// miniature simulation scales memcached's pages with its caches).
func NewScaledCache(limitBytes, page int64) *Cache {
	return &Cache{page: max(page, 1), limit: limitBytes, index: map[string]int32{}, head: -1, tail: -1, class: make([]int64, len(slabClasses)+1)}
}

// Limit is the memory limit in bytes.
func (c *Cache) Limit() int64 { return c.limit }

// Len is the number of items.
func (c *Cache) Len() int { return len(c.index) }

// Malloced is the memory in whole pages the items occupy (memcached's
// total_malloced).
func (c *Cache) Malloced() int64 { return c.pages * c.page }

// ItemBytes is the bytes the items hold (memcached's "bytes" stat).
func (c *Cache) ItemBytes() int64 { return c.items }

// SetLimit changes the limit, evicting from the LRU end down to it.
func (c *Cache) SetLimit(limitBytes int64) {
	c.limit = limitBytes
	c.shrink(-1, 0)
}

// Get looks a key up with the size the query expects: a hit moves it to the
// front; a miss, or an item of another size (which the app server refetches
// and refills), counts a miss.
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

// Set stores a key after a miss (a fill), replacing an older value; an item
// memcached would refuse (over 1 MiB, or a key too long) is not stored.
func (c *Cache) Set(key string, size int64) {
	if len(key) > memcachedKey || int64(itemHeader+len(key)+1)+size+2 > itemSizeLimit {
		return
	}
	charge, class := chargeClass(len(key), size)
	if i, ok := c.index[key]; ok {
		c.remove(i)
	}
	if charge > c.limit {
		return
	}
	c.shrink(class, charge)
	var i int32
	if n := len(c.free); n > 0 {
		i = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		c.entries = append(c.entries, entry{})
		i = int32(len(c.entries) - 1)
	}
	e := &c.entries[i]
	*e = entry{prev: -1, next: c.head, charge: charge, size: size, class: int32(class), key: key}
	if c.head >= 0 {
		c.entries[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
	c.index[key] = i
	c.charged += charge
	c.account(class, charge)
	c.items += int64(itemHeader+len(key)+1) + size + 2
}

// shrink evicts from the tail until extra more bytes of class fit in the
// limit's pages (class < 0: nothing to add).
func (c *Cache) shrink(class int, extra int64) {
	for c.tail >= 0 && c.pagesWith(class, extra) > c.limit/c.page {
		c.remove(c.tail)
		c.Evictions++
	}
}

func pagesOf(b, page int64) int64 { return (b + page - 1) / page }

// pagesWith is the page count after adding extra bytes to class.
func (c *Cache) pagesWith(class int, extra int64) int64 {
	if class < 0 || extra == 0 {
		return c.pages
	}
	return c.pages - pagesOf(c.class[class], c.page) + pagesOf(c.class[class]+extra, c.page)
}

func (c *Cache) account(class int, delta int64) {
	c.pages += pagesOf(c.class[class]+delta, c.page) - pagesOf(c.class[class], c.page)
	c.class[class] += delta
}

func (c *Cache) touch(i int32) {
	if c.head == i {
		return
	}
	e := &c.entries[i]
	c.entries[e.prev].next = e.next
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = -1, c.head
	c.entries[c.head].prev = i
	c.head = i
}

func (c *Cache) remove(i int32) {
	e := &c.entries[i]
	if e.prev >= 0 {
		c.entries[e.prev].next = e.next
	} else {
		c.head = e.next
	}
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		c.tail = e.prev
	}
	delete(c.index, e.key)
	c.charged -= e.charge
	c.account(int(e.class), -e.charge)
	c.items -= int64(itemHeader+len(e.key)+1) + e.size + 2
	e.key = ""
	c.free = append(c.free, i)
}
