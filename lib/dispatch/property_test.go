package dispatch

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// world is a test driver: replicas that answer after random service times
// (some never, some fail), a caller that gives up after a deadline, and
// replicas that leave and rejoin rotation; it checks every action against
// the rules of the Machine's contract.
type world struct {
	t      *testing.T
	m      *Machine
	rng    *rand.Rand
	now    time.Duration
	events eventQueue
	seq    int
	// per batch
	live    map[*Batch]bool
	done    map[*Batch]map[int]bool // copies reported Done
	answers map[*Batch]int
	// budget audit: times of originals and extras
	origT, extraT []time.Duration
	// options
	hangProb, failProb float64
	deadline           time.Duration
	sentOut            int  // copies sent to an out-of-rotation replica while another was in
	single             bool // the policy is registered Single
}

type event struct {
	at  time.Duration
	seq int
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (w *world) at(t time.Duration, fn func()) {
	w.seq++
	heap.Push(&w.events, &event{at: t, seq: w.seq, fn: fn})
}

func (w *world) apply(acts []Action) {
	// Copy: the slice is reused by the next event.
	for _, a := range append([]Action(nil), acts...) {
		b := a.Batch
		switch a.Kind {
		case Send:
			cp := b.Copies[a.Copy]
			if w.single && b.Open() > 1 {
				w.t.Fatalf("%s is Single but batch %d has %d copies open", w.m.Name, b.ID, b.Open())
			}
			if !w.m.InRotation(cp.Replica) && w.m.NumInRotation() > 0 && !w.panicRetry(b, a.Copy) {
				w.sentOut++
			}
			if cp.Extra {
				w.extraT = append(w.extraT, w.now)
				w.auditBudget()
			}
			c := a.Copy
			u := w.rng.Float64()
			switch {
			case u < w.hangProb:
				// never answers: the driver's attempt timeout ends it
				w.at(w.now+w.deadline, func() { w.finish(b, c, Retryable) })
			case u < w.hangProb+w.failProb:
				w.at(w.now+time.Duration(w.rng.IntN(3000))*time.Microsecond, func() { w.finish(b, c, Retryable) })
			default:
				svc := time.Duration(w.rng.ExpFloat64()*1000) * time.Microsecond
				if cp.Priority == Low {
					svc += time.Duration(w.rng.IntN(2000)) * time.Microsecond
				}
				w.at(w.now+svc, func() { w.finish(b, c, OK) })
			}
		case Cancel:
			c := a.Copy
			// The cancellation is acknowledged after a while; the answer
			// may win the race (finish ignores a second end).
			w.at(w.now+time.Duration(w.rng.IntN(500))*time.Microsecond, func() { w.finish(b, c, Cancelled) })
		case Complete, Fail:
			if w.answers[b] > 0 {
				w.t.Fatalf("%s: batch %d answered twice", w.m.Name, b.ID)
			}
			w.answers[b]++
			if a.Kind == Complete && b.Copies[a.Copy].Open {
				w.t.Fatalf("%s: batch %d completed by open copy %d", w.m.Name, b.ID, a.Copy)
			}
		case After:
			if a.At < w.now {
				w.t.Fatalf("%s: a timer in the past", w.m.Name)
			}
			w.at(a.At, func() {
				if !w.live[b] {
					return // the driver drops the timers of finished batches
				}
				w.apply(w.m.Timer(w.now, b))
				w.forget(b)
			})
		}
	}
}

// finish reports copy c of b ended (once: a later end of the same copy,
// the loser of a cancellation race, is dropped).
func (w *world) finish(b *Batch, c int, st Status) {
	if w.done[b] == nil {
		w.done[b] = map[int]bool{}
	}
	if w.done[b][c] {
		return
	}
	if b.Copies[c].Cancelling && st == Retryable {
		st = Cancelled
	}
	w.done[b][c] = true
	w.apply(w.m.Done(w.now, b, c, st))
	w.forget(b)
}

func (w *world) forget(b *Batch) {
	if b.Finished() {
		delete(w.live, b)
	}
}

// auditBudget checks the extra just sent against an exact count.
func (w *world) auditBudget() {
	bud := w.m.Budget()
	if bud == nil {
		w.t.Fatalf("%s: a duplicate without a budget", w.m.Name)
	}
	from := w.now - bud.Window
	var o, e int
	for _, t := range w.origT {
		if t > from {
			o++
		}
	}
	for _, t := range w.extraT {
		if t > from {
			e++
		}
	}
	if float64(e) > bud.Ratio*float64(o)+1e-9 {
		w.t.Fatalf("%s: %d duplicates for %d batches in the window ending %v (budget %g)", w.m.Name, e, o, w.now, bud.Ratio)
	}
}

// panicRetry reports whether copy c of b is a retry sent out of rotation
// because no replica in rotation was left untried (Machine.Settle).
func (w *world) panicRetry(b *Batch, c int) bool {
	if c == 0 || !b.Retried || b.Copies[c].Extra {
		return false
	}
	for r := range w.m.Replicas() {
		if w.m.InRotation(r) && !slices.ContainsFunc(b.Copies[:c], func(x Copy) bool { return x.Replica == r }) {
			return false
		}
	}
	return true
}

// run offers n batches at the given mean interarrival, with rotation
// changes, and runs until every batch is answered and every copy Done.
func runWorld(t *testing.T, name string, params any, replicas int, seed uint64, n int, gap time.Duration, hang, fail float64) *world {
	m, err := New(name, params, Env{Replicas: replicas, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, m: m, rng: rand.New(rand.NewPCG(seed, 99)), live: map[*Batch]bool{},
		done: map[*Batch]map[int]bool{}, answers: map[*Batch]int{}, hangProb: hang, failProb: fail,
		deadline: 20 * time.Millisecond}
	if f, _ := Lookup(name); f.Single {
		w.single = true
	}
	var at time.Duration
	for i := range n {
		at += time.Duration(w.rng.ExpFloat64() * float64(gap))
		id := uint64(i)
		w.at(at, func() {
			b := NewBatch(id, w.now)
			w.live[b] = true
			w.origT = append(w.origT, w.now)
			w.apply(m.Arrive(w.now, b))
			w.forget(b)
			// The caller gives up at its deadline.
			w.at(w.now+3*w.deadline, func() {
				if !b.Answered {
					w.answers[b]++
					w.apply(m.Abandon(w.now, b))
					w.forget(b)
				}
			})
		})
		if replicas > 1 && w.rng.IntN(200) == 0 {
			r := w.rng.IntN(replicas)
			w.at(at, func() { w.apply(m.Rotation(w.now, r, false)) })
			w.at(at+5*time.Millisecond, func() { w.apply(m.Rotation(w.now, r, true)) })
		}
	}
	for w.events.Len() > 0 {
		e := heap.Pop(&w.events).(*event)
		w.now = e.at
		e.fn()
	}
	return w
}

func (w *world) check(n int) {
	t, m := w.t, w.m
	if len(w.live) != 0 {
		t.Fatalf("%s: %d batches never finished", m.Name, len(w.live))
	}
	if len(w.answers) != n {
		t.Fatalf("%s: %d of %d batches answered", m.Name, len(w.answers), n)
	}
	for r := range m.Replicas() {
		if m.InFlight(r) != 0 || m.NormalInFlight(r) != 0 {
			t.Fatalf("%s: replica %d has %d copies in flight at the end", m.Name, r, m.InFlight(r))
		}
	}
	if w.sentOut > 0 {
		t.Fatalf("%s: %d copies sent to a replica out of rotation", m.Name, w.sentOut)
	}
	c := m.Counters
	if c.WonFirst+c.WonLater+c.Failed+c.Abandoned != uint64(n) || c.Batches != uint64(n) {
		t.Fatalf("%s: counters do not add up: %+v", m.Name, c)
	}
}

// Every registered policy, driven through random arrivals, service times,
// hung and failing replicas, cancellation races, callers giving up and
// replicas leaving rotation: every batch is answered once, every copy ends
// once, nothing goes to a replica out of rotation, and no duplicate exceeds
// the budget.
func TestEveryPolicyKeepsTheContract(t *testing.T) {
	for _, name := range Names() {
		for _, budget := range []float64{-1, 0.05, 0.5} {
			t.Run(fmt.Sprintf("%s/budget=%g", name, budget), func(t *testing.T) {
				for seed := range uint64(4) {
					params := withBudget(t, name, budget)
					for _, replicas := range []int{1, 2, 5} {
						const n = 3000
						w := runWorld(t, name, params, replicas, seed, n, 400*time.Microsecond, 0.01, 0.02)
						w.check(n)
					}
				}
			})
		}
	}
}

// withBudget returns the policy's defaults with the budget set (budget < 0:
// the defaults as they are).
func withBudget(t *testing.T, name string, budget float64) any {
	p, err := Defaults(name)
	if err != nil {
		t.Fatal(err)
	}
	if budget >= 0 {
		if bp := budgetParams(p); bp != nil {
			bp.Budget = budget
			bp.BudgetWindow = 0
			bp.BudgetWindow.UnmarshalJSON([]byte(`"50ms"`)) //nolint:errcheck
		}
	}
	return p
}

func budgetParams(p any) *BudgetParams {
	if v, ok := p.(interface{ Budgeted() *BudgetParams }); ok {
		return v.Budgeted()
	}
	return nil
}
