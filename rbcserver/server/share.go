package server

import (
	"sync"
)

// Bounded influence of one reporter (docs/rbcserver.md, "One reporter's
// share"): the RBC is a vote of the app servers' slowest requests, so no app
// server may fill the window alone. shares tracks, per app server, the
// records it offered and the records stored in the window. An app server
// may hold at most MaxShare times the mean of what the other app servers
// reporting in the window hold (or floor records, 1% of the ring, if that is
// more). Beyond it its records are thinned, not refused: each batch keeps
// the fraction limit/offered of its records, evenly spread over the batch,
// so the stored ones are a uniform sample of the app server's traffic that
// weighs as much as its bound allows, and an honest app server with more
// traffic than the others (a larger instance, a canary) never has a stream
// ended nor its statistics dropped. Measured against the others (not a fair
// share that includes the reporter itself), the bound holds with two
// reporters too: with MaxShare 4 one of two holds 80% of the window at most.
type shares struct {
	mu     sync.Mutex
	window int64 // ns, the RBC window
	apps   map[string]*appShare
}

type appShare struct {
	// batches in arrival order: (at, records offered, records kept); those
	// older than the window are pruned.
	at             []int64
	offered, kept  []int
	offeredN, keep int // the window's totals
	// credit is the fraction of a record owed to the next batch, so that
	// small batches are thinned by the same fraction as large ones.
	credit float64
}

func newShares(window int64) *shares { return &shares{window: window, apps: map[string]*appShare{}} }

// prune drops what left the window before now; records is what the app
// servers hold in the window, active how many of them offered any.
func (s *shares) prune(now int64) (records, active int) {
	for id, a := range s.apps {
		k := 0
		for k < len(a.at) && a.at[k] < now-s.window {
			a.offeredN -= a.offered[k]
			a.keep -= a.kept[k]
			k++
		}
		a.at, a.offered, a.kept = a.at[k:], a.offered[k:], a.kept[k:]
		if a.offeredN == 0 {
			delete(s.apps, id)
			continue
		}
		records += a.keep
		active++
	}
	return records, active
}

// admit decides how many of the n records app offers at now the window
// takes, and records that: all of them within the app server's bound (or
// when maxShare ≤ 0), else the fraction of them its bound allows. limit is
// the bound it was held to (0 without one).
func (s *shares) admit(app string, n int, now int64, maxShare float64, floor int) (keep int, limit float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	records, active := s.prune(now)
	a := s.apps[app]
	if a == nil {
		a = &appShare{}
		s.apps[app] = a
		active++ // a newcomer counts among the app servers it shares with
	}
	keep = n
	if maxShare > 0 && active > 1 {
		others := records - a.keep
		limit = max(maxShare*float64(others)/float64(active-1), float64(floor))
		if offered := float64(a.offeredN + n); offered > limit {
			a.credit += float64(n) * limit / offered
			keep = min(int(a.credit), n, max(int(limit)-a.keep, 0))
			a.credit = min(max(a.credit-float64(keep), 0), 1)
		}
	}
	a.at, a.offered, a.kept = append(a.at, now), append(a.offered, n), append(a.kept, keep)
	a.offeredN += n
	a.keep += keep
	return keep, limit
}

// thin keeps keep of the records (lat[i], be[i]), evenly spread over them
// (the middle of each of keep equal runs), in place.
func thin(lat, be []uint32, keep int) ([]uint32, []uint32) {
	n := len(lat)
	if keep >= n {
		return lat, be
	}
	for i := range keep {
		j := (2*i + 1) * n / (2 * keep)
		lat[i], be[i] = lat[j], be[j]
	}
	return lat[:keep], be[:keep]
}
