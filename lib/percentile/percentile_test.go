package percentile

import (
	"math"
	"sort"
	"testing"
	"testing/quick"
)

func TestRank(t *testing.T) {
	for _, c := range []struct {
		n    int
		q    float64
		want int
	}{
		{0, 0.99, 0}, {1, 0.99, 1}, {1000, 0.985, 985}, {1000, 0.995, 995}, {1000, 0.99, 990},
		{100, 0.5, 50}, {101, 0.5, 51}, {10, 1, 10}, {10, 0.0001, 1}, {3, 2, 3},
	} {
		if got := Rank(c.n, c.q); got != c.want {
			t.Errorf("Rank(%d, %v) = %d, want %d", c.n, c.q, got, c.want)
		}
	}
}

// Property: the value at Rank(n, q) has at least q·n values at or below it,
// and fewer than q·n strictly below it (the nearest-rank definition), for
// decimal percentiles.
func TestRankDefinition(t *testing.T) {
	f := func(n uint16, permille uint16) bool {
		if n == 0 {
			return true
		}
		pct := float64(permille%1000+1) / 10 // 0.1 … 100.0, one decimal
		q := pct / 100
		r := Rank(int(n), q)
		need := int(math.Round(pct * float64(n) * 1000)) // q·n, exact in thousandths
		return r*100000 >= need && (r-1)*100000 < need
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestOf(t *testing.T) {
	xs := []int{5, 1, 4, 2, 3}
	sort.Ints(xs)
	if Of(xs, 0.5) != 3 || Of(xs, 1) != 5 || Of([]int{}, 0.5) != 0 {
		t.Fatal("Of")
	}
}

func TestMedianOfSeeds(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{1, 2, 9}, 2}, {[]float64{1, 2, 4, 9}, 3}, {[]float64{1, inf}, inf}} {
		if got := MedianOfSeeds(c.in); got != c.want {
			t.Errorf("%v: %v, want %v", c.in, got, c.want)
		}
	}
}
