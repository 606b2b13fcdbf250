// Package stackdist computes LRU byte stack distances online: the distance
// of an access is the object's size plus the (weighted) sizes of the
// distinct objects accessed since its previous access; an LRU cache of c
// bytes hits the access iff its distance is at most c (docs/algorithms.md,
// "Miss-ratio curves"). The miss-ratio curves of tracegen mrc and the app
// server's shadow model of its partitions both use it.
//
// A Fenwick tree over access times holds, at each object's latest access,
// its weighted size, so a distance is a range sum: O(log n) per access.
// When the time axis fills it is compacted (the live entries renumbered in
// order), so memory follows the number of objects; with a depth limit, the
// objects deeper than it are forgotten at compaction (their next access is
// reported cold), which bounds memory by the objects within that depth.
package stackdist

import "sort"

// Stack is one LRU stack. Not safe for concurrent use.
type Stack struct {
	last     map[string]int
	vals     []int64
	tree     []int64 // 1-based Fenwick tree over vals
	n        int
	maxDepth int64
}

// New returns an empty stack; maxDepth > 0 forgets objects deeper than
// maxDepth weighted bytes when the stack compacts.
func New(maxDepth int64) *Stack {
	return &Stack{last: map[string]int{}, vals: make([]int64, 1024), tree: make([]int64, 1025), maxDepth: maxDepth}
}

// Len is the number of objects the stack holds.
func (s *Stack) Len() int { return len(s.last) }

// Access records an access of key with its size (counted as weighted in the
// distances of other objects) and returns its distance, or cold for an
// object the stack does not hold.
func (s *Stack) Access(key string, size, weighted int64) (d int64, cold bool) {
	if s.n == len(s.vals) {
		s.compact()
	}
	t := s.n
	s.n++
	p, seen := s.last[key]
	if seen {
		d = s.prefix(t) - s.prefix(p+1) + size
		s.add(p, -s.vals[p])
		s.vals[p] = 0
	}
	s.last[key] = t
	s.vals[t] = weighted
	s.add(t, weighted)
	return d, !seen
}

func (s *Stack) add(i int, delta int64) {
	for j := i + 1; j < len(s.tree); j += j & -j {
		s.tree[j] += delta
	}
}

// prefix is the sum of vals[0:i].
func (s *Stack) prefix(i int) int64 {
	var sum int64
	for j := i; j > 0; j -= j & -j {
		sum += s.tree[j]
	}
	return sum
}

// compact renumbers the live entries in order (dropping those deeper than
// maxDepth) and doubles the array when more than half of it stays live.
func (s *Stack) compact() {
	type entry struct {
		t   int
		key string
	}
	order := make([]entry, 0, len(s.last))
	for k, t := range s.last {
		order = append(order, entry{t, k})
	}
	sort.Slice(order, func(i, j int) bool { return order[i].t < order[j].t })
	if s.maxDepth > 0 {
		var depth int64
		cut := 0
		for i := len(order) - 1; i >= 0; i-- {
			depth += s.vals[order[i].t]
			if depth > s.maxDepth {
				cut = i + 1
				break
			}
		}
		for _, e := range order[:cut] {
			delete(s.last, e.key)
		}
		order = order[cut:]
	}
	size := len(s.vals)
	if 2*len(order) > size {
		size *= 2
	}
	vals := make([]int64, size)
	for i, e := range order {
		vals[i] = s.vals[e.t]
		s.last[e.key] = i
	}
	s.n = len(order)
	tree := make([]int64, len(vals)+1)
	for i, v := range vals { // linear-time Fenwick construction
		j := i + 1
		tree[j] += v
		if p := j + (j & -j); p < len(tree) {
			tree[p] += tree[j]
		}
	}
	s.vals, s.tree = vals, tree
}
