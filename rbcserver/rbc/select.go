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
// It is quickselect with a median-of-three pivot drawn at pseudo-random
// positions and a branch-free Lomuto partition (on random latencies a
// branching partition mispredicts about every other comparison and runs at
// half the speed). Ties are handled by a second pass that gathers the
// elements equal to the pivot when they are a sizeable part of the range,
// so windows full of equal latencies still shrink quickly. If the range
// fails to shrink within a generous number of rounds (an adversarial
// input), the rest is sorted, which bounds the worst case by O(n log n).
func selectKth(a []uint32, k int) uint32 {
	return selectKthRounds(a, k, 4*bits.Len(uint(len(a)))+16)
}

// selectKthRounds is selectKth with the number of partitioning rounds
// before the sorting fallback as a parameter (tests exercise the fallback).
func selectKthRounds(a []uint32, k, rounds int) uint32 {
	lo, hi := 0, len(a) // the answer is in a[lo:hi]
	rng := uint64(len(a))*0x9E3779B97F4A7C15 + 1
	for hi-lo > 16 {
		if rounds == 0 {
			slices.Sort(a[lo:hi])
			return a[k]
		}
		rounds--
		span := uint64(hi - lo)
		rng = xorshift(rng)
		i0 := lo + int(rng%span)
		rng = xorshift(rng)
		i1 := lo + int(rng%span)
		rng = xorshift(rng)
		i2 := lo + int(rng%span)
		pivot := median3(a[i0], a[i1], a[i2])

		// a[lo:j] < pivot ≤ a[j:hi]; eq elements equal the pivot.
		j, eq := partitionLess(a[lo:hi], pivot)
		j += lo
		if k < j {
			hi = j
			continue
		}
		if eq > 1 && eq*8 > hi-j {
			// Many ties: a[j:m] == pivot < a[m:hi].
			m := j + partitionLessEq(a[j:hi], pivot)
			if k < m {
				return pivot
			}
			lo = m
			continue
		}
		lo = j
	}
	insertionSort(a[lo:hi])
	return a[k]
}

// partitionLess moves the elements below p to the front of a, keeping the
// others behind them, and returns how many are below p and how many equal
// it. The loop has no data-dependent branch.
func partitionLess(a []uint32, p uint32) (below, equal int) {
	for i, v := range a {
		a[i] = a[below]
		a[below] = v
		below += b2i(v < p)
		equal += b2i(v == p)
	}
	return below, equal
}

// partitionLessEq moves the elements ≤ p to the front of a and returns how
// many there are.
func partitionLessEq(a []uint32, p uint32) (n int) {
	for i, v := range a {
		a[i] = a[n]
		a[n] = v
		n += b2i(v <= p)
	}
	return n
}

// b2i is 1 for true; the compiler turns it into a flag-setting instruction.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
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
