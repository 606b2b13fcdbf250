package feasibility

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/model"
)

// M/M/1: one worker, exponential service of mean 1/μ (cost_ms), single
// queries: the time in the system is exponential with rate μ − λ, so its
// P99 is ln(100)/(μ − λ).
func TestQueueMM1(t *testing.T) {
	const meanMs = 2.0
	mu := 1000 / meanMs
	for _, rho := range []float64{0.3, 0.6, 0.9} {
		lam := rho * mu
		q := NewQueue(config.Limits{Workers: 1, CostMs: meanMs}, 0, []float64{0, 1}, lam)
		for _, p := range []float64{0.5, 0.9, 0.99} {
			got := q.Quantile(1, p)
			want := -math.Log(1-p) / (mu - lam) * 1000
			if math.Abs(got-want) > 0.03*want {
				t.Errorf("ρ = %.1f: P%g %.3f ms, closed form %.3f ms", rho, p*100, got, want)
			}
		}
		if math.Abs(q.Rho-rho) > 1e-12 {
			t.Errorf("ρ %v, want %v", q.Rho, rho)
		}
	}
}

// M/M/c: c workers, exponential service: the waiting time is 0 with
// probability 1 − Erlang C, else exponential with rate cμ − λ; the time in
// the system adds the service.
func TestQueueMMc(t *testing.T) {
	const meanMs, c = 4.0, 4
	mu := 1000 / meanMs
	for _, rho := range []float64{0.5, 0.9} {
		lam := rho * c * mu
		q := NewQueue(config.Limits{Workers: c, CostMs: meanMs}, 0, []float64{0, 1}, lam)
		pw := erlangC(c, lam/mu)
		r := c*mu - lam
		// P(T > x) = P(no wait)·e^(−μx) + P(wait)·P(W + S > x), W ~ Exp(r).
		tail := func(x float64) float64 {
			x /= 1000
			hypo := (r*math.Exp(-mu*x) - mu*math.Exp(-r*x)) / (r - mu)
			return (1-pw)*math.Exp(-mu*x) + pw*hypo
		}
		for _, p := range []float64{0.9, 0.99} {
			got := q.Quantile(1, p)
			if e := tail(got); math.Abs(e-(1-p)) > 0.05*(1-p) {
				t.Errorf("ρ = %.1f: P%g = %.3f ms, where the exact tail is %.5f, not %.5f", rho, p*100, got, e, 1-p)
			}
		}
	}
}

func TestQueueOverloaded(t *testing.T) {
	for _, c := range []struct {
		l    config.Limits
		rate float64
	}{
		{config.Limits{Workers: 8, Rate: 100}, 100},          // λ = the bucket's rate
		{config.Limits{Workers: 8, Rate: 100}, 150},          // beyond it
		{config.Limits{Workers: 2, ExtraLatencyMs: 10}, 200}, // 2 workers × 100/s
	} {
		q := NewQueue(c.l, 0, []float64{0, 1}, c.rate)
		if !q.Overloaded || !math.IsInf(q.Quantile(1, 0.5), 1) || q.CDF(1, 1e6) != 0 {
			t.Errorf("%+v at %v/s: overloaded %v, median %v", c.l, c.rate, q.Overloaded, q.Quantile(1, 0.5))
		}
	}
	// Batches: 50 batches/s of 2 queries at a rate of 100/s is λ = capacity.
	if q := NewQueue(config.Limits{Workers: 8, Rate: 100}, 0, []float64{0, 0, 1}, 50); !q.Overloaded {
		t.Error("batches of 2 at half the rate: not overloaded")
	}
}

// More load, a higher P99: for the bucket and the workers, single queries
// and batches.
func TestQueueMonotone(t *testing.T) {
	for _, l := range []config.Limits{
		{Workers: 8, Rate: 200, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25},
		{Workers: 4, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25},
		{Workers: 2, CostMs: 2},
	} {
		for _, batch := range [][]float64{{0, 1}, {0, 0.3, 0.3, 0.2, 0.1, 0.1}} {
			prev := 0.0
			for rate := 5.0; ; rate *= 1.3 {
				q := NewQueue(l, 0.05, batch, rate)
				p := q.Quantile(len(batch)-1, 0.99)
				if p < prev-1e-9 {
					t.Fatalf("%+v, batch %v: P99 %v at %v/s, below %v at a lower rate", l, batch, p, rate, prev)
				}
				prev = p
				if math.IsInf(p, 1) {
					break
				}
			}
		}
	}
}

