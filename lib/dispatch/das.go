package dispatch

import (
	"math/rand/v2"
	"time"
)

func init() {
	Register("das", Factory{
		Summary: "duplicate-aware scheduling: every batch also to a second replica at low priority, the other copy purged when one answers (under the budget)",
		Params:  func() any { b := budgetOf(1); return &b },
		New: func(params any, m *Machine, env Env) (Policy, error) {
			if err := params.(*BudgetParams).apply(m); err != nil {
				return nil, err
			}
			return &das{m: m, rng: rng(env)}, nil
		},
	})
}

// das is DAS (Bashir et al., "Reducing Tail Latency using Duplication: A
// Multi-Layered Approach", §3): the primary copy at normal priority to a
// random replica, a duplicate at low priority to another, so that a
// duplicate only uses capacity no primary wants; when one copy answers the
// other is purged (from the queue, or stopped where the backend can).
type das struct {
	m   *Machine
	rng *rand.Rand
}

func (p *das) pick(b *Batch) int { return p.m.PickRandom(p.rng, b) }

func (p *das) Arrive(now time.Duration, b *Batch) {
	p.m.Send(now, b, p.pick(nil), Normal, false)
	if r := p.pick(b); r >= 0 && p.m.TryExtra(now) {
		p.m.Send(now, b, r, Low, true)
	}
}

func (p *das) Done(now time.Duration, b *Batch, c int, st Status) {
	if p.m.Settle(now, b, c, st, p.pick) {
		p.m.CancelOthers(b, c)
	}
}

func (p *das) Timer(time.Duration, *Batch)       {}
func (p *das) Rotation(time.Duration, int, bool) {}
