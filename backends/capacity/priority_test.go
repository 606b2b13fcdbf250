package capacity

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func mustJoinOps(t *testing.T, m *Model, ops ...Op) []*Ticket {
	t.Helper()
	ts, err := m.JoinOps(ops)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// A Low operation is admitted only when no Normal one waits, whatever the
// order they joined in; within a class the order is FIFO.
func TestLowPriorityOnlyWhenNoNormalWaits(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1}, newFakeClock())
	busy := mustJoin(t, m, 1)[0]
	low := mustJoinOps(t, m, Op{Priority: Low}, Op{Priority: Low})
	normal := mustJoinOps(t, m, Op{}, Op{})
	if s := m.Stats(); s.QueueLength != 4 || s.LowQueued != 2 {
		t.Fatalf("stats %+v, want 4 queued, 2 of them low", s)
	}
	order := []*Ticket{busy, normal[0], normal[1], low[0], low[1]}
	for i, tk := range order {
		if !admitted(tk) {
			t.Fatalf("step %d: not admitted", i)
		}
		for _, other := range order[i+1:] {
			if admitted(other) {
				t.Fatalf("step %d: a later ticket was admitted too early", i)
			}
		}
		tk.Release()
	}
	wantStats(t, m, 0, 0)
}

// Property: under random joins (either class) and releases, the admitted
// operation is always the oldest Normal one waiting, else the oldest Low.
func TestPriorityAdmissionOrderProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 200; trial++ {
		workers := 1 + rng.IntN(3)
		m := mustNew(t, Limits{Workers: workers}, newFakeClock())
		var waiting [2][]*Ticket
		var serving []*Ticket
		for step := 0; step < 60; step++ {
			if rng.IntN(2) == 0 || len(serving) == 0 {
				p := Priority(rng.IntN(2))
				tk := mustJoinOps(t, m, Op{Priority: p})[0]
				waiting[p] = append(waiting[p], tk)
			} else {
				i := rng.IntN(len(serving))
				serving[i].Release()
				serving = append(serving[:i], serving[i+1:]...)
			}
			// Expected: admissions in class order until the workers are full.
			for len(serving) < workers {
				var next *Ticket
				switch {
				case len(waiting[Normal]) > 0:
					next, waiting[Normal] = waiting[Normal][0], waiting[Normal][1:]
				case len(waiting[Low]) > 0:
					next, waiting[Low] = waiting[Low][0], waiting[Low][1:]
				}
				if next == nil {
					break
				}
				serving = append(serving, next)
			}
			for _, tk := range serving {
				if !admitted(tk) {
					t.Fatalf("trial %d step %d: a ticket due for admission waits", trial, step)
				}
			}
			for p := range waiting {
				for _, tk := range waiting[p] {
					if admitted(tk) {
						t.Fatalf("trial %d step %d: a %d ticket jumped the order", trial, step, p)
					}
				}
			}
		}
	}
}

func TestPurgeQueuedNotAdmitted(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1}, newFakeClock())
	ts := mustJoin(t, m, 3)
	if ts[0].Purge() {
		t.Fatal("an admitted operation was purged")
	}
	if !ts[1].Purge() || ts[1].Purge() {
		t.Fatal("a queued operation: Purge should succeed once")
	}
	if err := ts[1].Wait(context.Background()); !errors.Is(err, ErrPurged) {
		t.Fatalf("Wait of a purged operation = %v, want ErrPurged", err)
	}
	wantStats(t, m, 1, 1)
	ts[0].Release()
	if !admitted(ts[2]) {
		t.Fatal("the operation behind the purged one was not admitted")
	}
	// Purging the head while a worker is free admits the next at once.
	m2 := mustNew(t, Limits{Workers: 1}, newFakeClock())
	a := mustJoin(t, m2, 3)
	a[1].Purge()
	a[0].Release()
	if !admitted(a[2]) {
		t.Fatal("not admitted after the purge and the release")
	}
}

