package load

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Synthetic runs with a known model: P exponential (mean 1 ms) per query,
// a 20 ms stall with probability 5% per run, small noise otherwise.
func TestAnalyzeJitterRecoversTheModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var runs [][]time.Duration
	for q := 0; q < 400; q++ {
		p := time.Duration((0.05 + rng.ExpFloat64()) * float64(time.Millisecond))
		var rs []time.Duration
		for i := 0; i < 50; i++ {
			d := p + time.Duration(rng.Float64()*20*float64(time.Microsecond))
			if rng.Float64() < 0.05 {
				d += 20 * time.Millisecond
			}
			rs = append(rs, d)
		}
		runs = append(runs, rs)
	}
	m, err := AnalyzeJitter(runs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m.MeanServiceMs-1.05) > 0.12 {
		t.Errorf("P̄ %.3f ms, want about 1.05", m.MeanServiceMs)
	}
	if math.Abs(m.StallProb-0.05) > 0.006 {
		t.Errorf("stall probability %.4f, want 0.05", m.StallProb)
	}
	if want := 20 / m.MeanServiceMs; math.Abs(m.StallX-want) > 0.05*want {
		t.Errorf("stall %.1f P̄, want %.1f", m.StallX, want)
	}
	if m.JitterP50X > 0.1 {
		t.Errorf("median jitter %.3f P̄, want near 0", m.JitterP50X)
	}
}

func TestAnalyzeJitterRefusesTooFewRuns(t *testing.T) {
	if _, err := AnalyzeJitter([][]time.Duration{{time.Millisecond}}, 2); err == nil {
		t.Fatal("one run per query accepted")
	}
	if _, err := AnalyzeJitter(nil, 2); err == nil {
		t.Fatal("no queries accepted")
	}
	if _, err := AnalyzeJitter([][]time.Duration{{1, 2}}, 0); err == nil {
		t.Fatal("a zero threshold accepted")
	}
}

// The estimator at several costs, stall rates and amounts of scheduling
// noise (what a busy machine adds to every run: exponential, mean up to
// half the cost): P̄ within the noise's reach of the true mean, the stall
// probability within a fifth of the truth (and no stalls found when none
// were injected), the stall within a tenth of its length.
func TestAnalyzeJitterHoldsUnderNoise(t *testing.T) {
	for _, costMs := range []float64{0.5, 2, 5} {
		for _, prob := range []float64{0, 0.01, 0.05} {
			for _, noiseX := range []float64{0, 0.1, 0.5} {
				rng := rand.New(rand.NewPCG(uint64(costMs*10), uint64(prob*1000+noiseX*10)))
				stall := 30.0 // ms
				var runs [][]time.Duration
				var sumP float64
				for q := 0; q < 200; q++ {
					p := costMs * (0.5 + rng.Float64()) // the key's cost
					sumP += p
					var rs []time.Duration
					for i := 0; i < 30; i++ {
						ms := p + rng.ExpFloat64()*noiseX*costMs
						if rng.Float64() < prob {
							ms += stall
						}
						rs = append(rs, time.Duration(ms*float64(time.Millisecond)))
					}
					runs = append(runs, rs)
				}
				m, err := AnalyzeJitter(runs, 2)
				if err != nil {
					t.Fatal(err)
				}
				trueP := sumP / 200
				name := fmt.Sprintf("cost %g ms, stalls %g, noise %g", costMs, prob, noiseX)
				if m.MeanServiceMs < trueP*0.999 || m.MeanServiceMs > trueP*(1+noiseX/3)+0.01 {
					t.Errorf("%s: P̄ %.3f ms, true %.3f", name, m.MeanServiceMs, trueP)
				}
				if prob == 0 && m.StallProb > 0.004 {
					t.Errorf("%s: %.4f stalls found where none were injected", name, m.StallProb)
				}
				if prob > 0 && math.Abs(m.StallProb-prob) > 0.2*prob+0.002 {
					t.Errorf("%s: stall probability %.4f, injected %g", name, m.StallProb, prob)
				}
				if prob > 0 {
					if got := m.StallX * m.MeanServiceMs; math.Abs(got-stall) > 0.1*stall {
						t.Errorf("%s: stalls of %.1f ms, injected %g", name, got, stall)
					}
				}
			}
		}
	}
}

// A busy machine delays a few runs by a few service times (here 6% of
// runs by 1.5–5 P̄): the stalls (5%, 15 P̄) are still found as injected, and
// stalls of spread-out lengths (exponential, mean 10 P̄) are all counted.
func TestAnalyzeJitterSeparatesDelaysFromStalls(t *testing.T) {
	for _, c := range []struct {
		name      string
		stall     func(*rand.Rand) float64
		wantX     float64
		delayRate float64
	}{
		{"fixed stalls beside delays", func(*rand.Rand) float64 { return 15 }, 15, 0.06},
		{"spread stalls, no delays", func(r *rand.Rand) float64 { return 3 + 10*r.ExpFloat64() }, 13, 0},
	} {
		rng := rand.New(rand.NewPCG(7, 8))
		var runs [][]time.Duration
		for q := 0; q < 200; q++ {
			var rs []time.Duration
			for i := 0; i < 30; i++ {
				x := 1 + 0.02*rng.Float64()
				if rng.Float64() < c.delayRate {
					x += 1.5 + 3.5*rng.Float64()
				}
				if rng.Float64() < 0.05 {
					x += c.stall(rng)
				}
				rs = append(rs, time.Duration(x*float64(time.Millisecond)))
			}
			runs = append(runs, rs)
		}
		m, err := AnalyzeJitter(runs, 1)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(m.StallProb-0.05) > 0.01 || math.Abs(m.StallX-c.wantX) > 0.15*c.wantX {
			t.Errorf("%s: stalls %.4f of %.1f P̄ (threshold %.2f P̄), want 0.05 of %g", c.name, m.StallProb, m.StallX, m.ThresholdX, c.wantX)
		}
	}
}
