package synth

import (
	"math"

	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// What a miniature simulation needs from the generator (docs/simulator.md,
// "Miniature simulation"): the request structure without keys, each
// backend's expected query rate, and each key's probability, size and
// cacheability, so that it can draw the queries of a spatial sample of the
// keys directly instead of drawing every query and keeping a few.

// Batch is one backend's share of a request shape: N queries to backend
// index Backend (into Names).
type Batch struct {
	Backend int
	N       int
}

// NextShape draws the next request's arrival time (ms) and its batches,
// without keys: the same arrival process and request mix as Next, from the
// generator's own random stream. The returned slice is reused by the
// following call. Do not mix Next and NextShape on one generator when the
// requests must match a trace written by Next.
func (g *Generator) NextShape(out []Batch) (tsMs float64, batches []Batch) {
	g.arrive()
	g.n++
	ty := &g.typ[g.types.sample(g.src.Uint64())]
	out = out[:0]
	for j, b := range ty.backends {
		out = append(out, Batch{Backend: b, N: min(ty.batch[j].sample(g.src.Uint64()), g.ks[b].n)})
	}
	return math.Round(g.now*1000) / 1000, out
}

// QueriesPerRequest returns the expected number of queries a request sends
// to backend index b (the mix's batch means; a batch is cut at the key
// space's size, which the expectation ignores).
func (g *Generator) QueriesPerRequest(b int) float64 {
	s := 0.0
	for _, t := range g.mix.Types {
		for j, be := range t.Backends {
			if be == b {
				s += t.Weight * t.BatchMean[j]
			}
		}
	}
	return s
}

// Rate is the generator's base arrival rate, requests/s (RateFactor gives
// the schedule's multiplier of the moment).
func (g *Generator) Rate() float64 { return g.rate }

// Keys is the size of backend index b's key space.
func (g *Generator) Keys(b int) int { return g.ks[b].n }

// KeySize is the object size of key rank at backend index b.
func (g *Generator) KeySize(b, rank int) int64 { return g.ks[b].size(rank) }

// Cacheable reports whether key rank at backend index b may be cached.
func (g *Generator) Cacheable(b, rank int) bool { return g.ks[b].cacheable(rank) }

// SampleStrata is a systematic sample of backend index b's keys for a
// miniature: the ranks in popularity order cut into strata of `every`
// consecutive ranks, one rank of each chosen by hash (the same one every
// time), carrying its stratum's whole probability. Unlike a hash sample, it
// keeps the head of a skewed popularity: a stratum of the most popular
// ranks is always represented, by a key of about their popularity.
func (g *Generator) SampleStrata(b, every int) (ranks []int32, mass []float64) {
	if every < 1 {
		every = 1
	}
	z := &g.ks[b].pop
	per := z.entryProbs()
	n := g.ks[b].n
	cur := 0.0
	for i, sp := range z.span {
		first, width := int(sp>>32), int(sp&0xffffffff)
		p := per[i] / float64(width)
		for r := first; r < first+width; r++ {
			cur += p
			if (r+1)%every == 0 || r == n-1 {
				stratum := r / every
				lo := stratum * every
				pick := lo + int(g.RankHash(b, stratum)%uint64(r+1-lo))
				ranks = append(ranks, int32(pick))
				mass = append(mass, cur)
				cur = 0
			}
		}
	}
	return ranks, mass
}

// entryProbs is the probability the alias table gives each of its entries.
func (z *zipf) entryProbs() []float64 {
	n := len(z.table)
	p := make([]float64, n)
	for col, word := range z.table {
		keep := float64(word>>32) / (1 << 32)
		p[col] += keep / float64(n)
		p[int(word&0xffffffff)] += (1 - keep) / float64(n)
	}
	return p
}

// RankHash is a uniform 64-bit hash of (backend index seed, rank) for
// spatial sampling: the same key is in a sample on every request or on none.
func (g *Generator) RankHash(b, rank int) uint64 {
	return hashing.Mix64(g.ks[b].seed ^ uint64(rank) ^ 0x5bd1e9955bd1e995)
}

// Alias is Walker's alias table over non-negative weights: O(1) draws from
// one uniform 64-bit number (the generator's own tables).
type Alias struct{ a alias }

// NewAlias builds the table; the weights need not sum to 1.
func NewAlias(weights []float64) Alias { return Alias{a: newAlias(weights)} }

// Sample maps a uniform 64-bit number to an index.
func (a Alias) Sample(u uint64) int { return a.a.sample(u) }
