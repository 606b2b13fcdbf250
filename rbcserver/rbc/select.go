package rbc

import (
	"math/bits"
	"slices"
)

// selectRanks finds the values at several 1-based ranks of a, writing the
// value of rank ranks[i] to out[i]. It permutes a. Every rank must be in
// [1, len(a)].
//
// The ranks are selected in ascending order, each one only among the
// elements at or above the previous one: after selecting 0-based position k,
// a[k:] holds exactly the elements of ranks k+1…n, so later selections work
// on a shrinking suffix. For the usual P50, P98.5, P99, P99.5 the work is
// about one pass over a plus a few passes over its upper half.
func selectRanks(a []uint32, ranks []int, out []uint32) {
	order := make([]int, len(ranks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int { return ranks[x] - ranks[y] })
	base := 0
	for _, i := range order {
		k := ranks[i] - 1
		out[i] = selectKth(a[base:], k-base)
		base = k
	}
}

// selectKth rearranges a so that a[k] holds the value of 0-based rank k,
// every element before it is ≤ a[k] and every element after it is ≥ a[k],
// and returns a[k]. Expected time O(len(a)).
//
// It is Hoare's FIND with a median-of-three pivot drawn at pseudo-random
// positions: equal keys stop both scans, so windows full of ties still
// split evenly. If the partitions fail to shrink within a generous number
// of rounds (an adversarial input), the remaining range is sorted, which
// bounds the worst case by O(n log n).
func selectKth(a []uint32, k int) uint32 {
	lo, hi := 0, len(a)-1
	rounds := 4*bits.Len(uint(len(a))) + 16
	rng := uint64(len(a))*0x9E3779B97F4A7C15 + 1
	for hi-lo >= 16 {
		if rounds == 0 {
			slices.Sort(a[lo : hi+1])
			return a[k]
		}
		rounds--
		span := uint64(hi - lo + 1)
		rng = xorshift(rng)
		i0 := lo + int(rng%span)
		rng = xorshift(rng)
		i1 := lo + int(rng%span)
		rng = xorshift(rng)
		i2 := lo + int(rng%span)
		pivot := median3(a[i0], a[i1], a[i2])

		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		// Now a[lo..j] ≤ pivot ≤ a[i..hi] and every element between j and i
		// equals the pivot.
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	insertionSort(a[lo : hi+1])
	return a[k]
}

func insertionSort(a []uint32) {
	for i := 1; i < len(a); i++ {
		v := a[i]
		j := i
		for j > 0 && a[j-1] > v {
			a[j] = a[j-1]
			j--
		}
		a[j] = v
	}
}

func median3(x, y, z uint32) uint32 {
	if x > y {
		x, y = y, x
	}
	if y > z {
		y = z
	}
	return max(x, y)
}

func xorshift(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}
