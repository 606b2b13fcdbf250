package model

import (
	"math"

	"github.com/robinhoodcache/robinhood/lib/loghist"
)

// MissCurve is the miss ratio at 0 … len(hist)−2 MiB from a histogram of
// the accesses by the first MiB they hit at (hist[k]: the accesses whose
// stack distance is in (k−1, k] MiB; the last entry: never, a first access
// or one deeper than the histogram). An empty histogram misses everywhere.
func MissCurve(hist []float64) []float64 {
	out := make([]float64, len(hist)-1)
	total := 0.0
	for _, v := range hist {
		total += v
	}
	if total == 0 {
		for m := range out {
			out[m] = 1
		}
		return out
	}
	later := hist[len(hist)-1]
	for m := len(out) - 1; m >= 0; m-- {
		out[m] = later / total
		later += hist[m]
	}
	return out
}

// MissAt is a miss-ratio curve (at whole MiB) read at mb MiB, interpolated
// linearly; beyond its ends, its end. An empty curve misses everything.
func MissAt(curve []float64, mb float64) float64 {
	if len(curve) == 0 {
		return 1
	}
	e := math.Min(math.Max(mb, 0), float64(len(curve)-1))
	i := int(e)
	mr := curve[i]
	if i+1 < len(curve) {
		mr += (e - float64(i)) * (curve[i+1] - curve[i])
	}
	return mr
}

// DistanceUnit is the unit of a stack-distance histogram's values
// (appserver/shadow, BackendStats.distance_*): KiB, in lib/loghist's
// buckets (bucket i holds [1.04^i, 1.04^(i+1)) KiB; the last one, 1.04^469
// KiB ≈ 93 GiB and beyond, holds the accesses that never hit).
const DistanceUnit = 1024

// Never is a distance, in DistanceUnit, that lands in the histogram's last
// bucket: a first access, or one deeper than the model remembers.
const Never = 1e12

// CurveFromDistances is the miss-ratio curve at 0 … maxMB MiB of the
// accesses a stack-distance histogram counts (loghist buckets of
// DistanceUnit; the last bucket: never). A bucket's accesses are spread
// evenly over its span (linear in bytes), so the curve is continuous.
func CurveFromDistances(h loghist.Counts, maxMB int) []float64 {
	hist := make([]float64, maxMB+2)
	for idx, n := range h {
		if n == 0 {
			continue
		}
		if int(idx) >= loghist.Buckets-1 {
			hist[maxMB+1] += float64(n)
			continue
		}
		lo := math.Pow(loghist.Gamma, float64(idx)) * DistanceUnit / MiB
		hi := lo * loghist.Gamma
		if idx == 0 {
			lo = 0
		}
		spreadMiB(hist, lo, hi, float64(n))
	}
	return MissCurve(hist)
}

// spreadMiB adds n accesses with stack distances spread evenly over
// (lo, hi] MiB to a first-hit histogram (hist[k]: (k−1, k] MiB; the last
// entry: beyond).
func spreadMiB(hist []float64, lo, hi, n float64) {
	last := len(hist) - 1
	for k := int(math.Ceil(lo)); ; k++ {
		a, b := math.Max(lo, float64(k-1)), math.Min(hi, float64(k))
		if k >= last {
			hist[last] += n * (hi - math.Max(lo, float64(last-1))) / (hi - lo)
			return
		}
		if b > a {
			hist[max(k, 0)] += n * (b - a) / (hi - lo)
		}
		if float64(k) >= hi {
			return
		}
	}
}
