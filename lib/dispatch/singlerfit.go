package dispatch

import (
	"slices"
	"sort"
)

// QRule is how the reissue probability follows from the fitted delay d*.
type QRule string

// The two rules: SingleR's Figure 1 as printed returns, on line 13,
// q = 1 − DiscreteCDF(R_X, d*), the share of primaries still outstanding at
// d*; the probability its own search assumed (line 18) and that spends the
// budget B is q = B / Pr(X > d*). docs/dispatch.md shows both and why.
const (
	QCorrected QRule = "corrected"
	QAsPrinted QRule = "as_printed"
)

// Values lists the rules (a parameter of this type is one of them).
func (QRule) Values() []string { return []string{string(QCorrected), string(QAsPrinted)} }

// SingleRFit is the optimal SingleR policy for a latency log.
type SingleRFit struct {
	// D is the reissue delay d*, Q the reissue probability.
	D, Q float64
	// Tail is the k-th percentile latency the search found d* achieves
	// (with q = B / Pr(X > d*)).
	Tail float64
	// Outstanding is Pr(X > d*): the share of primaries not answered at d*.
	Outstanding float64
}

// cdf is DiscreteCDF(R, t) of SingleR's Figure 1, line 21: the share of the
// sorted samples strictly below t.
func cdf(sorted []float64, t float64) float64 {
	return float64(sort.SearchFloat64s(sorted, t)) / float64(len(sorted))
}

// reissueQ is line 18: the probability that spends budget b on the
// requests outstanding at d, at most 1.
func reissueQ(x []float64, b, d float64) (q, outstanding float64) {
	outstanding = 1 - cdf(x, d)
	if outstanding <= b {
		return 1, outstanding
	}
	return b / outstanding, outstanding
}

// successRate is SingleRSuccessRate (lines 15–20): the probability a
// request is answered by t when requests outstanding at d are reissued
// with the probability that spends the budget.
func successRate(x, y []float64, b, t, d float64) float64 {
	pxt := cdf(x, t)
	q, _ := reissueQ(x, b, d)
	return pxt + q*(1-pxt)*cdf(y, t-d)
}

// FitSingleR is ComputeOptimalSingleR (SingleR, Figure 1): the reissue
// delay and probability minimizing the k-th percentile (0 < k < 1) of the
// latency for a reissue budget b, from samples x of primary and y of
// reissue response times (y empty: y = x, independent and alike). rule
// chooses line 13. O(N log N).
func FitSingleR(x, y []float64, k, b float64, rule QRule) SingleRFit {
	if len(x) == 0 {
		return SingleRFit{}
	}
	x = slices.Sorted(slices.Values(x))
	if len(y) == 0 {
		y = x
	} else {
		y = slices.Sorted(slices.Values(y))
	}
	// Q is the multiset x[lo..hi]; d takes its minimum, t its maximum.
	lo, hi := 0, len(x)-1
	dStar, t := x[lo], x[hi]
	tail := t
	for lo <= hi {
		d := x[lo]
		lo++
		alpha := successRate(x, y, b, t, d)
		for alpha > k && t > d {
			dStar, tail = d, t // reissuing at d meets t (the invariant)
			hi--
			if hi < lo {
				break
			}
			t = x[hi]
			alpha = successRate(x, y, b, t, d)
		}
	}
	q, out := reissueQ(x, b, dStar)
	if rule == QAsPrinted {
		q = 1 - cdf(x, dStar)
	}
	return SingleRFit{D: dStar, Q: q, Tail: tail, Outstanding: out}
}
