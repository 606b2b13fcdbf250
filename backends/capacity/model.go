// Package capacity is the capacity model of a backend service (docs/backends.md): a
// FIFO queue per priority class in front of a worker limit and a token
// bucket, plus injected latency. Every query is one operation. An operation
// joins its class's queue, is admitted when (a) fewer than Workers
// operations are in service, (b) the token bucket grants a token (Rate
// tokens per second, a small burst; Rate 0 means unlimited), (c) no Normal
// operation waits, if it is Low, and (d) the replica is not stalled; then it
// runs its real data path plus ExtraLatencyMs plus its inherent cost (mean
// CostMs, drawn from the operation's key so every copy of a query costs the
// same) plus, with probability HiccupProb, HiccupMs, all while holding its
// worker. With probability StallProb an admission stalls the whole replica
// for StallMs: nothing is admitted, and every operation in service finishes
// StallMs later.
//
// Because work beyond capacity waits in the queue, latency rises as offered
// load nears capacity, as it does in a resource-limited server. Limits change
// at run time and apply to queued work at once. An operation whose caller
// gives up while it is queued leaves the queue without being served.
//
// The model knows nothing about data paths or the network; time comes from a
// Clock so tests can drive it with a fake one.
package capacity

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// Clock is the model's source of time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started yet.
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time                            { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}

// The token bucket holds BurstWindow worth of tokens at the current rate, and
// never fewer than MinBurst. A bucket of at least two tokens keeps the served
// rate exact when the refill timer fires late (up to one token interval), and
// the window keeps it exact at high rates, where timer lateness spans many
// tokens.
const (
	BurstWindow = 10 * time.Millisecond
	MinBurst    = 2
)

// MaxCatchUp bounds the tokens credited at once to a backlog that waited
// for tokens longer than it should have (a late timer, a descheduled
// process): at most this much time's worth at the current rate.
const MaxCatchUp = time.Second

// Burst returns the bucket depth, in tokens, for rate operations per second.
func Burst(rate float64) float64 {
	return math.Max(MinBurst, math.Ceil(rate*BurstWindow.Seconds()))
}

// Errors returned by Join and Wait.
var (
	ErrClosed    = errors.New("capacity: backend is shutting down")
	ErrQueueFull = errors.New("capacity: queue is full")
)

// Stats is a snapshot of the model's state.
type Stats struct {
	// QueueLength is the number of operations waiting for admission, of
	// every priority.
	QueueLength int
	// LowQueued is how many of them are Low.
	LowQueued int
	// Stalls counts the whole-replica stalls since the start.
	Stalls uint64
	// InService is the number of admitted operations not yet released.
	InService int
}

// Model is one backend's capacity. It is safe for concurrent use.
type Model struct {
	clock Clock

	mu        sync.Mutex
	lim       Limits
	burst     float64
	tokens    float64
	refilled  time.Time                // when tokens was last brought up to date
	queue     [numPriorities]list.List // of *Ticket, oldest first, by priority
	queued    int                      // in every queue
	inService int
	serving   []*Ticket // admitted, not released (a stall extends them)
	stalled   time.Time // no admission before
	closed    bool
	rng       *rand.Rand
	timer     Timer     // pending refill wake-up, nil if none
	timerAt   time.Time // when timer fires
	timerGen  uint64
	// tokenBound is set while queued work waits for tokens alone (a worker
	// is free); refills then credit every token owed since (refillLocked).
	tokenBound bool
	stalls     uint64
	late       lateness // how late the clock's timers fire (lateness.go)
}

// Priority is an operation's class: a Low operation is admitted only when
// no Normal one waits.
type Priority uint8

// The priority classes.
const (
	Normal Priority = iota
	Low
	numPriorities
)

