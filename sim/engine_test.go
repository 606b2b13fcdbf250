package sim

import (
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
	if e.At(time.Second, func() {}).at != 5*time.Second {
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
