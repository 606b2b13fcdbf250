package costmodel

// memcached's memory charge per item (docs/simulator.md, "Caches"):
// memcached stores an item in a chunk of the smallest slab class that holds
// it (classes grow by a factor of 1.25 from 96 bytes, up to half a 1 MiB
// page; a larger item spans several chunks of that largest class). Memory
// comes in 1 MiB pages, each given to one class.
const (
	// PageBytes is memcached's slab page.
	PageBytes = 1 << 20
	// ChunkMax is the largest slab chunk: half a page.
	ChunkMax     = PageBytes / 2
	itemHeader   = 56 // item header with CAS
	minChunk     = 96
	growthFactor = 1.25
	chunkAlign   = 8
)

var slabClasses = func() []int64 {
	var out []int64
	size := float64(minChunk)
	for size <= ChunkMax/growthFactor {
		c := int64(size)
		if r := c % chunkAlign; r != 0 {
			c += chunkAlign - r
		}
		out = append(out, c)
		size = float64(c) * growthFactor
	}
	return append(out, ChunkMax)
}()

// SlabClasses is the chunk size of every slab class, ascending (a copy).
func SlabClasses() []int64 { return append([]int64(nil), slabClasses...) }

// ItemCharge is the memory one item takes in memcached: its chunk (or its
// chunks, for an item larger than the largest class).
func ItemCharge(keyLen int, size int64) int64 {
	class, n := ClassOf(keyLen, size)
	return slabClasses[class] * n
}

// ClassOf is an item's slab class (an index into SlabClasses) and how many
// of its chunks it takes.
func ClassOf(keyLen int, size int64) (class int, chunks int64) {
	item := ItemBytes(keyLen, size)
	if item > ChunkMax {
		return len(slabClasses) - 1, (item + ChunkMax - 1) / ChunkMax
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

// ItemBytes is an item's size as memcached counts it: header, key, value.
func ItemBytes(keyLen int, size int64) int64 { return int64(itemHeader+keyLen+1) + size + 2 }
