package feasibility

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
)

func TestCapacity(t *testing.T) {
	for _, c := range []struct {
		l    config.Limits
		want float64
	}{
		{config.Limits{Workers: 8, Rate: 150}, 150},
		{config.Limits{Workers: 8, ExtraLatencyMs: 4}, 2000},
		{config.Limits{Workers: 8, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 100}, 2000},
		{config.Limits{Workers: 8, Rate: 5000, ExtraLatencyMs: 4}, 2000},
		{config.Limits{Workers: 8}, math.Inf(1)},
	} {
		if got := Capacity(c.l); got != c.want {
			t.Errorf("%+v: %v, want %v", c.l, got, c.want)
		}
	}
}

func TestPhases(t *testing.T) {
	initial := map[string]config.Limits{"a": {Workers: 1, Rate: 100}, "b": {Workers: 1, Rate: 200}}
	changes := []scenario.Change{
		{At: 10 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: "rate", Value: 50}}},
		{At: 10 * time.Second, Backend: "b", Fields: []scenario.FieldValue{{Field: "rate", Value: 20}}},
		{At: 30 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: "rate", Value: 0}}},
		{At: 90 * time.Second, Backend: "a", Fields: []scenario.FieldValue{{Field: "rate", Value: 1}}},
	}
	ph := Phases(initial, changes, 60*time.Second)
	if len(ph) != 3 || ph[0].End != 10*time.Second || ph[1].Capacity["a"] != 50 || ph[1].Capacity["b"] != 20 ||
		!math.IsInf(ph[2].Capacity["a"], 1) || ph[2].End != 60*time.Second {
		t.Fatalf("%+v", ph)
	}
}

// curve is a miss ratio falling linearly from 1 to a floor at `full` MiB.
func curve(budget, full int, floor float64) []float64 {
	mr := make([]float64, budget+1)
	for m := range mr {
		mr[m] = math.Max(floor, 1-float64(m)/float64(full))
	}
	return mr
}

// Property: the oracle's worst utilization is the minimum over every
// allocation (brute force on small budgets), its allocation sums to the
// budget with every partition at or above the floor, and a phase is
// feasible exactly when that minimum is at most 1.
func TestOracleIsOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		budget, floor := 12+r.IntN(20), 1+r.IntN(3)
		var bs []Backend
		caps := map[string]float64{}
		for i := range 3 {
			name := string(rune('a' + i))
			bs = append(bs, Backend{Name: name, CacheableRate: 50 + r.Float64()*200, UncacheableRate: r.Float64() * 10,
				MissRatio: curve(budget, 2+r.IntN(budget), r.Float64()*0.3)})
			caps[name] = 10 + r.Float64()*150
		}
		res, err := Analyze(bs, []Phase{{Capacity: caps}}, budget, floor, map[string]int{"a": floor, "b": floor, "c": budget - 2*floor})
		if err != nil {
			t.Fatal(err)
		}
		got := res[0]
		best := math.Inf(1)
		for x := floor; x <= budget-2*floor; x++ {
			for y := floor; x+y <= budget-floor; y++ {
				z := budget - x - y
				w := math.Max(util(bs[0], x, caps["a"]), math.Max(util(bs[1], y, caps["b"]), util(bs[2], z, caps["c"])))
				best = math.Min(best, w)
			}
		}
		sum := 0
		for _, m := range got.Oracle {
			sum += m
			if m < floor {
				t.Fatalf("trial %d: %v below the floor", trial, got.Oracle)
			}
		}
		if sum != budget || math.Abs(got.OracleWorst-best) > 1e-9 {
			t.Fatalf("trial %d: oracle %v (worst %v, sum %d), brute force %v", trial, got.Oracle, got.OracleWorst, sum, best)
		}
		if got.Feasible != (best <= 1) {
			t.Fatalf("trial %d: feasible %v but the best worst utilization is %v", trial, got.Feasible, best)
		}
	}
}

func TestNeedAndInfeasible(t *testing.T) {
	b := Backend{Name: "a", CacheableRate: 100, MissRatio: curve(100, 50, 0.1)}
	// load = 100·mr(m); capacity 40 → mr ≤ 0.4 → m ≥ 30.
	res, _ := Analyze([]Backend{b}, []Phase{{Capacity: map[string]float64{"a": 40}}}, 100, 8, map[string]int{"a": 100})
	if res[0].Need["a"] != 30 || !res[0].Feasible {
		t.Fatalf("%+v", res[0])
	}
	// capacity 5 < 100 · 0.1: no cache is enough.
	res, _ = Analyze([]Backend{b}, []Phase{{Capacity: map[string]float64{"a": 5}}}, 100, 8, map[string]int{"a": 100})
	if res[0].Need["a"] != -1 || res[0].Feasible || res[0].OracleWorst != 2 {
		t.Fatalf("%+v", res[0])
	}
}