// The inherent cost is a function of the key: two replicas agree on every
// query, and over many keys it is exponential with the configured mean.
func TestCostIsSharedByKeyAndExponential(t *testing.T) {
	l := Limits{Workers: 1_000_000, CostMs: 2}
	a := mustNew(t, l, newFakeClock())
	b, err := New(l, 99, newFakeClock()) // another replica, another seed
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	var sum, over float64
	for k := uint64(1); k <= n; k++ {
		ta := mustJoinOps(t, a, Op{Key: k})[0]
		tb := mustJoinOps(t, b, Op{Key: k, Priority: Low})[0]
		if ta.Delay() != tb.Delay() || ta.Delay() != CostOf(2, k) {
			t.Fatalf("key %d: costs %v and %v differ", k, ta.Delay(), tb.Delay())
		}
		ms := float64(ta.Delay()) / float64(time.Millisecond)
		sum += ms
		if ms > 2*math.Log(100) { // P(X > mean·ln 100) = 1%
			over++
		}
	}
	if mean := sum / n; math.Abs(mean-2) > 0.06 {
		t.Fatalf("mean cost %.3f ms, want 2", mean)
	}
	if frac := over / n; frac < 0.007 || frac > 0.013 {
		t.Fatalf("tail fraction %.4f, want about 0.01", frac)
	}
	// Without a key the cost is drawn per execution: copies differ.
	c := mustNew(t, l, newFakeClock())
	x, y := mustJoin(t, c, 1)[0], mustJoin(t, c, 1)[0]
	if x.Delay() == y.Delay() {
		t.Fatal("unkeyed operations drew the same cost")
	}
}

// A stall stops admissions for StallMs and makes every operation in
// service owe StallMs more; Serve waits it out.
func TestWholeReplicaStall(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 2, ExtraLatencyMs: 10}, clk)
	first := mustJoin(t, m, 1)[0]
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldStallProb: 1.0, FieldStallMs: 50.0})); err != nil {
		t.Fatal(err)
	}
	second := mustJoin(t, m, 1)[0] // its admission stalls the replica
	if !admitted(second) || m.Stats().Stalls != 1 {
		t.Fatalf("second admitted=%v stalls=%d", admitted(second), m.Stats().Stalls)
	}
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldStallProb: 0.0})); err != nil {
		t.Fatal(err)
	}
	first.Release() // a worker is free, but the replica is stalled
	third := mustJoin(t, m, 1)[0]
	if admitted(third) {
		t.Fatal("admitted during a stall")
	}
	if d := second.TakeStall(); d != 50*time.Millisecond {
		t.Fatalf("second owes %v, want 50ms", d)
	}
	if second.TakeStall() != 0 {
		t.Fatal("a stall was owed twice")
	}
	clk.Advance(49 * time.Millisecond)
	if admitted(third) {
		t.Fatal("admitted before the stall ended")
	}
	clk.Advance(time.Millisecond)
	if !admitted(third) {
		t.Fatal("not admitted when the stall ended")
	}
	if third.TakeStall() != 0 {
		t.Fatal("an operation admitted after the stall owes stall time")
	}
}

func TestServeWaitsOutAStall(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 2, ExtraLatencyMs: 10}, clk)
	tk := mustJoin(t, m, 1)[0]
	res := make(chan time.Duration)
	go func() {
		d, _ := tk.Serve(context.Background(), func(context.Context) error { return nil })
		res <- d
	}()
	for clk.pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	m.Update(NewPatch(map[string]float64{FieldStallProb: 1.0, FieldStallMs: 30.0}))
	mustJoin(t, m, 1) // stalls the replica while tk is in service
	clk.Advance(10 * time.Millisecond)
	for clk.pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(30 * time.Millisecond)
	if d := <-res; d != 40*time.Millisecond {
		t.Fatalf("served in %v, want 40ms (10 + a 30ms stall)", d)
	}
}

func ptr[T any](v T) *T { return &v }

// Given draws replace the model's: cost and hiccup as the caller says, and
// the model's generator is not consumed (the next keyless draw is the same).
func TestGivenDraws(t *testing.T) {
	l := Limits{Workers: 10, CostMs: 5, HiccupProb: 0.5, HiccupMs: 100}
	a := mustNew(t, l, newFakeClock())
	b := mustNew(t, l, newFakeClock())
	g := mustJoinOps(t, a, Op{CostGiven: true, Cost: 3 * time.Millisecond, HiccupGiven: true},
		Op{CostGiven: true, Cost: time.Millisecond, HiccupGiven: true, Hiccup: true})
	if g[0].Delay() != 3*time.Millisecond || g[0].Hiccup() || g[1].Delay() != 101*time.Millisecond || !g[1].Hiccup() {
		t.Fatalf("given draws: %v %v, %v %v", g[0].Delay(), g[0].Hiccup(), g[1].Delay(), g[1].Hiccup())
	}
	if x, y := mustJoin(t, a, 1)[0], mustJoin(t, b, 1)[0]; x.Delay() != y.Delay() || x.Hiccup() != y.Hiccup() {
		t.Fatal("given draws consumed the model's generator")
	}
}
