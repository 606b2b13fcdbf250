package fanout

import (
	"testing"
	"testing/quick"
)

func TestBlocking(t *testing.T) {
	type C = Call[int]
	for _, c := range []struct {
		name   string
		calls  []C
		index  int
		failed bool
	}{
		{"none", nil, -1, false},
		{"only empty", []C{{Done: 5, Empty: true}}, -1, false},
		{"slowest", []C{{Done: 3}, {Done: 9}, {Done: 4}}, 1, false},
		{"tie goes to the later", []C{{Done: 9}, {Done: 9}, {Done: 4}}, 1, false},
		{"empty never blocks", []C{{Done: 3}, {Done: 99, Empty: true}}, 0, false},
		{"a failure beats a slower success", []C{{Done: 9}, {Done: 2, Failed: true}}, 1, true},
		{"the last failure", []C{{Done: 5, Failed: true}, {Done: 9}, {Done: 7, Failed: true}}, 2, true},
		{"failure first then success", []C{{Done: 5, Failed: true}, {Done: 1}}, 0, true},
	} {
		i, f := Blocking(c.calls)
		if i != c.index || f != c.failed {
			t.Errorf("%s: got (%d, %v), want (%d, %v)", c.name, i, f, c.index, c.failed)
		}
	}
}

// Property: the blocker is a latest-finishing call among the failed ones
// if any failed, else among all non-empty calls.
func TestBlockingProperty(t *testing.T) {
	f := func(done []uint8, flags []uint8) bool {
		calls := make([]Call[uint8], len(done))
		for i, d := range done {
			var fl uint8
			if i < len(flags) {
				fl = flags[i]
			}
			calls[i] = Call[uint8]{Done: d, Failed: fl%5 == 0, Empty: fl%7 == 0}
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
		for _, c := range calls {
			if !c.Empty && c.Failed == anyFailed && c.Done > calls[idx].Done {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}
