package feasibility

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/model"
)

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

// Property: each phase's allocation is the load model's min-max one, and a
// phase is feasible exactly when its worst utilization is at most 1.
func TestAnalysePhasesIsTheMinMax(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		budget, floor := 12+r.IntN(20), 1+r.IntN(3)
		var bs []model.Backend
		caps := map[string]float64{}
		for i := range 3 {
			name := string(rune('a' + i))
			bs = append(bs, model.Backend{Name: name, CacheableRate: 50 + r.Float64()*200, UncacheableRate: r.Float64() * 10,
				MissRatio: curve(budget, 2+r.IntN(budget), r.Float64()*0.3)})
			caps[name] = 10 + r.Float64()*150
		}
		res, err := analysePhases(bs, []Phase{{Capacity: caps}}, budget, floor, map[string]int{"a": floor, "b": floor, "c": budget - 2*floor})
		if err != nil {
			t.Fatal(err)
		}
		got := res[0]
		_, worst := model.MinMax(bs, caps, budget, floor)
		if got.MinMaxWorst != worst || got.Feasible != (worst <= 1) {
			t.Fatalf("trial %d: %+v, min-max worst %v", trial, got, worst)
		}
	}
}

func TestNeedAndInfeasible(t *testing.T) {
	b := model.Backend{Name: "a", CacheableRate: 100, MissRatio: curve(100, 50, 0.1)}
	// load = 100·mr(m); capacity 40 → mr ≤ 0.4 → m ≥ 30.
	res, _ := analysePhases([]model.Backend{b}, []Phase{{Capacity: map[string]float64{"a": 40}}}, 100, 8, map[string]int{"a": 100})
	if res[0].Need["a"] != 30 || !res[0].Feasible {
		t.Fatalf("%+v", res[0])
	}
	// capacity 5 < 100 · 0.1: no cache is enough.
	res, _ = analysePhases([]model.Backend{b}, []Phase{{Capacity: map[string]float64{"a": 5}}}, 100, 8, map[string]int{"a": 100})
	if res[0].Need["a"] != -1 || res[0].Feasible || res[0].MinMaxWorst != 2 {
		t.Fatalf("%+v", res[0])
	}
}
