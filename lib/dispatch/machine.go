// Package dispatch is the decision logic of the dispatch policies: which
// replica of a backend serves a batch of queries, and whether, when and
// where a second copy goes (docs/dispatch.md). A policy is a state machine:
// it is told events (a batch arrives, a copy finishes, a timer fires, a
// replica leaves or rejoins rotation) and answers actions (send a copy to
// replica r at a priority, start a timer, cancel a copy, answer the batch
// with a copy's result, fail it). It reads no clock and does no I/O.
//
// A Machine wraps one policy instance (one backend of one app server) with
// the bookkeeping every policy needs: the copies of each batch, the copies
// in flight per replica, the replicas in rotation, the extra-load budget
// and the counters. The app server's mechanism (gRPC calls, contexts,
// timers, health checks) and the simulator's engine both drive a Machine,
// so the same policy file runs in both.
//
// Policies are plug-ins: each lives in its own file and registers itself
// from an init function with Register.
package dispatch

import (
	"fmt"
	"time"
)

// Priority is the class a copy is served in at the backend: a Low copy is
// served only when no Normal one waits (backends/capacity).
type Priority uint8

// The priority classes.
const (
	Normal Priority = 0
	Low    Priority = 1
)

func (p Priority) String() string {
	if p == Low {
		return "low"
	}
	return "normal"
}

// Status is how a copy ended.
type Status uint8

// How a copy ends. Every copy sent is reported Done exactly once, with one
// of these; a copy the policy cancelled may still end OK or failed (its
// answer raced the cancellation).
const (
	// OK: the replica answered.
	OK Status = iota
	// Failed: the replica answered with an error another replica would
	// give too (a bad request).
	Failed
	// Retryable: the copy failed in a way another replica may not
	// (unavailable, the attempt timed out).
	Retryable
	// Cancelled: the copy was cancelled at the policy's request.
	Cancelled
)

func (s Status) String() string {
	return [...]string{"ok", "failed", "retryable", "cancelled"}[s]
}

// Copy is one copy of a batch sent to a replica.
type Copy struct {
	Replica  int
	Sent     time.Duration
	Priority Priority
	// Extra: a duplicate (hedge, reissue), counted against the budget;
	// the first copy and a retry after a failure are not.
	Extra bool
	// Open until the copy is reported Done.
	Open bool
	// Cancelling: the policy asked to cancel it; its Done is still to come.
	Cancelling bool
}

// Batch is one batch of queries for the backend and the policy's record of
// it. The driver allocates it and hands the same pointer to every event of
// the batch; a policy may keep it (in a queue) until the batch is finished:
// answered and every copy Done.
type Batch struct {
	// ID is unique per Machine (the driver's choice).
	ID uint64
	// Arrived is when the batch reached the policy.
	Arrived time.Duration
	// Copies are the copies sent, in order.
	Copies []Copy
	// Answered: Complete or Fail was emitted.
	Answered bool
	// Winner is the index in Copies of the copy that answered the batch, -1
	// while none has (and after a Fail).
	Winner int
	// Retried: a failed copy was retried on another replica.
	Retried bool
	// Queued: the batch waits in the policy's own queue (psq, laedge).
	Queued bool
	// Tag is the policy's to use.
	Tag int
	// Driver is the driver's to use (its record of the batch); policies
	// leave it alone.
	Driver any
	inline [2]Copy
}

// NewBatch returns a batch arriving at now. A Batch is not reused: a policy
// may hold one in its queue after the caller gave up on it.
func NewBatch(id uint64, now time.Duration) *Batch {
	b := &Batch{ID: id, Arrived: now, Winner: -1}
	b.Copies = b.inline[:0]
	return b
}

// Open returns the number of copies not yet Done.
func (b *Batch) Open() int {
	n := 0
	for i := range b.Copies {
		if b.Copies[i].Open {
			n++
		}
	}
	return n
}

// Finished reports whether the batch is answered and all its copies are Done:
// the driver may forget it.
func (b *Batch) Finished() bool { return b.Answered && b.Open() == 0 }

// Tried reports whether a copy of b was ever sent to replica r.
func (b *Batch) Tried(r int) bool {
	for i := range b.Copies {
		if b.Copies[i].Replica == r {
			return true
		}
	}
	return false
}

// On reports whether a copy of b was sent to replica r and is still open.
func (b *Batch) On(r int) bool {
	for i := range b.Copies {
		if b.Copies[i].Replica == r && b.Copies[i].Open {
			return true
		}
	}
	return false
}

// ActionKind says what an Action asks of the driver.
type ActionKind uint8

// The actions.
const (
	// Send a copy of Batch to Replica at Priority (the copy's index in
	// Batch.Copies is Copy).
	Send ActionKind = iota + 1
	// Cancel the copy at Copy: stop waiting for it and ask the replica to
	// drop it (purge it from its queue, stop it if it runs and the backend
	// can). It is still reported Done.
	Cancel
	// Complete answers the batch with the result of the copy at Copy.
	Complete
	// Fail answers the batch with the error of the copy at Copy.
	Fail
	// After asks for Timer(Batch) at time At.
	After
)

