package server

import (
	"fmt"
	"sync"
)

// Bounded influence of one reporter (docs/rbcserver.md, "One reporter's
// share"): the RBC is a vote of the app servers' slowest requests, so no app
// server may fill the window alone. shares tracks, per app server, the
// records it added to the window; a batch that would take an app server
// beyond MaxShare times the mean of the other app servers reporting in the
// window is refused whole, as is a batch larger than MaxBatchFraction of the
// ring. Measured against the others (not a fair share that includes the
// reporter itself), the bound holds with two reporters too: with MaxShare 4
// one of two holds 80% of the window at most. Below floor records (1% of
// the ring) an app server is never refused: a window of a few requests,
// unevenly spread, says nothing about forging.
type shares struct {
	mu     sync.Mutex
	window int64 // ns, the RBC window
	apps   map[string]*appShare
}

type appShare struct {
	// batches in arrival order: (at, records); those older than the window
	// are pruned.
	at    []int64
	n     []int
	total int
}

func newShares(window int64) *shares { return &shares{window: window, apps: map[string]*appShare{}} }

// prune drops what left the window before now.
func (s *shares) prune(now int64) (records, active int) {
	for id, a := range s.apps {
		k := 0
		for k < len(a.at) && a.at[k] < now-s.window {
			a.total -= a.n[k]
			k++
		}
		a.at, a.n = a.at[k:], a.n[k:]
		if a.total == 0 {
			delete(s.apps, id)
			continue
		}
		records += a.total
		active++
	}
	return records, active
}

// admit decides whether app may add n records at now, and records them when
// it may. maxShare ≤ 0 admits everything.
func (s *shares) admit(app string, n int, now int64, maxShare float64, floor int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	records, active := s.prune(now)
	a := s.apps[app]
	mine := 0
	if a != nil {
		mine = a.total
	} else {
		active++ // a newcomer counts among the app servers it shares with
	}
	if maxShare > 0 && active > 1 {
		others := records - mine
		limit := max(maxShare*float64(others)/float64(active-1), float64(floor))
		if after := float64(mine + n); after > limit {
			return fmt.Errorf("app server %q would hold %d of the window's records, more than %g × the mean of the "+
				"%d other app servers' (%d records): %d at most (--max-app-share)",
				app, mine+n, maxShare, active-1, others, int(limit))
		}
	}
	if a == nil {
		a = &appShare{}
		s.apps[app] = a
	}
	a.at, a.n = append(a.at, now), append(a.n, n)
	a.total += n
	return nil
}
