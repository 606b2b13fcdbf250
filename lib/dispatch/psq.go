package dispatch

import (
	"math/rand/v2"
	"time"
)

// PSQParams are the parameters of psq.
type PSQParams struct {
	// N is JBSQ's bound: the copies this app server keeps in flight at a
	// replica at most; the rest wait in the app server's queue. 1 is
	// per-shard queuing proper.
	N int `json:"n" range:"[1,1000]" doc:"copies in flight per replica at most (1: PSQ; n > 1: JBSQ(n))"`
}

func init() {
	Register("psq", Factory{
		Summary: "per-shard queuing: batches wait in the app server until a replica has fewer than n of its calls (JBSQ(n); n 1 is PSQ)",
		Single:  true,
		Params:  func() any { return &PSQParams{N: 1} },
		New: func(params any, m *Machine, env Env) (Policy, error) {
			return &psq{m: m, rng: rng(env), n: params.(*PSQParams).N}, nil
		},
	})
}

// psq holds batches in a FIFO queue and sends the oldest to a usable
// replica with fewer than n copies in flight, the least loaded first
// (LÆDGE §2.4: PSQ, and JBSQ(n) as its generalization). The queue is this
// app server's: with several app servers a replica's load from the others
// is unknown to it (docs/dispatch.md).
type psq struct {
	m     *Machine
	rng   *rand.Rand
	n     int
	queue fifo
}

func (p *psq) pick(b *Batch) int { return p.m.PickLeast(p.rng, b, p.n) }

func (p *psq) Arrive(now time.Duration, b *Batch) {
	if p.queue.Len() == 0 {
		if r := p.pick(nil); r >= 0 {
			p.m.Send(now, b, r, Normal, false)
			return
		}
	}
	p.queue.Push(b)
}

func (p *psq) Done(now time.Duration, b *Batch, c int, st Status) {
	p.m.Settle(now, b, c, st, func(b *Batch) int { return p.m.PickLeast(p.rng, b, 0) })
	p.drain(now)
}

// drain sends queued batches while a replica has room.
func (p *psq) drain(now time.Duration) {
	for p.queue.Len() > 0 {
		r := p.pick(nil)
		if r < 0 {
			return
		}
		p.m.Send(now, p.queue.Next(), r, Normal, false)
	}
}

func (p *psq) Timer(time.Duration, *Batch) {}

func (p *psq) Rotation(now time.Duration, _ int, in bool) {
	if in {
		p.drain(now)
	}
}