// Op describes one operation to Join.
type Op struct {
	Priority Priority
	// Key identifies the query: with CostMs > 0 its inherent cost is drawn
	// from it (CostOf), so the copies of one query on any replica cost the
	// same. 0: the cost is drawn per execution from the model's generator.
	Key uint64
	// CostGiven: the caller drew the operation's inherent cost (a
	// simulator with another cost distribution); Cost replaces the CostMs
	// draw.
	CostGiven bool
	Cost      time.Duration
	// HiccupGiven: the caller drew whether the operation hiccups (a
	// simulator that must know the draws ahead, as the idealized hedge);
	// Hiccup replaces the HiccupProb draw.
	HiccupGiven bool
	Hiccup      bool
}

// New returns a model with limits l. seed drives the hiccup draws, so a run
// with the same seed and the same admission order hiccups on the same
// operations. A nil clock means SystemClock.
func New(l Limits, seed uint64, clock Clock) (*Model, error) {
	if err := l.Validate(); err != nil {
		err = fieldError(err)
		return nil, err
	}
	if clock == nil {
		clock = SystemClock
	}
	m := &Model{clock: clock, lim: l, rng: rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc909))}
	m.burst = Burst(l.Rate)
	m.tokens = m.burst
	m.refilled = clock.Now()
	return m, nil
}

// Limits returns the current limits.
func (m *Model) Limits() Limits {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lim
}

// Stats returns the current queue length and number in service.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{QueueLength: m.queued, LowQueued: m.queue[Low].Len(), InService: m.inService, Stalls: m.stalls}
}

// Update applies p atomically and returns the limits before and after. An
// invalid result changes nothing and returns a *FieldError. New limits apply
// to queued operations at once: more workers or a higher rate admit waiters
// immediately; a lower rate paces the next admissions; fewer workers stop
// admissions until enough in-service operations finish. Operations already
// in service keep the delay they drew when admitted.
func (m *Model) Update(p Patch) (old, cur Limits, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old = m.lim
	next := p.Apply(old)
	if err := next.Validate(); err != nil {
		return old, old, fieldError(err)
	}
	now := m.clock.Now()
	m.refillLocked(now) // tokens earned at the old rate are kept
	if old.Rate == 0 {
		m.tokens = Burst(next.Rate)
	}
	m.lim = next
	m.burst = Burst(next.Rate)
	m.tokens = math.Min(m.tokens, m.burst)
	m.stopTimerLocked()
	m.dispatchLocked(now)
	return old, next, nil
}

// Close rejects every queued operation and future Join with ErrClosed.
// Operations in service finish normally.
func (m *Model) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.stopTimerLocked()
	for p := range m.queue {
		q := &m.queue[p]
		for e := q.Front(); e != nil; e = q.Front() {
			t := q.Remove(e).(*Ticket)
			t.state = stateFailed
			t.err = ErrClosed
			close(t.ready)
		}
	}
	m.queued = 0
}

type ticketState uint8

const (
	stateQueued ticketState = iota
	stateAdmitted
	stateDone   // released after service
	stateFailed // left the queue (cancelled or closed) or gave back its admission
)

// Ticket is one operation's place in the model, from Join to Release.
type Ticket struct {
	m     *Model
	elem  *list.Element
	ready chan struct{} // closed on admission or failure

	// Guarded by m.mu until ready is closed; read-only afterwards.
	state    ticketState
	err      error
	joined   time.Time
	admitted time.Time
	delay    time.Duration
	hiccup   bool
	prio     Priority
	key      uint64
	given    *Op           // the caller's draws (Op.Given), nil otherwise
	slot     int           // index in m.serving while admitted
	ext      time.Duration // stall time owed while in service, not yet taken
}

// Join puts n operations at the tail of the queue, in order, and returns
// their tickets; operations that can be admitted at once already are. The
// batch is rejected whole with ErrQueueFull when the queue already holds
// QueueLimit or more operations (QueueLimit > 0), and with ErrClosed after
// Close. Every returned ticket must be passed to Wait.
func (m *Model) Join(n int) ([]*Ticket, error) { return m.join(n, nil) }

// JoinOps is Join for operations with a priority and a key each.
func (m *Model) JoinOps(ops []Op) ([]*Ticket, error) { return m.join(len(ops), ops) }

