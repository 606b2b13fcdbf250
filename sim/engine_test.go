package sim

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestEngineRunsEventsInTimeThenScheduleOrder(t *testing.T) {
	var e Engine
	var got []int
	e.At(2*time.Second, func() { got = append(got, 3) })
	e.At(time.Second, func() { got = append(got, 1) })
	e.At(time.Second, func() {
		got = append(got, 2)
		e.After(0, func() { got = append(got, 21) }) // same time, after everything already due
	})
	dead := e.At(1500*time.Millisecond, func() { got = append(got, 99) })
	if !dead.Cancel() || dead.Cancel() {
		t.Fatal("Cancel should report true once, then false")
	}
	e.RunUntil(time.Second)
	if want := []int{1, 2, 21}; !equal(got, want) {
		t.Fatalf("after 1 s: %v, want %v", got, want)
	}
	e.RunUntil(5 * time.Second)
	if want := []int{1, 2, 21, 3}; !equal(got, want) || e.Now() != 5*time.Second {
		t.Fatalf("after 5 s: %v at %v, want %v at 5s", got, e.Now(), want)
	}
	if e.At(time.Second, func() {}); e.events[0].at != 5*time.Second {
		t.Fatal("an event in the past must be scheduled now")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Many events at random times, some at the same time, some cancelled, some
// scheduled while running: they run in (time, schedule) order, each once.
func TestEngineOrderAgainstASort(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	var e Engine
	type rec struct {
		at  time.Duration
		seq int
	}
	var want, got []rec
	seq := 0
	var schedule func(at time.Duration)
	schedule = func(at time.Duration) {
		seq++
		r := rec{at, seq}
		ev := e.At(at, func() {
			got = append(got, r)
			if rng.IntN(4) == 0 {
				schedule(e.Now() + time.Duration(rng.IntN(3))*time.Millisecond)
			}
		})
		if rng.IntN(10) == 0 {
			ev.Cancel()
			return
		}
		want = append(want, r)
	}
	for range 5000 {
		schedule(time.Duration(rng.IntN(200)) * time.Millisecond)
	}
	e.RunUntil(time.Hour)
	sort.Slice(want, func(i, j int) bool {
		if want[i].at != want[j].at {
			return want[i].at < want[j].at
		}
		return want[i].seq < want[j].seq
	})
	if len(got) != len(want) {
		t.Fatalf("%d events ran, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d: %v, want %v", i, got[i], want[i])
		}
	}
}
