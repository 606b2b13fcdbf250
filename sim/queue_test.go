package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
)

// meanWait drives one backend's capacity model on the simulator's clock with
// Poisson arrivals of single queries at lambda per second, each holding its
// worker for a service time drawn by service, and returns the mean time a
// query waited for admission (what the simulator's backends do, without the
// caches around them).
func meanWait(t *testing.T, workers int, lambda float64, service func(*rand.Rand) time.Duration, n int) float64 {
	t.Helper()
	eng := &Engine{}
	clk := &Clock{Engine: eng, Epoch: time.Unix(1_000_000_000, 0)}
	lim := capacity.DefaultLimits()
	lim.Workers = workers
	m, err := capacity.New(lim, 1, clk)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 13))
	var pending []*capacity.Ticket
	var waited time.Duration
	served := 0
	var drain func()
	drain = func() {
		for len(pending) > 0 {
			tk := pending[0]
			if settled, _ := tk.Settled(); !settled {
				return
			}
			pending = pending[1:]
			waited += tk.Queued()
			served++
			eng.After(service(rng), func() { tk.Release(); drain() })
		}
	}
	clk.After = drain
	at := time.Duration(0)
	for range n {
		at += time.Duration(rng.ExpFloat64() / lambda * float64(time.Second))
		eng.At(at, func() {
			ts, err := m.Join(1)
			if err != nil {
				t.Fatal(err)
			}
			pending = append(pending, ts[0])
			drain()
		})
	}
	eng.RunUntil(at + time.Hour)
	if served != n {
		t.Fatalf("%d of %d queries served", served, n)
	}
	return waited.Seconds() / float64(n)
}

// erlangC is the probability that an arrival waits in an M/M/c queue with
// offered load a = λ/μ.
func erlangC(c int, a float64) float64 {
	sum, term := 0.0, 1.0
	for k := 0; k < c; k++ {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	last := term * a / float64(c) // a^c / c!
	rho := a / float64(c)
	top := last / (1 - rho)
	return top / (sum + top)
}

func TestQueueMatchesMD1(t *testing.T) {
	const s = 2 * time.Millisecond
	for _, rho := range []float64{0.3, 0.6, 0.85} {
		lambda := rho / s.Seconds()
		got := meanWait(t, 1, lambda, func(*rand.Rand) time.Duration { return s }, 200_000)
		want := rho * s.Seconds() / (2 * (1 - rho)) // Pollaczek–Khinchine, deterministic service
		t.Logf("M/D/1 ρ = %.2f: %.4f ms simulated, %.4f ms by the formula", rho, got*1e3, want*1e3)
		if math.Abs(got-want) > 0.06*want {
			t.Errorf("M/D/1 at ρ = %.2f: mean wait %.3f ms, the formula says %.3f ms", rho, got*1e3, want*1e3)
		}
	}
}

func TestQueueMatchesMMc(t *testing.T) {
	const mean = 4 * time.Millisecond
	const c = 4
	exp := func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(mean)) }
	for _, rho := range []float64{0.5, 0.75, 0.9} {
		mu := 1 / mean.Seconds()
		lambda := rho * c * mu
		got := meanWait(t, c, lambda, exp, 300_000)
		want := erlangC(c, lambda/mu) / (c*mu - lambda)
		t.Logf("M/M/%d ρ = %.2f: %.4f ms simulated, %.4f ms by Erlang C", c, rho, got*1e3, want*1e3)
		if math.Abs(got-want) > 0.08*want {
			t.Errorf("M/M/%d at ρ = %.2f: mean wait %.3f ms, Erlang C says %.3f ms", c, rho, got*1e3, want*1e3)
		}
	}
}