func (k ActionKind) String() string {
	return [...]string{"?", "send", "cancel", "complete", "fail", "after"}[k]
}

// Action is one thing the driver must do.
type Action struct {
	Kind  ActionKind
	Batch *Batch
	// Copy is the index of the copy in Batch.Copies (Send, Cancel,
	// Complete, Fail).
	Copy int
	// At is the timer's time (After).
	At time.Duration
}

// Policy is one dispatch policy's decision logic for one backend of one app
// server. Its methods act through the Machine it was built with (m.Send,
// m.Cancel, m.Complete, m.Fail, m.After); they are called by the Machine
// only, one at a time.
type Policy interface {
	// Arrive: a new batch.
	Arrive(now time.Duration, b *Batch)
	// Done: copy c of b ended with st. The Machine has already closed it:
	// it no longer counts in flight.
	Done(now time.Duration, b *Batch, c int, st Status)
	// Timer: a timer the policy set for b fired (never after b finished).
	Timer(now time.Duration, b *Batch)
	// Rotation: replica r left (in false) or rejoined rotation.
	Rotation(now time.Duration, r int, in bool)
}

// Counters are a Machine's totals since it started.
type Counters struct {
	Batches   uint64 // batches arrived
	Copies    uint64 // copies sent, every kind
	Extra     uint64 // duplicates sent (hedges, reissues), under the budget
	Retries   uint64 // copies sent again after a retryable failure
	Cancelled uint64 // copies the policy cancelled
	Denied    uint64 // duplicates the budget refused
	// WonFirst and WonLater count answered batches by the copy that
	// answered: the first sent, or a later one (hedge, reissue, retry).
	WonFirst, WonLater uint64
	Failed             uint64 // batches failed
	Abandoned          uint64 // batches their caller gave up on
}

// Machine drives one policy: it keeps the books every policy needs and
// collects the actions the policy emits. Not safe for concurrent use: the
// driver serializes events.
type Machine struct {
	// Name is the policy's registered name.
	Name   string
	policy Policy
	n      int
	in     []bool
	nIn    int
	flight []int // open copies per replica
	normal []int // open Normal copies per replica
	budget *Budget
	out    []Action
	Counters
}

// Env is what a policy is built for.
type Env struct {
	// Replicas is the number of replicas of the backend (at least one).
	Replicas int
	// Seed seeds the policy's random choices.
	Seed uint64
}

func newMachine(name string, env Env) *Machine {
	m := &Machine{Name: name, n: env.Replicas, in: make([]bool, env.Replicas), nIn: env.Replicas,
		flight: make([]int, env.Replicas), normal: make([]int, env.Replicas)}
	for i := range m.in {
		m.in[i] = true
	}
	return m
}

// Replicas is the number of replicas.
func (m *Machine) Replicas() int { return m.n }

// InRotation reports whether replica r is in rotation.
func (m *Machine) InRotation(r int) bool { return m.in[r] }

// NumInRotation is the number of replicas in rotation.
func (m *Machine) NumInRotation() int { return m.nIn }

// InFlight is the number of open copies at replica r.
func (m *Machine) InFlight(r int) int { return m.flight[r] }

// NormalInFlight is the number of open Normal copies at replica r.
func (m *Machine) NormalInFlight(r int) int { return m.normal[r] }

// Budget is the extra-load budget, nil for a policy that sends no
// duplicates.
func (m *Machine) Budget() *Budget { return m.budget }

// Usable reports whether the policy may send to replica r: it is in
// rotation, or none is (then every replica is tried, as the app server's
// health checks do).
func (m *Machine) Usable(r int) bool { return m.in[r] || m.nIn == 0 }

// --- events (called by the driver) ---

// Arrive hands a new batch to the policy; the actions are returned (valid
// until the next event).
func (m *Machine) Arrive(now time.Duration, b *Batch) []Action {
	m.out = m.out[:0]
	m.Batches++
	if m.budget != nil {
		m.budget.Original(now)
	}
	m.policy.Arrive(now, b)
	return m.out
}

// Done reports that copy c of b ended with st.
func (m *Machine) Done(now time.Duration, b *Batch, c int, st Status) []Action {
	m.out = m.out[:0]
	cp := &b.Copies[c]
	if !cp.Open {
		panic(fmt.Sprintf("dispatch: copy %d of batch %d reported done twice", c, b.ID))
	}
	cp.Open = false
	m.flight[cp.Replica]--
	if cp.Priority == Normal {
		m.normal[cp.Replica]--
	}
	m.policy.Done(now, b, c, st)
	return m.out
}

// Timer reports that a timer the policy set for b fired. The driver drops
// the timers of finished batches.
func (m *Machine) Timer(now time.Duration, b *Batch) []Action {
	m.out = m.out[:0]
	m.policy.Timer(now, b)
	return m.out
}

// Abandon reports that the caller gave up on b (its deadline passed): b is
// answered (the driver answers the caller), its open copies are cancelled,
// and a policy's queue drops it when it comes to it.
func (m *Machine) Abandon(now time.Duration, b *Batch) []Action {
	m.out = m.out[:0]
	if b.Answered {
		return m.out
	}
	b.Answered = true
	m.Abandoned++
	m.CancelOthers(b, -1)
	return m.out
}

