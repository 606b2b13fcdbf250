package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Scripted event sequences: each step's actions, written as
// "send b0 c1 r1 low extra", "cancel b0 c0", "complete b0 c1",
// "fail b0 c0", "after b0 5ms".

func show(acts []Action) string {
	var out []string
	for _, a := range acts {
		b := a.Batch
		switch a.Kind {
		case Send:
			cp := b.Copies[a.Copy]
			s := fmt.Sprintf("send b%d c%d r%d %s", b.ID, a.Copy, cp.Replica, cp.Priority)
			if cp.Extra {
				s += " extra"
			}
			out = append(out, s)
		case After:
			out = append(out, fmt.Sprintf("after b%d %v", b.ID, a.At))
		default:
			out = append(out, fmt.Sprintf("%s b%d c%d", a.Kind, b.ID, a.Copy))
		}
	}
	return strings.Join(out, "; ")
}

type script struct {
	t *testing.T
	m *Machine
}

func newScript(t *testing.T, name string, params any, replicas int) *script {
	t.Helper()
	m, err := New(name, params, Env{Replicas: replicas, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &script{t: t, m: m}
}

func (s *script) expect(step string, acts []Action, want string) {
	s.t.Helper()
	if got := show(acts); got != want {
		s.t.Fatalf("%s:\n got  %q\n want %q", step, got, want)
	}
}

const ms = time.Millisecond

// replicaOf is the replica copy c of b went to.
func replicaOf(b *Batch, c int) int { return b.Copies[c].Replica }

func TestHedgeSendsTwoAndCancelsTheLoserEvenWhenItAnswersTooLate(t *testing.T) {
	s := newScript(t, "hedge", nil, 2)
	b := NewBatch(0, 0)
	acts := s.m.Arrive(0, b)
	r0, r1 := replicaOf(b, 0), replicaOf(b, 1)
	s.expect("arrive", acts, fmt.Sprintf("send b0 c0 r%d normal; send b0 c1 r%d normal extra", r0, r1))
	s.expect("c1 answers", s.m.Done(2*ms, b, 1, OK), "complete b0 c1; cancel b0 c0")
	// The race: c0's answer arrives before its cancellation took effect.
	s.expect("c0 answers anyway", s.m.Done(3*ms, b, 0, OK), "")
	if !b.Finished() || s.m.WonLater != 1 || s.m.Cancelled != 1 {
		t.Fatalf("finished %v, counters %+v", b.Finished(), s.m.Counters)
	}
}

func TestHedgeWithoutBudgetSendsOneCopy(t *testing.T) {
	p := &HedgeParams{BudgetParams: budgetOf(0), Cancel: true}
	s := newScript(t, "hedge", p, 2)
	b := NewBatch(0, 0)
	s.expect("arrive", s.m.Arrive(0, b), fmt.Sprintf("send b0 c0 r%d normal", replicaOf(b, 0)))
	if s.m.Denied != 1 {
		t.Fatalf("denied %d", s.m.Denied)
	}
}

func TestDHedgeCoversAReplicaThatNeverAnswers(t *testing.T) {
	p := &DHedgeParams{BudgetParams: budgetOf(1), Delay: 5e6, Samples: 100, Cancel: true}
	s := newScript(t, "d-hedge", p, 2)
	b := NewBatch(7, 0)
	acts := s.m.Arrive(0, b)
	hung := replicaOf(b, 0)
	s.expect("arrive", acts, fmt.Sprintf("send b7 c0 r%d normal; after b7 5ms", hung))
	s.expect("delay passes", s.m.Timer(5*ms, b), fmt.Sprintf("send b7 c1 r%d normal extra", 1-hung))
	s.expect("the hedge answers", s.m.Done(6*ms, b, 1, OK), "complete b7 c1; cancel b7 c0")
	if b.Finished() {
		t.Fatal("finished while the hung copy is not Done")
	}
	s.expect("the hung copy is cancelled", s.m.Done(7*ms, b, 0, Cancelled), "")
	if !b.Finished() || s.m.InFlight(hung) != 0 {
		t.Fatalf("finished %v, in flight %d", b.Finished(), s.m.InFlight(hung))
	}
}

func TestDHedgeDoesNotHedgeToAReplicaThatLeftRotation(t *testing.T) {
	p := &DHedgeParams{BudgetParams: budgetOf(1), Delay: 5e6, Samples: 100, Cancel: true}
	s := newScript(t, "d-hedge", p, 2)
	b := NewBatch(0, 0)
	s.m.Arrive(0, b)
	other := 1 - replicaOf(b, 0)
	s.expect("leaves", s.m.Rotation(1*ms, other, false), "")
	s.expect("delay passes", s.m.Timer(5*ms, b), "")
	s.expect("answers", s.m.Done(9*ms, b, 0, OK), "complete b0 c0")
	// Back in rotation, it is used again.
	s.m.Rotation(10*ms, other, true)
	b2 := NewBatch(1, 10*ms)
	s.m.Arrive(10*ms, b2)
	s.expect("delay passes again", s.m.Timer(15*ms, b2), fmt.Sprintf("send b1 c1 r%d normal extra", 1-replicaOf(b2, 0)))
}

func TestDHedgeDelayFollowsThePercentileOfRecentLatencies(t *testing.T) {
	p := &DHedgeParams{BudgetParams: budgetOf(1), Delay: 5e6, Percentile: 90, Samples: 100, Cancel: true}
	s := newScript(t, "d-hedge", p, 2)
	now := time.Duration(0)
	for i := range 200 {
		b := NewBatch(uint64(i), now)
		s.m.Arrive(now, b)
		s.m.Done(now+time.Duration(1+i%10)*ms, b, 0, OK) // 1..10 ms
		now += 20 * ms
	}
	b := NewBatch(999, now)
	s.expect("arrive", s.m.Arrive(now, b), fmt.Sprintf("send b999 c0 r%d normal; after b999 %v", replicaOf(b, 0), now+9*ms))
}

func TestRandomRetriesARetryableFailureOnceOnAnotherReplica(t *testing.T) {
	s := newScript(t, "random", nil, 3)
	b := NewBatch(0, 0)
	s.m.Arrive(0, b)
	first := replicaOf(b, 0)
	acts := s.m.Done(ms, b, 0, Retryable)
	if len(acts) != 1 || acts[0].Kind != Send || replicaOf(b, 1) == first {
		t.Fatalf("retry: %s", show(acts))
	}
	s.expect("the retry fails too", s.m.Done(2*ms, b, 1, Retryable), "fail b0 c1")
	b2 := NewBatch(1, 0)
	s.m.Arrive(0, b2)
	s.expect("a bad request is not retried", s.m.Done(ms, b2, 0, Failed), "fail b1 c0")
}

func TestPSQQueuesInTheAppServerAndSkipsAbandonedBatches(t *testing.T) {
	s := newScript(t, "psq", nil, 2)
	bs := []*Batch{NewBatch(0, 0), NewBatch(1, 0), NewBatch(2, 0), NewBatch(3, 0)}
	s.m.Arrive(0, bs[0])
	s.m.Arrive(0, bs[1])
	s.expect("no replica free", s.m.Arrive(0, bs[2]), "")
	s.expect("no replica free", s.m.Arrive(0, bs[3]), "")
	if replicaOf(bs[0], 0) == replicaOf(bs[1], 0) {
		t.Fatal("both on one replica")
	}
	s.expect("b2's caller gives up", s.m.Abandon(ms, bs[2]), "")
	r := replicaOf(bs[0], 0)
	s.expect("a replica frees", s.m.Done(2*ms, bs[0], 0, OK), fmt.Sprintf("complete b0 c0; send b3 c0 r%d normal", r))
}

func TestLaedgeHedgesOnlyOnIdleReplicasAndQueuesFirst(t *testing.T) {
	for _, cc := range []bool{false, true} {
		name := map[bool]string{false: "laedge", true: "laedge-cc"}[cc]
		t.Run(name, func(t *testing.T) {
			s := newScript(t, name, nil, 2)
			b0, b1 := NewBatch(0, 0), NewBatch(1, 0)
			acts := s.m.Arrive(0, b0)
			ra, rb := replicaOf(b0, 0), replicaOf(b0, 1)
			s.expect("two idle replicas: hedged at once", acts, fmt.Sprintf("send b0 c0 r%d normal; send b0 c1 r%d low extra", ra, rb))
			s.expect("none idle: queued", s.m.Arrive(ms, b1), "")
			want := fmt.Sprintf("complete b0 c0; send b1 c0 r%d normal", ra)
			if cc {
				want = fmt.Sprintf("complete b0 c0; cancel b0 c1; send b1 c0 r%d normal", ra)
			}
			s.expect("ra frees: the queue first", s.m.Done(2*ms, b0, 0, OK), want)
			// rb frees (its copy of b0 ends): no batch waits, so it hedges b1.
			st := OK
			if cc {
				st = Cancelled
			}
			s.expect("rb frees: delayed hedge", s.m.Done(3*ms, b0, 1, st), fmt.Sprintf("send b1 c1 r%d low extra", rb))
		})
	}
}

func TestDASDuplicatesAtLowPriorityAndPurgesTheOther(t *testing.T) {
	s := newScript(t, "das", nil, 2)
	b := NewBatch(0, 0)
	acts := s.m.Arrive(0, b)
	s.expect("arrive", acts, fmt.Sprintf("send b0 c0 r%d normal; send b0 c1 r%d low extra", replicaOf(b, 0), replicaOf(b, 1)))
	s.expect("the duplicate answers first", s.m.Done(ms, b, 1, OK), "complete b0 c1; cancel b0 c0")
	s.expect("the purged primary", s.m.Done(2*ms, b, 0, Cancelled), "")
	if !b.Finished() {
		t.Fatal("not finished")
	}
}

func TestSingleRStartsReissuingAtZeroWithProbabilityB(t *testing.T) {
	s := newScript(t, "singler", nil, 2)
	timers := 0
	for i := range 10_000 {
		b := NewBatch(uint64(i), 0)
		for _, a := range s.m.Arrive(0, b) {
			if a.Kind == After {
				timers++
				if a.At != 0 {
					t.Fatalf("first reissue delay %v", a.At)
				}
			}
		}
	}
	if timers < 900 || timers > 1100 {
		t.Fatalf("%d of 10000 batches set for reissue; want about 10%%", timers)
	}
}

// preempted runs laedge-cc with pre-emptive cancellation on two replicas up
// to a pre-emption: batch a on ra with its duplicate on rh, batch b arrives,
// a's duplicate is cancelled and b takes rh.
func preempted(t *testing.T) (s *script, a, b *Batch, ra, rh int) {
	t.Helper()
	p := &LaedgeParams{BudgetParams: budgetOf(1), Preempt: true}
	s = newScript(t, "laedge-cc", p, 2)
	a = NewBatch(0, 0)
	acts := s.m.Arrive(0, a)
	ra, rh = replicaOf(a, 0), replicaOf(a, 1)
	s.expect("a on both idle replicas", acts, fmt.Sprintf("send b0 c0 r%d normal; send b0 c1 r%d low extra", ra, rh))
	b = NewBatch(1, ms)
	s.expect("b must wait: a's later copy is cancelled", s.m.Arrive(ms, b), "cancel b0 c1")
	s.expect("the cancel done: b takes the replica", s.m.Done(2*ms, a, 1, Cancelled), fmt.Sprintf("send b1 c0 r%d normal", rh))
	return s, a, b, ra, rh
}

// LÆDGE's pre-emptive cancellation: a batch that must wait cancels the
// most recently started copy of a hedged batch and takes its replica; the
// unhedged batch's copy is never pre-empted.
func TestLaedgePreemptiveCancellation(t *testing.T) {
	s, a, _, ra, _ := preempted(t)
	c := NewBatch(2, 3*ms)
	s.expect("c waits: nothing is hedged", s.m.Arrive(3*ms, c), "")
	s.expect("a answers: c takes its replica", s.m.Done(4*ms, a, 0, OK), fmt.Sprintf("complete b0 c0; send b2 c0 r%d normal", ra))
	// Without preempt, the same arrival only waits.
	s2 := newScript(t, "laedge-cc", nil, 2)
	a2 := NewBatch(0, 0)
	s2.m.Arrive(0, a2)
	s2.expect("no pre-emption by default", s2.m.Arrive(ms, NewBatch(1, ms)), "")
}

// A batch whose duplicate was pre-empted is single-copy again and is hedged
// again when a replica frees (LÆDGE Fig. 3, S2→S4, as the idealized hedge
// does): pre-emption cancels a copy, not the batch's right to a hedge.
func TestLaedgeHedgesAgainAfterPreemption(t *testing.T) {
	s, _, b, _, rh := preempted(t)
	s.expect("b answers while a still runs: a is hedged again on the freed replica", s.m.Done(3*ms, b, 0, OK),
		fmt.Sprintf("complete b1 c0; send b0 c2 r%d low extra", rh))
}

// A batch hedged again after a pre-emption is pre-empted again by the next
// batch that must wait (Fig. 3: S4→S2, every time): the closed copy that
// was cancelled first does not count as one "being cancelled". With
// preempt_max 1 the second hedge is kept and the batch waits.
func TestLaedgePreemptsAgainAfterHedgingAgain(t *testing.T) {
	for _, max := range []int{0, 1} {
		p := &LaedgeParams{BudgetParams: budgetOf(1), Preempt: true, PreemptMax: max}
		s := newScript(t, "laedge-cc", p, 2)
		a := NewBatch(0, 0)
		acts := s.m.Arrive(0, a)
		ra, rh := replicaOf(a, 0), replicaOf(a, 1)
		s.expect("a on both idle replicas", acts, fmt.Sprintf("send b0 c0 r%d normal; send b0 c1 r%d low extra", ra, rh))
		b := NewBatch(1, ms)
		s.expect("b pre-empts a's later copy", s.m.Arrive(ms, b), "cancel b0 c1")
		s.expect("b takes the replica", s.m.Done(ms, a, 1, Cancelled), fmt.Sprintf("send b1 c0 r%d normal", rh))
		s.expect("b answers: a is hedged again", s.m.Done(2*ms, b, 0, OK), fmt.Sprintf("complete b1 c0; send b0 c2 r%d low extra", rh))
		c := NewBatch(2, 3*ms)
		if max == 0 {
			s.expect("c pre-empts a's new hedge", s.m.Arrive(3*ms, c), "cancel b0 c2")
		} else {
			s.expect("c waits: a was pre-empted once already", s.m.Arrive(3*ms, c), "")
		}
	}
}
