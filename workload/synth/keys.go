package synth

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// alias is Walker's alias table (Vose's construction): O(1) sampling from a
// discrete distribution with one 64-bit random number. Each column is one
// 64-bit word — the probability of keeping the column, scaled to 2^32, in the
// high half and the alias in the low half — so a draw costs one memory
// access, and the draw is branch-free, so that a batch of draws overlaps its
// cache misses.
type alias []uint64

func newAlias(weights []float64) alias {
	n := len(weights)
	a := make(alias, n)
	sum := 0.0
	for _, w := range weights {
		sum += w
	}
	scaled := make([]float64, n)
	small := make([]int, 0, n)
	large := make([]int, 0, n)
	for i, w := range weights {
		scaled[i] = w / sum * float64(n)
		if scaled[i] < 1 {
			small = append(small, i)
		} else {
			large = append(large, i)
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		a[s] = uint64(uint32(scaled[s]*(1<<32)))<<32 | uint64(l)
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// What remains has probability 1 up to rounding: keep it always.
	for _, i := range append(small, large...) {
		a[i] = uint64(math.MaxUint32)<<32 | uint64(i)
	}
	return a
}

// sample maps a uniform 64-bit number to an index: the low half picks a
// column, the high half decides between the column and its alias.
func (a alias) sample(u uint64) int {
	col := (u & 0xffffffff) * uint64(len(a)) >> 32
	w := a[col]
	// keep := u>>32 < w>>32, without a branch.
	keep := ((u >> 32) - (w >> 32)) >> 63
	return int(keep*col + (1-keep)*(w&0xffffffff))
}

// SizeDist is a heavy-tailed object size distribution: log-normal with shape
// Sigma, truncated to [Min, Max], with its scale chosen so that the mean of
// the truncated distribution is Mean. It is tabulated at sizeTable quantiles,
// and a key's size is the table entry its hash selects, so sizes are a pure
// function of (backend, key).
type SizeDist struct {
	Mean, Sigma float64
	Min, Max    int64
	table       []uint32
}

// sizeTableBits sets the table: 2^14 quantiles (64 KB, so look-ups stay in
// cache); the top entry is the 0.99997 quantile.
const sizeTableBits = 14

const sizeTable = 1 << sizeTableBits

// NewSizeDist tabulates the distribution.
func NewSizeDist(mean, sigma float64, lo, hi int64) (*SizeDist, error) {
	switch {
	case lo < 1:
		return nil, fmt.Errorf("min-size %d must be at least 1 byte", lo)
	case hi < lo:
		return nil, fmt.Errorf("max-size %d is below min-size %d", hi, lo)
	case hi > math.MaxUint32:
		return nil, fmt.Errorf("max-size %d is too large", hi)
	case !(mean >= float64(lo)) || mean > float64(hi):
		return nil, fmt.Errorf("mean-size %v must lie within [min-size %d, max-size %d]", mean, lo, hi)
	case !(sigma >= 0) || sigma > 5:
		return nil, fmt.Errorf("size-sigma %v must be within [0, 5]", sigma)
	}
	d := &SizeDist{Mean: mean, Sigma: sigma, Min: lo, Max: hi, table: make([]uint32, sizeTable)}
	// ez[i] = exp(σ·z_i) at the table's quantiles z_i, so that a size is
	// exp(µ)·ez[i] and fitting µ costs no further exponentials.
	ez := make([]float64, sizeTable)
	for i := range ez {
		ez[i] = math.Exp(sigma * math.Sqrt2 * math.Erfinv(2*(float64(i)+0.5)/sizeTable-1))
	}
	fill := func(mu float64) float64 {
		scale := math.Exp(mu)
		s := 0.0
		for i, e := range ez {
			v := math.Round(scale * e)
			v = math.Min(math.Max(v, float64(lo)), float64(hi))
			d.table[i] = uint32(v)
			s += v
		}
		return s / sizeTable
	}
	// The table mean increases with µ; bisect µ for the requested mean.
	a, b := math.Log(float64(lo))-6*sigma-1, math.Log(float64(hi))+6*sigma+1
	for k := 0; k < 60 && b-a > 1e-9; k++ {
		m := (a + b) / 2
		if fill(m) < mean {
			a = m
		} else {
			b = m
		}
	}
	// Of the bracket's ends, keep the one whose mean is closer (sizes are
	// whole bytes, so the mean moves in steps).
	got := fill(a)
	if hi := fill(b); math.Abs(hi-mean) <= math.Abs(got-mean) {
		got = hi
	} else {
		fill(a)
	}
	if math.Abs(got-mean) > 0.005*mean+1 {
		return nil, fmt.Errorf("mean-size %v is not reachable with sizes in [%d, %d] (closest %.0f)", mean, lo, hi, got)
	}
	return d, nil
}

// Size returns the size selected by a uniform 64-bit hash.
func (d *SizeDist) Size(h uint64) int64 { return int64(d.table[h>>(64-sizeTableBits)]) }

// TableMean returns the exact mean size over the table (the mean of the
// sizes of uniformly hashed keys).
func (d *SizeDist) TableMean() float64 {
	s := 0.0
	for _, v := range d.table {
		s += float64(v)
	}
	return s / float64(len(d.table))
}

// Quantile returns the size at quantile q in [0, 1).
func (d *SizeDist) Quantile(q float64) int64 {
	i := int(q * sizeTable)
	return int64(d.table[min(max(i, 0), sizeTable-1)])
}

// MaxKeys bounds a backend's key space. Ranks are int32 and the seen-set
// of a batch is sized by the batch, so the bound is about time, not memory.
const MaxKeys = 1 << 30

// Zipf tables: ranks below zipfHead are drawn individually; beyond, ranks
// are grouped into blocks [a, b) with b ≤ a·zipfBlockRatio, each block drawn
// with its exact Zipf mass and a rank uniformly within it. Within a block
// Zipf probabilities differ by at most zipfBlockRatio^s (< 1% at s ≤ 1), so
// the distribution is Zipf to within that ratio key by key and exact at
// every block boundary, while the table stays small (≈ 4,400 entries, 35 KB,
// for 100,000 keys) and in cache: a draw costs no memory miss.
const (
	zipfHead       = 4096
	zipfBlockRatio = 1.01
	// blocks of at least this many ranks get their mass from the integral
	// of x^-s (relative error below 1e-6 there) instead of a sum.
	zipfIntegralMin = 64
)

// zipf draws ranks 0…n−1 with probability ∝ (rank+1)^-s.
type zipf struct {
	table alias
	// span[i] is entry i's first rank (high 32 bits) and number of ranks
	// (low 32 bits): one load per draw.
	span []uint64
}

func newZipf(n int, s float64) zipf {
	head := min(n, zipfHead)
	var start []int
	for r := 0; r < head; r++ {
		start = append(start, r)
	}
	for a := head; a < n; {
		b := max(a+1, int(float64(a)*zipfBlockRatio))
		b = min(b, n)
		start = append(start, a)
		a = b
	}
	start = append(start, n)
	w := make([]float64, len(start)-1)
	span := make([]uint64, len(start)-1)
	for i := range w {
		a, b := start[i], start[i+1]
		w[i] = zipfMass(a, b, s)
		span[i] = uint64(a)<<32 | uint64(b-a)
	}
	return zipf{table: newAlias(w), span: span}
}

// zipfMass is Σ_{r=a}^{b-1} (r+1)^-s.
func zipfMass(a, b int, s float64) float64 {
	if b-a < zipfIntegralMin {
		m := 0.0
		for r := a; r < b; r++ {
			m += math.Pow(float64(r+1), -s)
		}
		return m
	}
	// Midpoint rule: ∫ over [a+½, b+½] of x^-s.
	lo, hi := float64(a)+0.5, float64(b)+0.5
	if s == 1 {
		return math.Log(hi / lo)
	}
	return (math.Pow(hi, 1-s) - math.Pow(lo, 1-s)) / (1 - s)
}

// sample maps a uniform 64-bit number to a rank. A rank inside a block is
// placed by a second number derived from u by SplitMix64's bijective mix
// (its bits are independent of the ones the table used, for all practical
// purposes).
func (z *zipf) sample(u uint64) int {
	sp := z.span[z.table.sample(u)]
	// Branch-free: for a single rank (width 1) the offset is 0.
	return int(sp>>32 + (hashing.Mix64(u)>>32)*(sp&0xffffffff)>>32)
}

// prob returns the exact probability the table gives a rank.
func (z *zipf) prob(rank int) float64 {
	n := len(z.table)
	i := sort.Search(n, func(i int) bool { return int(z.span[i]>>32+z.span[i]&0xffffffff) > rank })
	p := 0.0
	for col, word := range z.table {
		keep := float64(word>>32) / (1 << 32)
		if col == i {
			p += keep / float64(n)
		}
		if int(word&0xffffffff) == i {
			p += (1 - keep) / float64(n)
		}
	}
	return p / float64(z.span[i]&0xffffffff)
}

// keyspace is one backend's keys: Zipf popularity over ranks 0…n−1, the key
// string of rank r is r in base 36, and a key's size and cacheability are
// hashes of (backend name, rank).
type keyspace struct {
	n      int
	pop    zipf
	seed   uint64 // FNV-1a of the backend name
	sizes  *SizeDist
	uncach uint64 // keys whose second hash is below this are uncacheable
}

func newKeyspace(name string, n int, s float64, sizes *SizeDist, uncacheable float64) (*keyspace, error) {
	if n < 1 {
		return nil, fmt.Errorf("keys: %d must be at least 1", n)
	}
	if n > MaxKeys {
		return nil, fmt.Errorf("keys: %d is more than the %d a backend may have", n, MaxKeys)
	}
	if !(s >= 0) || s > 10 {
		return nil, fmt.Errorf("zipf: exponent %v must be within [0, 10]", s)
	}
	if !(uncacheable >= 0 && uncacheable <= 1) {
		return nil, errors.New("uncacheable: fraction must be within [0, 1]")
	}
	ks := &keyspace{n: n, pop: newZipf(n, s), seed: hashing.FNV1a(name), sizes: sizes}
	switch {
	case uncacheable >= 1:
		ks.uncach = math.MaxUint64
	case uncacheable > 0:
		ks.uncach = uint64(uncacheable * (1 << 64))
	}
	return ks, nil
}

// KeyString returns the key of a rank (base 36).
func KeyString(rank int) string { return strconv.FormatUint(uint64(rank), 36) }

// size returns the object size of a rank.
func (k *keyspace) size(rank int) int64 { return k.sizes.Size(hashing.Mix64(k.seed ^ uint64(rank))) }

// cacheable reports whether a rank may be cached.
func (k *keyspace) cacheable(rank int) bool {
	return k.uncach == 0 || hashing.Mix64(k.seed^uint64(rank)^0xc4ceb9fe1a85ec53) >= k.uncach
}

// KeySize returns the object size of key rank at the named backend with the
// given size distribution: the function the generator uses.
func KeySize(backend string, rank int, d *SizeDist) int64 {
	return d.Size(hashing.Mix64(hashing.FNV1a(backend) ^ uint64(rank)))
}

// SizeOf returns the synthesized size of any key string at the named
// backend: a quantile of the backend's size distribution (--mean-size,
// --size-sigma, --min-size, --max-size) chosen by a hash of (backend, key),
// so the same key always gets the same size. `tracegen import` gives it to a
// real key whose stream has no size for it. ok is false for a backend the
// generator does not have.
func (g *Generator) SizeOf(backend, key string) (size int64, ok bool) {
	for i, name := range g.names {
		if name == backend {
			ks := g.ks[i]
			return ks.sizes.Size(hashing.Mix64(ks.seed ^ hashing.Mix64(hashing.FNV1a(key)^0x6b6579737472))), true // "keystr"
		}
	}
	return 0, false
}
