package dispatch

import (
	"math/rand/v2"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// DHedgeParams are the parameters of d-hedge.
type DHedgeParams struct {
	BudgetParams
	Delay      config.Duration `json:"delay" range:"[0s,1m]" doc:"the second copy goes after this delay (and while percentile has too few samples)"`
	Percentile float64         `json:"percentile" range:"[0,100)" doc:"when above 0, the delay is this percentile of the recent batch latencies"`
	Samples    int             `json:"samples" range:"[10,1000000]" doc:"recent batch latencies the percentile is taken over"`
	Cancel     bool            `json:"cancel" doc:"cancel the losing copy when one answers"`
}

func init() {
	Register("d-hedge", Factory{
		Summary: "delayed hedging: a second copy to another replica when the first has not answered after a delay (fixed or a percentile of recent latencies), under the budget",
		Params: func() any {
			return &DHedgeParams{BudgetParams: budgetOf(0.1), Delay: config.Duration(10 * time.Millisecond),
				Percentile: 95, Samples: 1000, Cancel: true}
		},
		New: func(params any, m *Machine, env Env) (Policy, error) {
			pp := params.(*DHedgeParams)
			if err := pp.apply(m); err != nil {
				return nil, err
			}
			p := &dhedge{m: m, rng: rng(env), fixed: pp.Delay.D(), q: pp.Percentile / 100, cancel: pp.Cancel}
			if p.q > 0 {
				p.lat = newLatencies(pp.Samples)
			}
			return p, nil
		},
	})
}

// dhedge is Dean and Barroso's delayed hedge (LÆDGE §2.3, d-Hedge): one
// copy to a random replica; if no answer came after the delay, a second to
// another; the first answer wins. The delay is fixed, or the percentile of
// the batch latencies recently answered (as Finagle's backup requests).
type dhedge struct {
	m      *Machine
	rng    *rand.Rand
	fixed  time.Duration
	q      float64
	lat    *latencies
	cancel bool
}

func (p *dhedge) pick(b *Batch) int { return p.m.PickRandom(p.rng, b) }

// delay is the current hedging delay.
func (p *dhedge) delay() time.Duration {
	if p.lat == nil || p.lat.count() < 10 {
		return p.fixed
	}
	return p.lat.quantile(p.q)
}

func (p *dhedge) Arrive(now time.Duration, b *Batch) {
	p.m.Send(now, b, p.pick(nil), Normal, false)
	p.m.After(b, now+p.delay())
}

func (p *dhedge) Done(now time.Duration, b *Batch, c int, st Status) {
	if !p.m.Settle(now, b, c, st, p.pick) {
		return
	}
	if p.lat != nil && st == OK {
		p.lat.add(now - b.Copies[0].Sent)
	}
	if p.cancel {
		p.m.CancelOthers(b, c)
	}
}

func (p *dhedge) Timer(now time.Duration, b *Batch) {
	if b.Answered || len(b.Copies) > 1 {
		return
	}
	if r := p.pick(b); r >= 0 && p.m.TryExtra(now) {
		p.m.Send(now, b, r, Normal, true)
	}
}

func (p *dhedge) Rotation(time.Duration, int, bool) {}