// twoBackends is a model of requests that each query a (two cacheable
// queries) and half of them also b (one cacheable, one uncacheable).
func twoBackends(budget int) (*LatencyModel, []model.Backend) {
	curves := []model.Backend{
		{Name: "a", MissRatio: curve(budget, budget/2, 0.05)},
		{Name: "b", MissRatio: curve(budget, budget, 0.1)},
	}
	fan := &Fanout{
		Backends: []string{"a", "b"},
		MeanSize: []float64{4096, 4096},
		Pairs: [][]Pair{
			{{Cacheable: 2, Weight: 1}},
			{{Cacheable: 1, Uncacheable: 1, Weight: 0.5}},
		},
		Shapes: []Shape{{Weight: 0.5, Pair: []int32{0, -1}}, {Weight: 0.5, Pair: []int32{0, 0}}},
		Rate:   100,
		Slabs:  []Slabs{{Charge: 1}, {Charge: 1}},
	}
	topo := []config.Backend{
		{Name: "a", Type: config.TypeKV, Replicas: make([]config.Replica, 1), Limits: config.Limits{Workers: 8, Rate: 120, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}},
		{Name: "b", Type: config.TypeSQL, Replicas: make([]config.Replica, 1), Limits: config.Limits{Workers: 8, Rate: 80, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}},
	}
	return NewLatencyModel(curves, fan, topo, costmodel.Calibration{}), curves
}

// More cache, a lower load and P99; a higher request rate, a higher P99.
func TestModelMonotone(t *testing.T) {
	lm, _ := twoBackends(64)
	in := PhaseInput{Rate: 100}
	prev := math.Inf(1)
	prevRho := math.Inf(1)
	for m := 0; m <= 56; m += 4 {
		p := lm.Predict(in, map[string]int{"a": m, "b": 64 - m})
		st := lm.state(0, lm.initial[0], 100, nil, m)
		if st.rho > prevRho+1e-12 {
			t.Fatalf("a with %d MiB: utilization %v above %v with less", m, st.rho, prevRho)
		}
		prevRho = st.rho
		_ = p
	}
	for _, m := range []int{8, 24, 40} {
		prev = 0
		for rate := 20.0; rate < 400; rate *= 1.25 {
			p := lm.Predict(PhaseInput{Rate: rate}, map[string]int{"a": m, "b": 64 - m}).P99Ms
			if p < prev*(1-1e-9) {
				t.Fatalf("a = %d MiB: P99 %v at %v requests/s, below %v at a lower rate", m, p, rate, prev)
			}
			prev = p
		}
	}
	// b's utilization falls with its cache, and so does the P99 when b is the bottleneck.
	in = PhaseInput{Rate: 100, Limits: map[string]config.Limits{"b": {Workers: 8, Rate: 60, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}}}
	prev = math.Inf(1)
	for m := 8; m <= 56; m += 8 {
		p := lm.Predict(in, map[string]int{"a": 8, "b": m}).P99Ms
		if p > prev*(1+1e-9) {
			t.Fatalf("b = %d MiB: P99 %v above %v with less cache", m, p, prev)
		}
		prev = p
	}
}

