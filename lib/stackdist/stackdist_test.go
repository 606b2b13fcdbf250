package stackdist

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// naive is the definition: the object's size plus the sizes of the distinct
// objects accessed since its previous access.
type naive struct {
	seq  []string
	size map[string]int64
}

func (n *naive) access(k string, s int64) (int64, bool) {
	n.size[k] = s
	last := -1
	for i := len(n.seq) - 1; i >= 0; i-- {
		if n.seq[i] == k {
			last = i
			break
		}
	}
	n.seq = append(n.seq, k)
	if last < 0 {
		return 0, true
	}
	seen := map[string]bool{}
	d := s
	for _, o := range n.seq[last+1 : len(n.seq)-1] {
		if !seen[o] && o != k {
			seen[o] = true
			d += n.size[o]
		}
	}
	return d, false
}

func TestDistancesAgainstTheDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	s := New(0)
	n := &naive{size: map[string]int64{}}
	for i := range 5000 { // several compactions (the array starts at 1024)
		k := strconv.Itoa(int(r.ExpFloat64() * 80))
		size := int64(1 + r.IntN(100))
		d, cold := s.Access(k, size, size)
		wd, wcold := n.access(k, size)
		if d != wd || cold != wcold {
			t.Fatalf("access %d of %s: (%d, %v), want (%d, %v)", i, k, d, cold, wd, wcold)
		}
	}
}

// With a depth limit, objects deeper than it are forgotten at compaction;
// those within it keep their exact distances.
func TestDepthLimitBoundsMemory(t *testing.T) {
	s := New(10_000)
	for i := range 200_000 {
		s.Access(strconv.Itoa(i), 100, 100) // every object once: all deep
	}
	if s.Len() > 2048 {
		t.Fatalf("%d objects held with a 100-object depth", s.Len())
	}
	d, cold := s.Access("199999", 100, 100)
	if cold || d != 100 {
		t.Fatalf("the newest object: %d %v", d, cold)
	}
	if _, cold := s.Access("5", 100, 100); !cold {
		t.Fatal("a forgotten object is reported cold")
	}
}

// The id stack is the same stack: against the definition, with ids.
func TestIDStackAgainstTheDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	s := NewIDs(0)
	n := &naive{size: map[string]int64{}}
	for i := range 5000 {
		id := int32(r.ExpFloat64() * 80)
		size := int64(1 + r.IntN(100))
		d, cold := s.Access(id, size, size)
		wd, wcold := n.access(strconv.Itoa(int(id)), size)
		if d != wd || cold != wcold {
			t.Fatalf("access %d of %d: (%d, %v), want (%d, %v)", i, id, d, cold, wd, wcold)
		}
	}
}

// Within the depth limit distances stay exact; a forgotten key's id is
// reused, so the intern table is bounded too.
func TestDepthLimitKeepsNearDistancesAndBoundsKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	s := New(5_000)
	n := &naive{size: map[string]int64{}}
	for i := range 20_000 {
		k := strconv.Itoa(int(r.ExpFloat64() * 300))
		d, cold := s.Access(k, 10, 10)
		wd, wcold := n.access(k, 10)
		// Whatever the stack still holds has its exact distance; a cold
		// answer is right for a new object or one deeper than the limit
		// (within twice the time axis of it).
		if !cold && (wcold || d != wd) {
			t.Fatalf("access %d of %s: (%d, %v), want (%d, %v)", i, k, d, cold, wd, wcold)
		}
		if cold && !wcold && wd <= 5_000 {
			t.Fatalf("access %d of %s: cold at distance %d, within the limit", i, k, wd)
		}
	}
	if len(s.keys) > 2*1024 || len(s.byKey) != s.Len() {
		t.Fatalf("%d ids, %d keys for %d objects", len(s.keys), len(s.byKey), s.Len())
	}
}

func TestNegativeIDPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewIDs(0).Access(-1, 1, 1)
}
