package dispatch

import (
	"math/rand/v2"
	"time"
)

// HedgeParams are the parameters of hedge.
type HedgeParams struct {
	BudgetParams
	// Cancel: cancel the other copy when one answers.
	Cancel bool `json:"cancel" doc:"cancel the losing copy when one answers"`
}

func init() {
	Register("hedge", Factory{
		Summary: "naive hedging: every batch to two replicas at once, the loser cancelled (under the budget)",
		Params:  func() any { return &HedgeParams{BudgetParams: budgetOf(1), Cancel: true} },
		New: func(params any, m *Machine, env Env) (Policy, error) {
			pp := params.(*HedgeParams)
			if err := pp.apply(m); err != nil {
				return nil, err
			}
			return &hedge{m: m, rng: rng(env), cancel: pp.Cancel}, nil
		},
	})
}

// hedge sends every batch to two random usable replicas at once (LÆDGE
// §2.3, naive hedge); the first answer wins and, with cancel, the other
// copy is cancelled. The second copy is a duplicate: with a budget below 1
// some batches get one copy only.
type hedge struct {
	m      *Machine
	rng    *rand.Rand
	cancel bool
}

func (p *hedge) pick(b *Batch) int { return p.m.PickRandom(p.rng, b) }

func (p *hedge) Arrive(now time.Duration, b *Batch) {
	p.m.Send(now, b, p.pick(nil), Normal, false)
	if r := p.pick(b); r >= 0 && p.m.TryExtra(now) {
		p.m.Send(now, b, r, Normal, true)
	}
}

func (p *hedge) Done(now time.Duration, b *Batch, c int, st Status) {
	if p.m.Settle(now, b, c, st, p.pick) && p.cancel {
		p.m.CancelOthers(b, c)
	}
}

func (p *hedge) Timer(time.Duration, *Batch)       {}
func (p *hedge) Rotation(time.Duration, int, bool) {}
