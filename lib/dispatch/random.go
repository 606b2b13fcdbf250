package dispatch

import (
	"math/rand/v2"
	"time"
)

func init() {
	Register("random", Factory{
		Summary: "each batch to one replica chosen uniformly at random",
		Single:  true,
		New: func(_ any, m *Machine, env Env) (Policy, error) {
			return &random{m: m, rng: rng(env)}, nil
		},
	})
}

// random is the default and the RobinHood paper's setting (one replica per
// backend there): one copy, to a usable replica at random; a retryable
// failure is retried once on another.
type random struct {
	m   *Machine
	rng *rand.Rand
}

func (p *random) pick(b *Batch) int { return p.m.PickRandom(p.rng, b) }

func (p *random) Arrive(now time.Duration, b *Batch) {
	p.m.Send(now, b, p.pick(nil), Normal, false)
}

func (p *random) Done(now time.Duration, b *Batch, c int, st Status) {
	p.m.Settle(now, b, c, st, p.pick)
}

func (p *random) Timer(time.Duration, *Batch)       {}
func (p *random) Rotation(time.Duration, int, bool) {}
