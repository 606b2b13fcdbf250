package capacity

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Timers fire late: on Linux the Go runtime's poller sleeps in whole
// milliseconds when nothing else wakes it, so a 2 ms wait took 2.2–2.6 ms on
// the development machine and a 0.5 ms one about 1.1 ms. A backend that
// waited out its cost with a plain timer served 2 ms queries in 2.4–2.5 ms
// on average (docs/hedging.md, "Measure before hedging"). lateness learns
// how late this model's timers fire, per class of requested duration, and
// a wait asks for the duration less that, so the waits served average what
// was asked for, at no CPU cost (no spinning). A duration shorter than the
// timers' granularity cannot be served exactly: a wait never asks for less
// than half its duration.
type lateness struct {
	ns [lateClasses]atomic.Int64 // a running mean of (fired − asked), by class
}

const (
	lateClasses = 24
	lateUnit    = 64 * time.Microsecond
	// lateWeight: each observation moves the mean 1/16 of the way.
	lateWeight = 16
)

func lateClass(d time.Duration) int {
	return min(bits.Len64(uint64(d/lateUnit)), lateClasses-1)
}

// ask is the timer duration that serves a wait of d.
func (l *lateness) ask(d time.Duration) time.Duration {
	return max(d-time.Duration(l.ns[lateClass(d)].Load()), d/2)
}

// observe records that a wait of d, asked as asked, took took. Lateness
// beyond the poller's millisecond is not the timer's but a busy machine's
// (the goroutine waited for a core): it is not learnt, or a loaded backend
// would cut every wait short.
func (l *lateness) observe(d, asked, took time.Duration) {
	c := &l.ns[lateClass(d)]
	old := c.Load()
	late := min(max(took-asked, 0), maxLate)
	c.Store(old + (int64(late)-old)/lateWeight)
}

// maxLate is the most lateness learnt: the poller's granularity.
const maxLate = time.Millisecond
