package load

import (
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
