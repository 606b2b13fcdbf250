package dispatch

import (
	"math/rand/v2"
	"time"
)

// SingleRParams are the parameters of singler.
type SingleRParams struct {
	BudgetParams
	// Percentile is k: the percentile of the latency the fit minimizes.
	Percentile float64 `json:"percentile" range:"(0,100)" doc:"the latency percentile the reissue delay and probability minimize"`
	Samples    int     `json:"samples" range:"[100,1000000]" doc:"primary and reissue response times the fit uses (the latest)"`
	// LearningRate is λ of §4.3: d moves by λ·(d_local − d) at each refit.
	LearningRate float64 `json:"learning_rate" range:"(0,1]" doc:"each refit moves the delay this share of the way to the fitted one (1: all the way)"`
	QRule        QRule   `json:"q_rule" doc:"corrected (q = B / Pr(X > d*), the default) or as_printed (line 13 of SingleR's Figure 1)"`
	Cancel       bool    `json:"cancel" doc:"cancel the other copy when one answers (the fit then sees fewer slow primaries)"`
}

func init() {
	Register("singler", Factory{
		Summary: "SingleR: reissue after a delay d with probability q, d and q fitted from recent response times to minimize a percentile under the budget",
		Params: func() any {
			return &SingleRParams{BudgetParams: budgetOf(0.1), Percentile: 99, Samples: 10_000, LearningRate: 0.2,
				QRule: QCorrected}
		},
		New: func(params any, m *Machine, env Env) (Policy, error) {
			pp := params.(*SingleRParams)
			if err := pp.apply(m); err != nil {
				return nil, err
			}
			return &singler{m: m, rng: rng(env), p: *pp, q: pp.Budget,
				x: newLatencies(pp.Samples), y: newLatencies(pp.Samples)}, nil
		},
	})
}

// singler is SingleR (Kaler, He and Elnikety, "Optimal Reissue Policies for
// Reducing Tail Latency"): each batch goes to a random replica; with
// probability q it is reissued to another replica if still unanswered after
// d. It starts, as §4.3 does, reissuing at d = 0 with probability B, and
// refits every Samples/10 primaries: ComputeOptimalSingleR (FitSingleR) on
// the recent primary (X) and reissue (Y) response times gives d_local, and
// d moves by LearningRate·(d_local − d); q follows from d by QRule.
type singler struct {
	m    *Machine
	rng  *rand.Rand
	p    SingleRParams
	d    float64 // seconds
	q    float64
	x, y *latencies
	fits int
}

func (s *singler) pick(b *Batch) int { return s.m.PickRandom(s.rng, b) }

// Fitted returns the current reissue delay and probability.
func (s *singler) Fitted() (time.Duration, float64) {
	return time.Duration(s.d * float64(time.Second)), s.q
}

func (s *singler) Arrive(now time.Duration, b *Batch) {
	s.m.Send(now, b, s.pick(nil), Normal, false)
	if s.q > 0 && s.rng.Float64() < s.q {
		s.m.After(b, now+time.Duration(s.d*float64(time.Second)))
	}
}

func (s *singler) Done(now time.Duration, b *Batch, c int, st Status) {
	cp := b.Copies[c]
	if st == OK {
		took := now - cp.Sent
		switch {
		case c == 0:
			if s.x.add(took) {
				s.refit()
			}
		case cp.Extra:
			s.y.add(took)
		}
	}
	if s.m.Settle(now, b, c, st, s.pick) && s.p.Cancel {
		s.m.CancelOthers(b, c)
	}
}

// refit moves d towards the optimum for the recent response times.
func (s *singler) refit() {
	if s.x.count() < 100 {
		return
	}
	x := seconds(s.x.sorted)
	var y []float64
	if s.y.count() >= 100 {
		y = seconds(s.y.sorted)
	}
	f := FitSingleR(x, y, s.p.Percentile/100, s.p.Budget, s.p.QRule)
	s.d += s.p.LearningRate * (f.D - s.d)
	q, _ := reissueQ(x, s.p.Budget, s.d)
	if s.p.QRule == QAsPrinted {
		q = 1 - cdf(x, s.d)
	}
	s.q = q
	s.fits++
}

func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

func (s *singler) Timer(now time.Duration, b *Batch) {
	if b.Answered || len(b.Copies) > 1 {
		return
	}
	if r := s.pick(b); r >= 0 && s.m.TryExtra(now) {
		s.m.Send(now, b, r, Normal, true)
	}
}

func (s *singler) Rotation(time.Duration, int, bool) {}