// The search: sums to the budget, respects the floor, never worse than its
// start under the model, deterministic; an overloaded phase falls back to
// the start.
func TestBestAllocation(t *testing.T) {
	const budget, floor = 64, 4
	lm, curves := twoBackends(budget)
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 40 {
		in := PhaseInput{Rate: 40 + r.Float64()*160, Limits: map[string]config.Limits{
			"a": {Workers: 8, Rate: 30 + r.Float64()*200, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25},
			"b": {Workers: 8, Rate: 20 + r.Float64()*150, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25},
		}}
		a := floor + r.IntN(budget-2*floor+1)
		start := map[string]int{"a": a, "b": budget - a}
		got, pred := lm.Best(in, start, floor)
		if got["a"]+got["b"] != budget || got["a"] < floor || got["b"] < floor {
			t.Fatalf("trial %d: %v", trial, got)
		}
		first := lm.Predict(in, start)
		if better(first, pred) {
			t.Fatalf("trial %d: %v predicts %+v, worse than the start %v's %+v", trial, got, pred, start, first)
		}
		if p := lm.Predict(in, got); p.P99Ms != pred.P99Ms && !math.IsInf(pred.P99Ms, 1) {
			t.Fatalf("trial %d: Best says %v, Predict %v", trial, pred.P99Ms, p.P99Ms)
		}
		again, _ := lm.Best(in, start, floor)
		if again["a"] != got["a"] {
			t.Fatalf("trial %d: %v then %v", trial, got, again)
		}
		// No single MiB moved from the result improves it by more than the
		// search's threshold.
		if !math.IsInf(pred.P99Ms, 1) {
			for _, d := range []int{-1, 1} {
				alt := map[string]int{"a": got["a"] + d, "b": got["b"] - d}
				if alt["a"] < floor || alt["b"] < floor {
					continue
				}
				if better(lm.Predict(in, alt), pred) {
					t.Fatalf("trial %d: %v beats the result %v", trial, alt, got)
				}
			}
		} else if got["a"] != start["a"] {
			t.Fatalf("trial %d: overloaded everywhere, but %v is not the start %v", trial, got, start)
		}
	}
	_ = curves
}

// Refine starts from the min-max allocation and ends no worse than it or
// the configured one; an overloaded phase keeps the min-max allocation;
// the load model's results are left as they were.
func TestRefine(t *testing.T) {
	const budget, floor = 64, 4
	lm, curves := twoBackends(budget)
	phases := []Phase{
		{Start: 0, End: time.Minute, Capacity: map[string]float64{"a": 120, "b": 80}},
		{Start: time.Minute, End: 2 * time.Minute, Capacity: map[string]float64{"a": 120, "b": 1}},
	}
	res, err := analysePhases(curves, phases, budget, floor, map[string]int{"a": 32, "b": 32})
	if err != nil {
		t.Fatal(err)
	}
	minmax := []map[string]int{copyAlloc(res[0].MinMax), copyAlloc(res[1].MinMax)}
	initial := map[string]config.Limits{
		"a": {Workers: 8, Rate: 120, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25},
		"b": {Workers: 8, Rate: 80, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25},
	}
	changes := []scenario.Change{{At: time.Minute, Backend: "b", Fields: []scenario.FieldValue{{Field: "rate", Value: 1}}}}
	ph := Phases(initial, changes, 2*time.Minute)
	lims := []map[string]config.Limits{ph[0].Limits, ph[1].Limits}
	if lims[0]["b"].Rate != 80 || lims[1]["b"].Rate != 1 || lims[1]["a"].Rate != 120 || lims[1]["b"].HiccupMs != 25 {
		t.Fatalf("%+v", lims)
	}
	pl := lm.Refine(res, []PhaseInput{{Limits: lims[0], Rate: 100}, {Limits: lims[1], Rate: 100}}, floor, map[string]int{"a": 32, "b": 32})
	if pl[0].OracleP99Ms > pl[0].MinMaxP99Ms || pl[0].OracleP99Ms > pl[0].ConfiguredP99Ms || math.IsInf(pl[0].OracleP99Ms, 1) {
		t.Fatalf("phase 0: %+v", pl[0])
	}
	if !math.IsInf(pl[1].OracleP99Ms, 1) || pl[1].Best["a"] != minmax[1]["a"] {
		t.Fatalf("phase 1 is overloaded whatever the allocation: %+v, oracle %v, min-max %v", pl[1], pl[1].Best, minmax[1])
	}
	if s := pl[0].Best["a"] + pl[0].Best["b"]; s != budget {
		t.Fatalf("oracle %v", pl[0].Best)
	}
	for i := range res {
		if fmt.Sprint(res[i].MinMax) != fmt.Sprint(minmax[i]) {
			t.Fatalf("Refine changed phase %d's min-max allocation: %v, was %v", i, res[i].MinMax, minmax[i])
		}
	}
}