func (m *Model) join(n int, ops []Op) ([]*Ticket, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if q := m.lim.QueueLimit; q > 0 && m.queued >= q {
		return nil, fmt.Errorf("%w: %d operations waiting, queue_limit is %d", ErrQueueFull, m.queued, q)
	}
	now := m.clock.Now()
	ts := make([]*Ticket, n)
	for i := range ts {
		t := &Ticket{m: m, ready: make(chan struct{}), joined: now}
		if ops != nil {
			if ops[i].Priority >= numPriorities {
				panic(fmt.Sprintf("capacity: priority %d", ops[i].Priority))
			}
			t.prio, t.key = ops[i].Priority, ops[i].Key
			if ops[i].CostGiven || ops[i].HiccupGiven {
				op := ops[i]
				t.given = &op
			}
		}
		t.elem = m.queue[t.prio].PushBack(t)
		ts[i] = t
	}
	m.queued += n
	m.dispatchLocked(now)
	return ts, nil
}

// Acquire joins one operation and waits for its admission.
func (m *Model) Acquire(ctx context.Context) (*Ticket, error) {
	ts, err := m.Join(1)
	if err != nil {
		return nil, err
	}
	if err := ts[0].Wait(ctx); err != nil {
		return nil, err
	}
	return ts[0], nil
}

// Wait blocks until the operation is admitted (nil) or fails. If ctx ends
// first the operation leaves the queue unserved and Wait returns ctx.Err();
// an admission that raced with the cancellation is given back (worker and
// token). After Close it returns ErrClosed. Only an admitted ticket may be
// served and must then be released (Serve does both).
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.ready:
		return t.err
	case <-ctx.Done():
	}
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch t.state {
	case stateQueued:
		m.dequeueLocked(t, ctx.Err())
		// The head may have changed; admit whatever now can be.
		m.dispatchLocked(m.clock.Now())
	case stateAdmitted:
		m.unserveLocked(t)
		if m.lim.Rate > 0 {
			m.tokens = math.Min(m.burst, m.tokens+1)
		}
		t.state = stateFailed
		t.err = ctx.Err()
		m.dispatchLocked(m.clock.Now())
	}
	return t.err
}

// ErrPurged is the error of an operation taken out of the queue by Purge.
var ErrPurged = errors.New("capacity: purged")

// Purge takes a queued operation out of the queue unserved (its Wait
// returns ErrPurged) and reports whether it did; an operation already
// admitted, released or failed is left alone (stopping a running query is
// its caller's: it cancels the Serve's context).
func (t *Ticket) Purge() bool {
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.state != stateQueued {
		return false
	}
	m.dequeueLocked(t, ErrPurged)
	m.dispatchLocked(m.clock.Now())
	return true
}

func (m *Model) dequeueLocked(t *Ticket, err error) {
	m.queue[t.prio].Remove(t.elem)
	m.queued--
	t.state = stateFailed
	t.err = err
	close(t.ready)
}

// unserveLocked takes an admitted ticket out of service.
func (m *Model) unserveLocked(t *Ticket) {
	m.inService--
	last := len(m.serving) - 1
	m.serving[t.slot] = m.serving[last]
	m.serving[t.slot].slot = t.slot
	m.serving[last] = nil
	m.serving = m.serving[:last]
}

// TakeStall returns the stall time the operation owes since it was admitted
// or last asked (a whole-replica stall began while it was in service) and
// clears it: its holder serves that much longer. Serve does it itself.
func (t *Ticket) TakeStall() time.Duration {
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	d := t.ext
	t.ext = 0
	return d
}

// Priority is the operation's class.
func (t *Ticket) Priority() Priority { return t.prio }

// Queued returns how long the operation waited for admission (valid after
// Wait returned nil).
func (t *Ticket) Queued() time.Duration { return t.admitted.Sub(t.joined) }

// Delay returns the injected latency drawn at admission: ExtraLatencyMs plus
// HiccupMs when the operation hiccups.
func (t *Ticket) Delay() time.Duration { return t.delay }

// Hiccup reports whether the operation drew a hiccup.
func (t *Ticket) Hiccup() bool { return t.hiccup }

