package stats

import (
	"math"
	"math/bits"

	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// hllP is the HyperLogLog precision: 2^14 one-byte registers (16 KB per
// backend), a standard error of 1.04/√2^14 ≈ 0.8%.
const hllP = 14

// hll is a HyperLogLog sketch (Flajolet et al. 2007) over 64-bit hashes.
type hll struct{ reg []uint8 }

func newHLL() *hll { return &hll{reg: make([]uint8, 1<<hllP)} }

func (h *hll) add(x uint64) {
	idx := x >> (64 - hllP)
	rest := x<<hllP | 1<<(hllP-1) // the guard bit bounds the rank
	rank := uint8(bits.LeadingZeros64(rest)) + 1
	if rank > h.reg[idx] {
		h.reg[idx] = rank
	}
}

func (h *hll) merge(o *hll) {
	for i, v := range o.reg {
		if v > h.reg[i] {
			h.reg[i] = v
		}
	}
}

// estimate returns the cardinality estimate, with linear counting for small
// cardinalities.
func (h *hll) estimate() float64 {
	m := float64(len(h.reg))
	sum, zeros := 0.0, 0
	for _, v := range h.reg {
		sum += math.Ldexp(1, -int(v))
		if v == 0 {
			zeros++
		}
	}
	alpha := 0.7213 / (1 + 1.079/m)
	e := alpha * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		return m * math.Log(m/float64(zeros))
	}
	return e
}

// distinct counts distinct keys exactly (by 64-bit hash: exact up to hash
// collisions, which are negligible below billions of keys) until it holds
// exactLimit of them, then switches to a HyperLogLog sketch.
type distinct struct {
	exact map[uint64]struct{}
	hll   *hll
}

// exactLimit bounds the exact set per backend (about 40 MB of map).
const exactLimit = 1 << 21

func newDistinct() *distinct { return &distinct{exact: map[uint64]struct{}{}} }

func (d *distinct) add(key string) {
	x := hash(key)
	if d.hll != nil {
		d.hll.add(x)
		return
	}
	d.exact[x] = struct{}{}
	if len(d.exact) > exactLimit {
		d.toSketch()
	}
}

func (d *distinct) toSketch() {
	d.hll = newHLL()
	for x := range d.exact {
		d.hll.add(x)
	}
	d.exact = nil
}

func (d *distinct) merge(o *distinct) {
	switch {
	case d.hll == nil && o.hll == nil:
		for x := range o.exact {
			d.exact[x] = struct{}{}
		}
		if len(d.exact) > exactLimit {
			d.toSketch()
		}
	case d.hll == nil:
		d.toSketch()
		d.hll.merge(o.hll)
	case o.hll == nil:
		for x := range o.exact {
			d.hll.add(x)
		}
	default:
		d.hll.merge(o.hll)
	}
}

// count returns the number of distinct keys and whether it is exact.
func (d *distinct) count() (int64, bool) {
	if d.hll == nil {
		return int64(len(d.exact)), true
	}
	return int64(math.Round(d.hll.estimate())), false
}

// hash is FNV-1a 64 followed by SplitMix64's finalizer, so that the bits
// HyperLogLog reads are well mixed.
func hash(s string) uint64 {
	return hashing.SplitMixFinal(hashing.FNV1a(s))
}
