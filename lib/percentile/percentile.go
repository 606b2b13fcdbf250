// Package percentile holds the one percentile rule of the project: the
// nearest rank (docs/algorithms.md). The RBC band, the SLO series, the
// replayer's and the load tools' summaries all use it, so a "P99" means the
// same everywhere.
package percentile

import "math"

// tolerance absorbs the binary representation error of decimal
// percentiles: 0.985·1000 evaluates to 985.0000000000001 in float64, and
// the intended rank is 985, not 986. The product's error is a few ulps
// (relative ~1e-16); 1e-12 leaves a wide margin while no realistic
// percentile (fewer than 10 decimals) has a true fractional part that
// small.
const tolerance = 1e-12

// Rank returns the 1-based nearest rank of quantile q (0 < q ≤ 1) among n
// sorted values: ⌈q·n⌉, clamped to [1, n]; 0 when n is 0. For a percentile
// p in (0, 100] pass p/100.
func Rank(n int, q float64) int {
	if n <= 0 {
		return 0
	}
	x := q * float64(n)
	r := int(math.Ceil(x - x*tolerance))
	return min(max(r, 1), n)
}

// Of returns the value of quantile q of sorted (ascending) values, by Rank;
// the zero value when there are none.
func Of[T any](sorted []T, q float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	return sorted[Rank(len(sorted), q)-1]
}

// MedianOfSeeds is the median of a few results (one per seed): the middle
// value, or the mean of the two middle ones for an even count; 0 when there
// are none. It is not a percentile of a distribution but a summary of
// repeated runs, where the nearest rank would report the lower middle value.
// sorted is ascending; +Inf (an unstable run) in a middle value gives +Inf.
func MedianOfSeeds(sorted []float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
