package keystream

import (
	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// DefaultSizeSlots bounds the keys whose sizes one fetchers stream
// remembers (Options.SizeSlots): a table of 2^21 slots, 12 bytes each
// (24 MiB), three quarters of them filled at most: about 1.5 M keys.
const DefaultSizeSlots = 1 << 21

// minSizeSlots is the table's first size, and the least Options.SizeSlots
// is raised to.
const minSizeSlots = 1 << 12

// maxProbe bounds the slots one lookup visits: keys crafted to share a
// bucket cost a bounded time each, and the last ones are not remembered.
const maxProbe = 64

// sizeTable remembers the size of each key of a fetchers stream, in memory
// bounded by its slot count whatever the number of distinct keys. It is an
// open-addressing table (linear probing) keyed by a 64-bit hash of the key
// (FNV-1a, then a finalizer), growing by doubling up to maxSlots. What the
// bound costs (docs/workloads.md, "Formats"): a key met once the table is
// three-quarters full at its largest, or whose probe run is longer than
// maxProbe, is not remembered, so its misses take the synthesized size, as
// a key without any hit does; two keys with the same 64-bit hash (for 5 M
// distinct keys, a chance of about one in a million) share one size. The table is
// deterministic: the same stream gives the same sizes.
type sizeTable struct {
	hash     []uint64 // 0: an empty slot (a key hashing to 0 is stored as 1)
	size     []uint32
	n        int
	maxSlots int
	// full is set once a key was not remembered.
	full bool
}

func newSizeTable(maxSlots int) *sizeTable {
	slots := max(maxSlots, minSizeSlots)
	for slots&(slots-1) != 0 { // a power of two, at most the bound
		slots &= slots - 1
	}
	first := min(minSizeSlots, slots)
	return &sizeTable{hash: make([]uint64, first), size: make([]uint32, first), maxSlots: slots}
}

func keyHash(key string) uint64 {
	h := hashing.Fmix64(hashing.FNV1a(key))
	if h == 0 {
		h = 1
	}
	return h
}

// find returns the slot holding h, or the empty slot where it would go
// (found false), or -1 when maxProbe slots hold other keys.
func (t *sizeTable) find(h uint64) (int, bool) {
	mask := uint64(len(t.hash) - 1)
	i := h & mask
	for range maxProbe {
		switch t.hash[i] {
		case h:
			return int(i), true
		case 0:
			return int(i), false
		}
		i = (i + 1) & mask
	}
	return -1, false
}

// get returns the key's remembered size.
func (t *sizeTable) get(key string) (int64, bool) {
	i, ok := t.find(keyHash(key))
	if !ok {
		return 0, false
	}
	return int64(t.size[i]), true
}

// put remembers size for key: always when replace is set, else only when
// the key has no size yet (its first hit's).
func (t *sizeTable) put(key string, size int64, replace bool) {
	h := keyHash(key)
	i, ok := t.find(h)
	if ok {
		if replace {
			t.size[i] = uint32(size)
		}
		return
	}
	if i < 0 || (t.n+1)*4 > len(t.hash)*3 {
		if len(t.hash) >= t.maxSlots {
			t.full = true
			return
		}
		t.grow()
		t.put(key, size, replace)
		return
	}
	t.hash[i], t.size[i] = h, uint32(size)
	t.n++
}

// grow doubles the table.
func (t *sizeTable) grow() {
	oldHash, oldSize := t.hash, t.size
	t.hash, t.size = make([]uint64, 2*len(oldHash)), make([]uint32, 2*len(oldHash))
	t.n = 0
	for j, h := range oldHash {
		if h == 0 {
			continue
		}
		if i, _ := t.find(h); i >= 0 {
			t.hash[i], t.size[i] = h, oldSize[j]
			t.n++
		} else {
			t.full = true
		}
	}
}
