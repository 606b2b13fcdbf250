package capacity

import (
	"testing"
	"time"
)

// Timers that fire a fixed 0.4 ms late: after a few dozen waits of each
// length, the waits served average the length asked for (within 1%); a
// wait shorter than the lateness is served in no less than half its
// length; lateness beyond the poller's millisecond (a descheduled
// goroutine) is not learnt.
func TestLatenessIsLearntAndCompensated(t *testing.T) {
	const late = 400 * time.Microsecond
	for _, d := range []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 30 * time.Millisecond} {
		var l lateness
		var served time.Duration
		const n, warm = 400, 100
		for i := range n {
			asked := l.ask(d)
			took := asked + late
			l.observe(d, asked, took)
			if i >= warm {
				served += took
			}
		}
		mean := served / (n - warm)
		if diff := mean - d; diff < -d/100 || diff > d/100 {
			t.Errorf("%v: waits average %v", d, mean)
		}
	}
	var l lateness
	for range 200 {
		a := l.ask(500 * time.Microsecond)
		l.observe(500*time.Microsecond, a, a+time.Millisecond)
	}
	if a := l.ask(500 * time.Microsecond); a != 250*time.Microsecond {
		t.Errorf("a 0.5 ms wait behind 1 ms late timers asks %v, want half of it", a)
	}
	var busy lateness
	for range 200 {
		a := busy.ask(10 * time.Millisecond)
		busy.observe(10*time.Millisecond, a, a+8*time.Millisecond)
	}
	if a := busy.ask(10 * time.Millisecond); a < 9*time.Millisecond {
		t.Errorf("8 ms of scheduling delay made a 10 ms wait ask %v: more than the poller's millisecond was learnt", a)
	}
}
