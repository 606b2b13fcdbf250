package dispatch

import (
	"math/rand/v2"
	"time"
)

func init() {
	Register("jsq", Factory{
		Summary: "join the shortest queue: each batch to the replica with the fewest calls in flight from this app server",
		Single:  true,
		New: func(_ any, m *Machine, env Env) (Policy, error) {
			return &jsq{m: m, rng: rng(env)}, nil
		},
	})
}

// jsq sends each batch to the usable replica with the fewest of this app
// server's copies in flight (ties at random); a retryable failure is
// retried once on the next least loaded.
type jsq struct {
	m   *Machine
	rng *rand.Rand
}

func (p *jsq) pick(b *Batch) int { return p.m.PickLeast(p.rng, b, 0) }

func (p *jsq) Arrive(now time.Duration, b *Batch) { p.m.Send(now, b, p.pick(nil), Normal, false) }

func (p *jsq) Done(now time.Duration, b *Batch, c int, st Status) { p.m.Settle(now, b, c, st, p.pick) }

func (p *jsq) Timer(time.Duration, *Batch)       {}
func (p *jsq) Rotation(time.Duration, int, bool) {}
