package dispatch

import "math/rand/v2"

// Replica choices the policies share. Each considers the usable replicas
// (Machine.Usable) to which no copy of b went yet (b may be nil), and
// returns -1 when there is none.

// PickRandom returns one of them uniformly at random.
func (m *Machine) PickRandom(r *rand.Rand, b *Batch) int {
	pick, seen := -1, 0
	for i := 0; i < m.n; i++ {
		if !m.Usable(i) || (b != nil && b.Tried(i)) {
			continue
		}
		seen++
		if r.IntN(seen) == 0 { // reservoir sampling of one
			pick = i
		}
	}
	return pick
}

// PickLeast returns the one with the fewest open copies, ties broken at
// random; with limit > 0 only those with fewer than limit open copies.
func (m *Machine) PickLeast(r *rand.Rand, b *Batch, limit int) int {
	pick, best, ties := -1, 0, 0
	for i := 0; i < m.n; i++ {
		if !m.Usable(i) || (b != nil && b.Tried(i)) {
			continue
		}
		f := m.flight[i]
		if limit > 0 && f >= limit {
			continue
		}
		switch {
		case pick < 0 || f < best:
			pick, best, ties = i, f, 1
		case f == best:
			ties++
			if r.IntN(ties) == 0 {
				pick = i
			}
		}
	}
	return pick
}

// PickIdle returns, at random, one with no open copy at all (idle, as far
// as this Machine knows).
func (m *Machine) PickIdle(r *rand.Rand, b *Batch) int {
	pick, seen := -1, 0
	for i := 0; i < m.n; i++ {
		if !m.Usable(i) || (b != nil && b.Tried(i)) || m.flight[i] > 0 {
			continue
		}
		seen++
		if r.IntN(seen) == 0 {
			pick = i
		}
	}
	return pick
}
