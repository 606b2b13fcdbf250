package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
)

// Sweeps of the reference models (laedgeref_test.go, dhedgeref_test.go)
// behind docs/notebook/2026-12-02-hedging-third-round.md; they print, assert
// nothing, and run only with REF_SWEEP=1 (minutes of CPU):
//
//	REF_SWEEP=1 go test -count=1 -v -run 'TestReference' -timeout 30m ./sim/

func TestReferenceLaedgeSweep(t *testing.T) {
	if os.Getenv("REF_SWEEP") == "" {
		t.Skip()
	}
	for _, u := range []float64{0.2, 0.3, 0.35, 0.4, 0.45} {
		for seed := uint64(1); seed <= 5; seed++ {
			var out []float64
			var cpq float64
			for _, pc := range []bool{false, true} {
				m := &refLaedge{shards: 50, hiccupProb: 1e-3, hiccupMs: 15, pc: pc, rng: rand.New(rand.NewPCG(seed, 7))}
				lat := m.run(u, 1000, 10000)
				out = append(out, refP99(lat))
				cpq = float64(m.copies) / float64(m.queries)
			}
			fmt.Printf("u=%.2f seed=%d cc=%.2f pc=%.2f diff=%+.2f cpq(pc)=%.2f\n", u, seed, out[0], out[1], out[1]-out[0], cpq)
		}
	}
}

func TestReferenceDHedgeLong(t *testing.T) {
	if os.Getenv("REF_SWEEP") == "" {
		t.Skip()
	}
	c, err := LoadHedging("../examples/hedging/laedge-collapse.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Requests, c.Warmup = 100000, 5000
	arm := c.Policies[1]
	for _, u := range []float64{0.6, 0.7} {
		for seed := uint64(1); seed <= 2; seed++ {
			r, err := c.RunBench(arm, u, seed)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("u=%.1f seed=%d bench100k tail=%.2f P̄ wall=%.1fs\n", u, seed, r.Tail, r.WallS)
		}
		for seed := uint64(1); seed <= 4; seed++ {
			rng := rand.New(rand.NewPCG(seed, 11))
			arr, req := refRequests(rng, 105000, 50, u*2/1.015)
			m := &refDHedge{d: 5, hiccupMs: 15, hiccupProb: 1e-3, arrivals: arr, rng: rng}
			m.run()
			fmt.Printf("u=%.1f seed=%d ref100k tail=%.2f P̄\n", u, seed, refTail(arr, req, m.answered, 5000, 105000))
		}
	}
}

func TestReferenceDHedgeVariants(t *testing.T) {
	if os.Getenv("REF_SWEEP") == "" {
		t.Skip()
	}
	for _, u := range []float64{0.45, 0.6, 0.7} {
		for seed := uint64(1); seed <= 3; seed++ {
			line := fmt.Sprintf("u=%.2f seed=%d", u, seed)
			for _, v := range []struct {
				name      string
				low, from bool
			}{{"paper", false, false}, {"low", true, false}, {"fromstart", false, true}} {
				rng := rand.New(rand.NewPCG(seed, 11))
				arr, req := refRequests(rng, 11000, 50, u*2/1.015)
				m := &refDHedge{d: 5, hiccupMs: 15, hiccupProb: 1e-3, arrivals: arr, rng: rng, lowHedge: v.low, fromStart: v.from}
				m.run()
				line += fmt.Sprintf(" %s=%.1f", v.name, refTail(arr, req, m.answered, 1000, 11000))
			}
			fmt.Println(line)
		}
	}
}
