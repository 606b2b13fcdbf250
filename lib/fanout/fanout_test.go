package fanout

import (
	"math/rand"
	"testing"
	"testing/quick"

	"github.com/robinhoodcache/robinhood/lib/fanout/fanouttest"
)

// TestVectors runs the shared cases (tests/vectors/blocking.json) that the
// OTLP assembler and the Python reporter also pass.
func TestVectors(t *testing.T) {
	for _, c := range fanouttest.Load(t) {
		calls := make([]Call[int64], len(c.Calls))
		for i, v := range c.Calls {
			calls[i] = Call[int64]{Backend: v.Backend, Failed: v.Failed, Empty: v.Empty, NoEnd: v.End == nil}
			if v.End != nil {
				calls[i].Done = *v.End
			}
		}
		i, failed := Blocking(calls)
		got := -1
		if i >= 0 {
			got = calls[i].Backend
		}
		want := -1
		if c.Expect.Blocking != nil {
			want = *c.Expect.Blocking
		}
		if got != want || failed != c.Expect.Failed {
			t.Errorf("%s: got backend %d failed %v, want %d %v (%s)", c.Name, got, failed, want, c.Expect.Failed, c.Description)
		}
	}
}

// Property: the blocker is a latest-finishing call among the failed ones
// if any failed, else among all non-empty calls (no end counting as the
// latest), with the smallest backend id among those; and the answer does
// not depend on the order of the calls.
func TestBlockingProperty(t *testing.T) {
	f := func(done []uint8, flags []uint8, seed int64) bool {
		calls := make([]Call[uint8], len(done))
		for i, d := range done {
			var fl uint8
			if i < len(flags) {
				fl = flags[i]
			}
			calls[i] = Call[uint8]{Backend: int(fl % 4), Done: d % 8, Failed: fl%5 == 0, Empty: fl%7 == 0, NoEnd: fl%11 == 0}
		}
		idx, failed := Blocking(calls)
		anyFailed, anyCall := false, false
		for _, c := range calls {
			anyFailed = anyFailed || (c.Failed && !c.Empty)
			anyCall = anyCall || !c.Empty
		}
		if !anyCall {
			return idx == -1 && !failed
		}
		if failed != anyFailed || idx < 0 || calls[idx].Empty || calls[idx].Failed != anyFailed {
			return false
		}
		b := calls[idx]
		key := func(c Call[uint8]) int {
			if c.NoEnd {
				return 1 << 10
			}
			return int(c.Done)
		}
		for _, c := range calls {
			if c.Empty || c.Failed != anyFailed {
				continue
			}
			if key(c) > key(b) || (key(c) == key(b) && c.Backend < b.Backend) {
				return false
			}
		}
		shuffled := append([]Call[uint8](nil), calls...)
		rand.New(rand.NewSource(seed)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		j, f2 := Blocking(shuffled)
		return f2 == failed && shuffled[j].Backend == b.Backend && key(shuffled[j]) == key(b)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}
