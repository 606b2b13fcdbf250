// Package sim is the discrete-event simulator (docs/simulator.md): the
// experiment's application servers, caches, backends, RBC server and
// statistics in simulated time, driving the controller's own policy code.
// It reuses the servers' code wherever a piece is pure: the backends'
// capacity model (backends/capacity, on a simulated clock), the blocking
// rule (lib/fanout), the RBC computation (rbcserver/rbc over
// rbcserver/ring), the statistics store (rbcserver/stats), the shadow model
// (appserver/shadow), the SLO series (experiment/slo) and the scenario's
// timeline (experiment/scenario). What it models itself — the caches'
// memory, the time a cache lookup, an RPC and a backend's data path take —
// is in model.go and calibration.go, with the measurements behind it.
package sim

import (
	"container/heap"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
)

// Event is a scheduled call. Cancel it with Cancel before it fires.
type Event struct {
	at    time.Duration
	seq   uint64
	fn    func()
	index int // in the heap; -1 once popped
	dead  bool
}

// Cancel stops a pending event; it reports whether the event was pending.
func (e *Event) Cancel() bool {
	if e == nil || e.dead || e.index < 0 {
		return false
	}
	e.dead = true
	return true
}

type eventHeap []*Event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *eventHeap) Push(x any) {
	e := x.(*Event)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *eventHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	e.index = -1
	*h = old[:n-1]
	return e
}

// Engine runs events in time order; events at the same time run in the order
// they were scheduled, so a run is deterministic.
type Engine struct {
	now    time.Duration
	seq    uint64
	events eventHeap
	fired  uint64
}

// Now is the simulated time since the start.
func (e *Engine) Now() time.Duration { return e.now }

// Fired is the number of events run so far.
func (e *Engine) Fired() uint64 { return e.fired }

// At schedules fn at time t (not before now).
func (e *Engine) At(t time.Duration, fn func()) *Event {
	if t < e.now {
		t = e.now
	}
	e.seq++
	ev := &Event{at: t, seq: e.seq, fn: fn}
	heap.Push(&e.events, ev)
	return ev
}

// After schedules fn d from now.
func (e *Engine) After(d time.Duration, fn func()) *Event { return e.At(e.now+d, fn) }

// RunUntil runs every event due at or before t, then sets the time to t.
func (e *Engine) RunUntil(t time.Duration) {
	for len(e.events) > 0 && e.events[0].at <= t {
		ev := heap.Pop(&e.events).(*Event)
		if ev.dead {
			continue
		}
		ev.dead = true
		e.now = ev.at
		e.fired++
		ev.fn()
	}
	if t > e.now {
		e.now = t
	}
}

// Pending is the number of scheduled events (cancelled ones included until
// their time comes).
func (e *Engine) Pending() int { return len(e.events) }

// Clock adapts the engine to backends/capacity's Clock: Now is Epoch plus
// the simulated time; AfterFunc schedules its function as an event, and
// After (when set) runs after it, so the caller can see what the function
// changed.
type Clock struct {
	Engine *Engine
	Epoch  time.Time
	After  func()
}

// Now implements capacity.Clock.
func (c *Clock) Now() time.Time { return c.Epoch.Add(c.Engine.now) }

// AfterFunc implements capacity.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) capacity.Timer {
	ev := c.Engine.After(d, func() {
		f()
		if c.After != nil {
			c.After()
		}
	})
	return timerLike{ev}
}

type timerLike struct{ ev *Event }

func (t timerLike) Stop() bool { return t.ev.Cancel() }
