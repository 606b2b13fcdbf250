// Package sim is the discrete-event simulator (docs/simulator.md): the
// experiment's servers in simulated time, on the servers' own pure packages
// wherever it can and its own models of the rest (docs/simulator.md, "What
// is shared with the servers, and what is modelled").
package sim

import (
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
)

// Event is a scheduled call. Cancel it with Cancel before it fires.
type Event struct {
	fn   func()
	dead bool // cancelled, or run
}

// Cancel stops a pending event; it reports whether the event was pending.
func (e *Event) Cancel() bool {
	if e == nil || e.dead {
		return false
	}
	e.dead = true
	return true
}

// queued is an event in the queue with its sort key inline, so ordering the
// queue reads no event (an exact run holds tens of thousands, scattered in
// memory).
type queued struct {
	at  time.Duration
	seq uint64
	ev  *Event
}

// eventHeap is a 4-ary min-heap of events by (time, sequence): shallower
// than a binary heap, and without container/heap's interface calls (the
// engine's hottest loop).
type eventHeap []queued

func before(a, b *queued) bool { return a.at < b.at || (a.at == b.at && a.seq < b.seq) }

func (h *eventHeap) push(e queued) {
	*h = append(*h, e)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !before(&e, &q[p]) {
			break
		}
		q[i] = q[p]
		i = p
	}
	q[i] = e
}

func (h *eventHeap) pop() queued {
	q := *h
	top := q[0]
	n := len(q) - 1
	last := q[n]
	q[n] = queued{}
	q = q[:n]
	*h = q
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+4, n); j++ {
			if before(&q[j], &q[m]) {
				m = j
			}
		}
		if !before(&q[m], &last) {
			break
		}
		q[i] = q[m]
		i = m
	}
	q[i] = last
	return top
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
	ev := &Event{fn: fn}
	e.events.push(queued{at: t, seq: e.seq, ev: ev})
	return ev
}

// After schedules fn d from now.
func (e *Engine) After(d time.Duration, fn func()) *Event { return e.At(e.now+d, fn) }

// RunUntil runs every event due at or before t, then sets the time to t.
func (e *Engine) RunUntil(t time.Duration) {
	for len(e.events) > 0 && e.events[0].at <= t {
		top := e.events.pop()
		ev := top.ev
		if ev.dead {
			continue
		}
		ev.dead = true
		e.now = top.at
		e.fired++
		ev.fn()
	}
	if t > e.now {
		e.now = t
	}
}

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
