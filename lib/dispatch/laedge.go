package dispatch

import (
	"math/rand/v2"
	"time"
)

func init() {
	for _, v := range []struct {
		name, summary string
		cc            bool
	}{
		{"laedge", "work-conserving hedging (LÆDGE): batches wait in the app server for an idle replica; a replica left idle hedges the oldest running batch, non-hedged work first", false},
		{"laedge-cc", "laedge with cleanup cancellation: when a copy answers, the other is cancelled", true},
	} {
		cc := v.cc
		Register(v.name, Factory{
			Summary: v.summary,
			Params:  func() any { return &LaedgeParams{BudgetParams: budgetOf(1)} },
			New: func(params any, m *Machine, env Env) (Policy, error) {
				lp := params.(*LaedgeParams)
				if err := lp.apply(m); err != nil {
					return nil, err
				}
				return &laedge{m: m, rng: rng(env), cc: cc, preempt: lp.Preempt, preemptMax: lp.PreemptMax}, nil
			},
		})
	}
}

// LaedgeParams are the parameters of laedge and laedge-cc.
type LaedgeParams struct {
	BudgetParams
	Preempt bool `json:"preempt" doc:"pre-emptive cancellation (LÆDGE §4's PC): a batch that must wait cancels the most recently started copy of a running batch that has two, so that replica serves it"`
	// PreemptMax bounds the pre-emptions per batch; 0 is the paper's PC,
	// which pre-empts a batch's hedge as often as one waits.
	PreemptMax int `json:"preempt_max" range:"[0,100]" doc:"with preempt, a batch's copies are pre-empted at most this many times (0: no limit, the paper's PC); a batch pre-empted that often keeps its later hedges"`
}

// laedge is LÆDGE (Primorac et al., "When to Hedge in Interactive
// Services", §4, Algorithm 1) for one backend's replicas: a batch goes to
// two idle replicas when two are idle (the second copy a duplicate), to the
// idle one when one is, and otherwise waits in the app server's queue; a
// replica that becomes idle takes the oldest waiting batch or, when none
// waits, a copy of the oldest running batch that has one copy only. So a
// replica starts a duplicate only when no batch waits for it. Duplicates go
// at low priority, so that at a backend shared with other app servers they
// also yield to unduplicated work. laedge-cc adds cleanup cancellation: the
// other copy is cancelled when one answers. "Idle" is as far as this app
// server knows (docs/dispatch.md).
type laedge struct {
	m       *Machine
	rng     *rand.Rand
	cc      bool
	preempt bool
	// preemptMax: pre-emptions per batch at most (0: no limit); the count
	// is the batch's Tag.
	preemptMax int
	queue      fifo
	running    []*Batch // sent and unanswered, oldest first (answered ones dropped lazily)
}

func (p *laedge) Arrive(now time.Duration, b *Batch) {
	if p.queue.Len() > 0 {
		p.queue.Push(b)
		p.preemptOne()
		return
	}
	r := p.m.PickIdle(p.rng, nil)
	if r < 0 {
		p.queue.Push(b)
		p.preemptOne()
		return
	}
	p.start(now, b, r)
	if s := p.m.PickIdle(p.rng, b); s >= 0 && p.m.TryExtra(now) {
		p.m.Send(now, b, s, Low, true)
	}
}

func (p *laedge) start(now time.Duration, b *Batch, r int) {
	p.m.Send(now, b, r, Normal, false)
	p.running = append(p.running, b)
}

func (p *laedge) Done(now time.Duration, b *Batch, c int, st Status) {
	if p.m.Settle(now, b, c, st, func(b *Batch) int { return p.m.PickLeast(p.rng, b, 0) }) && p.cc {
		p.m.CancelOthers(b, c)
	}
	p.fill(now, b.Copies[c].Replica)
}

// fill gives replica r work if it is idle: the oldest waiting batch, or a
// duplicate of the oldest running batch that has one copy running
// (Algorithm 1, lines 16–21). A batch whose duplicate was pre-empted is such
// a batch again (Fig. 3, S2→S4): pre-emption cancels a copy, not the
// batch's right to a hedge.
func (p *laedge) fill(now time.Duration, r int) {
	if !p.m.Usable(r) || p.m.InFlight(r) > 0 {
		return
	}
	if b := p.queue.Next(); b != nil {
		p.start(now, b, r)
		return
	}
	p.compact()
	for _, b := range p.running {
		if b.Answered || !singleCopy(b) || b.On(r) {
			continue
		}
		if p.m.TryExtra(now) {
			p.m.Send(now, b, r, Low, true)
		}
		return
	}
}

// singleCopy reports whether exactly one copy of b is running and none is
// being cancelled.
func singleCopy(b *Batch) bool {
	open := 0
	for i := range b.Copies {
		if c := &b.Copies[i]; c.Open {
			if c.Cancelling {
				return false
			}
			open++
		}
	}
	return open == 1
}

// preemptOne is the pre-emptive cancellation: the most recently started
// copy of a running batch with two open copies (none of them being
// cancelled) is cancelled; its replica takes the waiting batch when the
// cancel is done. A copy cancelled earlier and already closed does not
// protect the batch: a batch is pre-empted as often as it is hedged again
// (Fig. 3: S1→S2, then S4→S2 each time), unless preemptMax bounds it.
func (p *laedge) preemptOne() {
	if !p.preempt {
		return
	}
	p.compact()
	for _, b := range p.running {
		if p.preemptMax > 0 && b.Tag >= p.preemptMax {
			continue
		}
		open, last := 0, -1
		for i := range b.Copies {
			c := &b.Copies[i]
			if !c.Open {
				continue
			}
			if c.Cancelling {
				open = -10
			}
			open++
			if last < 0 || c.Sent >= b.Copies[last].Sent {
				last = i
			}
		}
		if open >= 2 {
			b.Tag++
			p.m.Cancel(b, last)
			return
		}
	}
}

// compact drops answered batches from running.
func (p *laedge) compact() {
	k := 0
	for _, b := range p.running {
		if !b.Answered {
			p.running[k] = b
			k++
		}
	}
	clear(p.running[k:])
	p.running = p.running[:k]
}

func (p *laedge) Timer(time.Duration, *Batch) {}

func (p *laedge) Rotation(now time.Duration, r int, in bool) {
	if in {
		p.fill(now, r)
	}
}
