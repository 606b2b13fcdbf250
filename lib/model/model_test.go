package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/loghist"
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

// curve is a miss ratio falling linearly from 1 to a floor at `full` MiB.
func curve(budget, full int, floor float64) []float64 {
	mr := make([]float64, budget+1)
	for m := range mr {
		mr[m] = math.Max(floor, 1-float64(m)/float64(full))
	}
	return mr
}

// Property: MinMax's worst utilization is the minimum over every
// allocation (brute force on small budgets), and its allocation sums to the
// budget with every partition at or above the floor.
func TestMinMaxIsOptimal(t *testing.T) {
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
		got, worst := MinMax(bs, caps, budget, floor)
		best := math.Inf(1)
		for x := floor; x <= budget-2*floor; x++ {
			for y := floor; x+y <= budget-floor; y++ {
				z := budget - x - y
				w := math.Max(Util(bs[0], x, caps["a"]), math.Max(Util(bs[1], y, caps["b"]), Util(bs[2], z, caps["c"])))
				best = math.Min(best, w)
			}
		}
		sum := 0
		for _, m := range got {
			sum += m
			if m < floor {
				t.Fatalf("trial %d: %v below the floor", trial, got)
			}
		}
		if sum != budget || math.Abs(worst-best) > 1e-9 || worst != Worst(bs, got, caps) {
			t.Fatalf("trial %d: min-max %v (worst %v, sum %d), brute force %v", trial, got, worst, sum, best)
		}
	}
}

func TestNeedAt(t *testing.T) {
	b := Backend{Name: "a", CacheableRate: 100, MissRatio: curve(100, 50, 0.1)}
	// load = 100·mr(m): capacity 40 → mr ≤ 0.4 → m ≥ 30; at ρ = 0.5, mr ≤ 0.2 → m ≥ 40.
	if n := NeedAt(b, 40, 1, 100, 8); n != 30 {
		t.Fatalf("need %d, want 30", n)
	}
	if n := NeedAt(b, 40, 0.5, 100, 8); n != 40 {
		t.Fatalf("need at 0.5: %d, want 40", n)
	}
	if n := NeedAt(b, 5, 1, 100, 8); n != -1 {
		t.Fatalf("capacity 5 below the floor's load 10: need %d, want -1", n)
	}
	if n := NeedAt(b, 1000, 1, 100, 8); n != 8 {
		t.Fatalf("ample capacity: need %d, want the floor", n)
	}
}

func TestMissCurveAndMissAt(t *testing.T) {
	// 10 accesses: 2 hit at 1 MiB, 3 at 2, 5 never.
	c := MissCurve([]float64{0, 2, 3, 5})
	want := []float64{1, 0.8, 0.5}
	for i := range want {
		if math.Abs(c[i]-want[i]) > 1e-12 {
			t.Fatalf("curve %v, want %v", c, want)
		}
	}
	if got := MissAt(c, 1.5); math.Abs(got-0.65) > 1e-12 {
		t.Fatalf("MissAt 1.5 = %v, want 0.65", got)
	}
	if MissAt(c, -1) != 1 || MissAt(c, 9) != 0.5 || MissAt(nil, 3) != 1 {
		t.Fatal("MissAt beyond the ends")
	}
	if e := MissCurve([]float64{0, 0, 0}); e[0] != 1 || e[1] != 1 {
		t.Fatalf("an empty histogram misses everywhere: %v", e)
	}
}

// The curve from a log-bucket histogram of distances equals the exact
// curve of the same distances within the buckets' 4% resolution.
func TestCurveFromDistances(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const maxMB = 64
	counts := loghist.Counts{}
	exact := make([]float64, maxMB+2)
	n := 200000
	for range n {
		var kib float64
		if r.Float64() < 0.1 {
			kib = Never
		} else {
			kib = math.Exp(r.Float64() * math.Log(200*1024)) // 1 KiB … 200 MiB, log-uniform
		}
		counts[uint32(loghist.Index(kib))]++
		mib := kib / 1024
		k := int(math.Ceil(mib))
		if k > maxMB {
			k = maxMB + 1
		}
		exact[k]++
	}
	got := CurveFromDistances(counts, maxMB)
	want := MissCurve(exact)
	if len(got) != maxMB+1 {
		t.Fatalf("%d points, want %d", len(got), maxMB+1)
	}
	for m := range want {
		if math.Abs(got[m]-want[m]) > 0.01 {
			t.Fatalf("at %d MiB: %v from the buckets, %v exact", m, got[m], want[m])
		}
	}
	for m := 1; m < len(got); m++ {
		if got[m] > got[m-1]+1e-12 {
			t.Fatalf("the curve rises at %d MiB: %v", m, got[m-1:m+1])
		}
	}
}

func TestQueueStepFillAndDrain(t *testing.T) {
	// 100/s arriving for 1 s at a capacity of 60/s: 60 answered, 40 queued.
	out, q := QueueStep(0, 100, 60, 1, 4)
	if out != 60 || q != 40 {
		t.Fatalf("step: %v out, %v queued", out, q)
	}
	// The backlog never holds more than mu·timeout.
	if _, q := QueueStep(200, 100, 60, 1, 2); q != 120 {
		t.Fatalf("backlog %v, want the timeout's 120", q)
	}
	if out, q := QueueStep(5, 10, 0, 1, 4); out != 0 || q != 15 {
		t.Fatalf("no capacity: %v %v", out, q)
	}
	if out, q := QueueStep(5, 10, math.Inf(1), 1, 4); out != 15 || q != 0 {
		t.Fatalf("no bound: %v %v", out, q)
	}
	// 100 misses/s of 16 KiB over 2 app servers fill 0.78 MiB/s each.
	per := FillMiB(100, 16384, 2)
	if math.Abs(per-100*16384.0/MiB/2) > 1e-12 {
		t.Fatalf("fill %v", per)
	}
}
