package loghist

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/percentile"
)

// Quantiles from the histogram are within 2% of the exact nearest-rank
// quantile of the same values, for any mix of values.
func TestQuantileError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		var h Histogram
		vals := make([]float64, 1+r.IntN(20000))
		for i := range vals {
			vals[i] = math.Exp(r.NormFloat64()*1.5 + 7) // log-normal around 1 ms
			h.Observe(vals[i])
		}
		sort.Float64s(vals)
		c := Counts{}
		c.Add(h.Drain())
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
			exact := percentile.Of(vals, q)
			if exact < 1 {
				continue
			}
			got := c.Quantile(q)
			if rel := math.Abs(got-exact) / exact; rel > math.Sqrt(Gamma)-1+1e-9 {
				t.Fatalf("trial %d q %v: %v vs exact %v (%.2f%%)", trial, q, got, exact, 100*rel)
			}
		}
	}
}

func TestDrainResetsAndMerges(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				h.Observe(float64(100 + g*1000 + i))
			}
		}()
	}
	wg.Wait()
	c := Counts{}
	c.Add(h.Drain())
	if c.Total() != 4000 || h.Drain().Index != nil {
		t.Fatalf("total %d", c.Total())
	}
	o := Counts{5: 2}
	c.Merge(o)
	if c.Total() != 4002 || (Counts{}).Quantile(0.99) != 0 {
		t.Fatal("merge")
	}
	if Index(0) != 0 || Index(1e12) != Buckets-1 {
		t.Fatal("edges")
	}
}

func TestObserveNCountsLikeNObserves(t *testing.T) {
	var a, b Histogram
	for _, us := range []float64{3, 250, 250, 9000} {
		a.ObserveN(us, 3)
		for range 3 {
			b.Observe(us)
		}
	}
	a.ObserveN(42, 0)
	if x, y := a.Drain(), b.Drain(); !reflect.DeepEqual(x, y) {
		t.Fatalf("ObserveN %+v, Observe %+v", x, y)
	}
}