// Settled reports, without blocking, whether Wait would return at once, and
// then whether the operation was admitted. A caller that drives the model
// from its own event loop (the simulator, with a simulated Clock) polls it
// after every call into the model instead of blocking in Wait.
func (t *Ticket) Settled() (settled, admitted bool) {
	select {
	case <-t.ready:
		return true, t.err == nil
	default:
		return false, false
	}
}

// Serve runs work for an admitted operation, then holds the worker for the
// injected delay, then releases it. It returns the service time (work plus
// delay) and the first error of work or ctx (a cancelled caller stops
// waiting out the delay).
func (t *Ticket) Serve(ctx context.Context, work func(context.Context) error) (time.Duration, error) {
	if t.state != stateAdmitted {
		panic("capacity: Serve on a ticket that is not admitted")
	}
	m := t.m
	defer m.release(t)
	start := m.clock.Now()
	err := work(ctx)
	end := m.clock.Now().Add(t.delay) // when the service would end
	if err == nil && t.delay > 0 {
		err = m.sleep(ctx, t.delay)
	}
	for err == nil {
		ext := t.TakeStall()
		if ext == 0 {
			break
		}
		end = end.Add(ext)
		err = m.sleep(ctx, ext)
	}
	if err != nil && ctx.Err() != nil {
		// Stopped (purged, or its caller went away): stopping costs the
		// worker PurgeCostMs, at most what the query had left.
		if c := m.StopCost(end.Sub(m.clock.Now())); c > 0 {
			_ = m.sleep(context.Background(), c)
		}
	}
	return m.clock.Now().Sub(start), err
}

// PurgeDelay is how long a purge takes to reach the replica (PurgeDelayMs):
// its holder applies it that long after it is asked.
func (m *Model) PurgeDelay() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return msDuration(m.lim.PurgeDelayMs)
}

// StopCost is how much longer a running query that is stopped with
// remaining service still ahead holds its worker: PurgeCostMs, at most
// remaining (a query about to end costs no more than its end).
func (m *Model) StopCost(remaining time.Duration) time.Duration {
	m.mu.Lock()
	c := msDuration(m.lim.PurgeCostMs)
	m.mu.Unlock()
	return max(0, min(c, remaining))
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// Release gives back the worker of an admitted operation that was not passed
// to Serve. Releasing twice panics.
func (t *Ticket) Release() { t.m.release(t) }

func (m *Model) release(t *Ticket) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.state != stateAdmitted {
		panic("capacity: release of a ticket that is not in service")
	}
	t.state = stateDone
	m.unserveLocked(t)
	m.dispatchLocked(m.clock.Now())
}

// sleep waits d (or until ctx ends), asking the clock for d less its
// timers' learnt lateness so that the waits average d (lateness.go).
func (m *Model) sleep(ctx context.Context, d time.Duration) error {
	done := make(chan struct{})
	asked := m.late.ask(d)
	start := m.clock.Now()
	tm := m.clock.AfterFunc(asked, func() { close(done) })
	select {
	case <-done:
		m.late.observe(d, asked, m.clock.Now().Sub(start))
		return nil
	case <-ctx.Done():
		tm.Stop()
		return ctx.Err()
	}
}

// refillLocked brings the token count up to now at the current rate. The
// bucket holds at most burst tokens, except while a backlog has been waiting
// for tokens alone: then the tokens owed for the whole wait are credited (up
// to MaxCatchUp worth), so a refill timer that fires late, or a process
// that was descheduled, does not lower the served rate.
func (m *Model) refillLocked(now time.Time) {
	if el := now.Sub(m.refilled); el > 0 && m.lim.Rate > 0 {
		limit := m.burst
		if m.tokenBound {
			limit = math.Max(m.burst, m.lim.Rate*MaxCatchUp.Seconds())
		}
		m.tokens = math.Min(limit, m.tokens+m.lim.Rate*el.Seconds())
	}
	m.refilled = now
}

// tokenSlack absorbs float rounding in refills: a bucket this close to a
// whole token has earned it.
const tokenSlack = 1e-9

