// Package stackdist computes LRU byte stack distances online: the distance
// of an access is the object's size plus the (weighted) sizes of the
// distinct objects accessed since its previous access; an LRU cache of c
// bytes hits the access iff its distance is at most c (docs/algorithms.md,
// "Miss-ratio curves"). The miss-ratio curves of tracegen mrc, the app
// server's shadow model of its partitions and the simulator's use it.
//
// A Fenwick tree over access times holds, at each object's latest access,
// its weighted size, so a distance is a range sum: O(log n) per access.
// When the time axis fills it is compacted (the live entries renumbered in
// order), so memory follows the number of objects; with a depth limit, the
// objects deeper than it are forgotten at compaction (their next access is
// reported cold), which bounds memory by the objects within that depth.
//
// IDStack names objects by small integers (the simulator's interned keys):
// no hashing, and nothing for the garbage collector to scan. Stack names
// them by strings, interning each to an id of an IDStack.
package stackdist

import (
	"fmt"
	"strings"
)

// IDStack is one LRU stack of objects named by non-negative integers; its
// memory follows the largest id, so ids should be dense. Not safe for
// concurrent use.
type IDStack struct {
	last     []int32 // by id: the time slot of its latest access; -1 when not held
	owner    []int32 // by time slot < n: the id accessed then; -1 once accessed again or forgotten
	vals     []int64 // by time slot: the weighted size at the object's latest access, else 0
	tree     []int64 // 1-based Fenwick tree over vals
	n        int     // time slots used
	live     int     // objects held
	maxDepth int64
	// forget, when set, hears of every object forgotten at compaction.
	forget func(id int32)
}

const initialSlots = 1024

// NewIDs returns an empty stack; maxDepth > 0 forgets objects deeper than
// maxDepth weighted bytes when the stack compacts.
func NewIDs(maxDepth int64) *IDStack {
	return &IDStack{owner: make([]int32, initialSlots), vals: make([]int64, initialSlots),
		tree: make([]int64, initialSlots+1), maxDepth: maxDepth}
}

// Len is the number of objects the stack holds.
func (s *IDStack) Len() int { return s.live }

// Access records an access of object id with its size (counted as weighted
// in the distances of other objects) and returns its distance, or cold for
// an object the stack does not hold. It panics on a negative id.
func (s *IDStack) Access(id int32, size, weighted int64) (d int64, cold bool) {
	if id < 0 {
		panic(fmt.Sprintf("stackdist: negative id %d", id))
	}
	s.room()
	if int(id) >= len(s.last) {
		s.grow(int(id))
	}
	t := s.n
	s.n++
	p := int(s.last[id])
	if p >= 0 {
		d = s.prefix(t) - s.prefix(p+1) + size
		s.add(p, -s.vals[p])
		s.vals[p] = 0
		s.owner[p] = -1
	} else {
		s.live++
	}
	s.last[id] = int32(t)
	s.owner[t] = id
	s.vals[t] = weighted
	s.add(t, weighted)
	return d, p < 0
}

// room compacts the time axis when it is full: before an access, so that
// the object accessed is not forgotten under its caller.
func (s *IDStack) room() {
	if s.n == len(s.vals) {
		s.compact()
	}
}

func (s *IDStack) grow(id int) {
	n := max(2*len(s.last), id+1, initialSlots)
	last := make([]int32, n)
	copy(last, s.last)
	for i := len(s.last); i < n; i++ {
		last[i] = -1
	}
	s.last = last
}

func (s *IDStack) add(i int, delta int64) {
	for j := i + 1; j < len(s.tree); j += j & -j {
		s.tree[j] += delta
	}
}

// prefix is the sum of vals[0:i].
func (s *IDStack) prefix(i int) int64 {
	var sum int64
	for j := i; j > 0; j -= j & -j {
		sum += s.tree[j]
	}
	return sum
}

// compact renumbers the live entries in time order (forgetting those deeper
// than maxDepth) and doubles the time axis when more than half of it stays
// live.
func (s *IDStack) compact() {
	cut, kept := 0, s.live // slots before cut are forgotten
	if s.maxDepth > 0 {
		var depth int64
		kept = 0
		for t := s.n - 1; t >= 0; t-- {
			if s.owner[t] < 0 {
				continue
			}
			depth += s.vals[t]
			if depth > s.maxDepth {
				cut = t + 1
				break
			}
			kept++
		}
	}
	vals, owner := s.vals, s.owner
	if 2*kept > len(s.vals) {
		vals, owner = make([]int64, 2*len(s.vals)), make([]int32, 2*len(s.vals))
	}
	j := 0
	for t := 0; t < s.n; t++ { // j ≤ t: renumbering in place is safe
		id := s.owner[t]
		if id < 0 {
			continue
		}
		if t < cut {
			s.last[id] = -1
			if s.forget != nil {
				s.forget(id)
			}
			continue
		}
		vals[j], owner[j] = s.vals[t], id
		s.last[id] = int32(j)
		j++
	}
	clear(vals[j:])
	s.n, s.live = j, j
	s.vals, s.owner = vals, owner
	if len(s.tree) != len(vals)+1 {
		s.tree = make([]int64, len(vals)+1)
	} else {
		clear(s.tree)
	}
	for i, v := range vals { // linear-time Fenwick construction (zeros too: they carry sums up)
		k := i + 1
		s.tree[k] += v
		if p := k + (k & -k); p < len(s.tree) {
			s.tree[p] += s.tree[k]
		}
	}
}

// Stack is one LRU stack of objects named by strings. Not safe for
// concurrent use.
type Stack struct {
	ids   *IDStack
	byKey map[string]int32
	keys  []string // by id; "" when free
	free  []int32
}

// New returns an empty stack; maxDepth > 0 forgets objects deeper than
// maxDepth weighted bytes when the stack compacts.
func New(maxDepth int64) *Stack {
	s := &Stack{ids: NewIDs(maxDepth), byKey: map[string]int32{}}
	s.ids.forget = func(id int32) {
		delete(s.byKey, s.keys[id])
		s.keys[id] = ""
		s.free = append(s.free, id)
	}
	return s
}

// Len is the number of objects the stack holds.
func (s *Stack) Len() int { return s.ids.Len() }

// Access records an access of key with its size (counted as weighted in the
// distances of other objects) and returns its distance, or cold for an
// object the stack does not hold.
func (s *Stack) Access(key string, size, weighted int64) (d int64, cold bool) {
	s.ids.room() // a compaction may forget key: before it is looked up
	id, ok := s.byKey[key]
	if !ok {
		key = strings.Clone(key) // not the caller's buffer, which it would keep alive
		if k := len(s.free); k > 0 {
			id = s.free[k-1]
			s.free = s.free[:k-1]
			s.keys[id] = key
		} else {
			id = int32(len(s.keys))
			s.keys = append(s.keys, key)
		}
		s.byKey[key] = id
	}
	return s.ids.Access(id, size, weighted)
}