// Rotation reports that replica r left (in false) or rejoined rotation.
func (m *Machine) Rotation(now time.Duration, r int, in bool) []Action {
	m.out = m.out[:0]
	if m.in[r] == in {
		return m.out
	}
	m.in[r] = in
	if in {
		m.nIn++
	} else {
		m.nIn--
	}
	m.policy.Rotation(now, r, in)
	return m.out
}

// --- actions (called by the policy) ---

// Send sends a copy of b to replica r at priority p; extra marks a
// duplicate, which the budget must allow first (TryExtra). It returns the
// copy's index.
func (m *Machine) Send(now time.Duration, b *Batch, r int, p Priority, extra bool) int {
	if b.Answered {
		panic(fmt.Sprintf("dispatch %s: a copy of batch %d sent after it was answered", m.Name, b.ID))
	}
	if b.On(r) {
		panic(fmt.Sprintf("dispatch %s: a second open copy of batch %d on replica %d", m.Name, b.ID, r))
	}
	b.Copies = append(b.Copies, Copy{Replica: r, Sent: now, Priority: p, Extra: extra, Open: true})
	m.flight[r]++
	if p == Normal {
		m.normal[r]++
	}
	m.Copies++
	if extra {
		m.Extra++
	}
	c := len(b.Copies) - 1
	m.out = append(m.out, Action{Kind: Send, Batch: b, Copy: c})
	return c
}

// TryExtra asks the budget for one duplicate at now: true (and counted)
// when it allows one. A Machine without a budget allows none.
func (m *Machine) TryExtra(now time.Duration) bool {
	if m.budget == nil || !m.budget.TryExtra(now) {
		m.Denied++
		return false
	}
	return true
}

// Cancel asks the driver to cancel copy c of b (when it is open and not
// being cancelled already).
func (m *Machine) Cancel(b *Batch, c int) {
	cp := &b.Copies[c]
	if !cp.Open || cp.Cancelling {
		return
	}
	cp.Cancelling = true
	m.Cancelled++
	m.out = append(m.out, Action{Kind: Cancel, Batch: b, Copy: c})
}

// CancelOthers cancels every open copy of b but c.
func (m *Machine) CancelOthers(b *Batch, c int) {
	for i := range b.Copies {
		if i != c {
			m.Cancel(b, i)
		}
	}
}

// Complete answers b with copy c's result.
func (m *Machine) Complete(b *Batch, c int) {
	m.answer(b)
	b.Winner = c
	if c == 0 {
		m.WonFirst++
	} else {
		m.WonLater++
	}
	m.out = append(m.out, Action{Kind: Complete, Batch: b, Copy: c})
}

// Fail answers b with copy c's error.
func (m *Machine) Fail(b *Batch, c int) {
	m.answer(b)
	m.Failed++
	m.out = append(m.out, Action{Kind: Fail, Batch: b, Copy: c})
}

func (m *Machine) answer(b *Batch) {
	if b.Answered {
		panic(fmt.Sprintf("dispatch %s: batch %d answered twice", m.Name, b.ID))
	}
	b.Answered = true
}

// After asks for a Timer event for b at time at.
func (m *Machine) After(b *Batch, at time.Duration) {
	m.out = append(m.out, Action{Kind: After, Batch: b, At: at})
}

// Settle is the answer rule most policies share, called from Done: the
// first copy to end OK answers the batch; a failed copy answers it only
// when no other copy is open, and a retryable failure is first retried
// once on another usable replica (pick chooses it; -1: none) or, when no
// usable one is left untried, on a replica out of rotation not tried yet,
// the one with the fewest copies in flight (the app server's "panic
// mode": a replica that came back is probed by the retry instead of the
// batch failing). It returns whether the batch is answered now.
func (m *Machine) Settle(now time.Duration, b *Batch, c int, st Status, pick func(exclude *Batch) int) bool {
	if b.Answered {
		return false
	}
	switch st {
	case OK:
		m.Complete(b, c)
		return true
	case Cancelled:
		if b.Open() > 0 {
			return false
		}
		m.Fail(b, c)
		return true
	}
	if b.Open() > 0 {
		return false
	}
	if st == Retryable && !b.Retried {
		r := pick(b)
		if r < 0 {
			r = m.pickOutOfRotation(b)
		}
		if r >= 0 {
			b.Retried = true
			m.Retries++
			m.Send(now, b, r, Normal, false)
			return false
		}
	}
	m.Fail(b, c)
	return true
}

// pickOutOfRotation returns the replica out of rotation to which no copy of
// b went yet with the fewest open copies (the lowest index on a tie), -1
// when there is none.
func (m *Machine) pickOutOfRotation(b *Batch) int {
	pick := -1
	for i := 0; i < m.n; i++ {
		if m.in[i] || b.Tried(i) {
			continue
		}
		if pick < 0 || m.flight[i] < m.flight[pick] {
			pick = i
		}
	}
	return pick
}