// dispatchLocked admits operations from the head of the queues (Normal
// first) while a worker and a token are available, and schedules a wake-up
// when only a token is missing or the replica is stalled. Releases,
// cancellations, joins and limit changes call it.
func (m *Model) dispatchLocked(now time.Time) {
	if m.lim.Rate > 0 {
		m.refillLocked(now)
	}
	for m.queued > 0 && m.inService < m.lim.Workers {
		if now.Before(m.stalled) {
			m.armTimerLocked(now, m.stalled.Sub(now))
			break
		}
		if m.lim.Rate > 0 {
			if m.tokens < 1-tokenSlack {
				m.tokenBound = true
				m.armTimerLocked(now, time.Duration(math.Ceil((1-m.tokens)/m.lim.Rate*1e9)))
				return
			}
			m.tokens = math.Max(0, m.tokens-1)
		}
		q := &m.queue[Normal]
		if q.Len() == 0 {
			q = &m.queue[Low]
		}
		t := q.Remove(q.Front()).(*Ticket)
		m.queued--
		t.state = stateAdmitted
		t.admitted = now
		t.delay = msDuration(m.lim.ExtraLatencyMs)
		g := t.given
		t.given = nil
		switch {
		case g != nil && g.CostGiven:
			t.delay += g.Cost
		case m.lim.CostMs > 0 && t.key != 0:
			t.delay += CostOf(m.lim.CostMs, t.key)
		case m.lim.CostMs > 0:
			t.delay += expMs(m.lim.CostMs, m.rng.Float64())
		}
		if g != nil && g.HiccupGiven {
			t.hiccup = g.Hiccup
		} else if m.lim.HiccupProb > 0 {
			t.hiccup = m.rng.Float64() < m.lim.HiccupProb
		}
		if t.hiccup {
			t.hiccup = true
			t.delay += msDuration(m.lim.HiccupMs)
		}
		m.inService++
		t.slot = len(m.serving)
		m.serving = append(m.serving, t)
		if m.lim.StallProb > 0 && m.rng.Float64() < m.lim.StallProb {
			m.stallLocked(now)
		}
		close(t.ready)
	}
	// The queue is empty or the workers are all busy: tokens are not what
	// holds work back, so the bucket's ordinary depth applies again.
	m.tokenBound = false
	m.tokens = math.Min(m.tokens, m.burst)
}

func (m *Model) armTimerLocked(now time.Time, d time.Duration) {
	if d < time.Microsecond {
		d = time.Microsecond
	}
	at := now.Add(d)
	if m.timer != nil && !m.timerAt.After(at) {
		return // an earlier or equal wake-up is pending; it re-dispatches
	}
	m.stopTimerLocked()
	m.timerGen++
	gen := m.timerGen
	m.timerAt = at
	m.timer = m.clock.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if gen == m.timerGen {
			m.timer = nil
		}
		if !m.closed {
			m.dispatchLocked(m.clock.Now())
		}
	})
}

func (m *Model) stopTimerLocked() {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.timerGen++
}

// stallLocked stalls the whole replica for StallMs from now: no admission
// before its end, and every operation in service owes that much more time
// (TakeStall). A stall within a stall extends it to the later end, and the
// operations in service by the overlap only.
func (m *Model) stallLocked(now time.Time) {
	m.stalls++
	d := msDuration(m.lim.StallMs)
	end := now.Add(d)
	if !end.After(m.stalled) {
		return
	}
	add := d
	if m.stalled.After(now) {
		add = end.Sub(m.stalled)
	}
	m.stalled = end
	for _, t := range m.serving {
		t.ext += add
	}
}

// CostOf is the inherent cost of the query with key under a mean cost of
// meanMs: exponential, drawn from a hash of key alone, so every replica and
// every copy of the query agree.
func CostOf(meanMs float64, key uint64) time.Duration {
	return expMs(meanMs, float64(hashing.Mix64(key)>>11)/(1<<53))
}

// expMs is the exponential draw of mean meanMs for a uniform u in [0, 1).
func expMs(meanMs float64, u float64) time.Duration {
	return time.Duration(-meanMs * math.Log1p(-u) * float64(time.Millisecond))
}
