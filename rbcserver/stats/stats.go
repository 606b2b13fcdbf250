// Package stats keeps the per-backend statistics app servers report with
// their batches — cache hits, misses, shadow hits, query latency histograms
// — in one-second slots, per app server, and sums any window of them. It is
// the statistics half of the RBC server (paper §5.1: the centralized
// statistics server the competitors share); it has no clock and no I/O.
package stats

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/robinhoodcache/robinhood/lib/loghist"
)

// Report is one app server's numbers for one backend over one batch interval.
type Report struct {
	Backend      uint32
	Hits, Misses uint64
	ShadowHits   uint64
	ShadowBytes  uint64
	Latency      loghist.Sparse
	LimitBytes   uint64
	// Distance is the cacheable queries' stack distances in limit bytes
	// (appserver/shadow; BackendStats.distance_*).
	Distance loghist.Sparse
}

// Validate checks a report's histogram encoding and backend id.
func (r *Report) Validate(maxBackends int) error {
	if r.Backend >= uint32(maxBackends) {
		return fmt.Errorf("backend %d is not below --max-backends %d", r.Backend, maxBackends)
	}
	if err := r.Latency.Validate("latency"); err != nil {
		return fmt.Errorf("backend %d: %v", r.Backend, err)
	}
	if err := r.Distance.Validate("distance"); err != nil {
		return fmt.Errorf("backend %d: %v", r.Backend, err)
	}
	return nil
}

// Summary is one backend's numbers over a window.
type Summary struct {
	Backend      uint32
	Hits, Misses uint64
	ShadowHits   uint64
	ShadowBytes  uint64
	Latency      loghist.Counts
	LimitBytes   uint64
	// Distance is the merged stack-distance histogram (Report.Distance).
	Distance loghist.Counts
}

// Queries is the number of latencies counted.
func (s *Summary) Queries() uint64 { return s.Latency.Total() }

// BackendQuantile is the q-quantile of the latency of the queries that
// reached the backend: the misses and the uncacheable queries, every query
// but the hits. A hit is a cache lookup, faster than any backend call, so
// those queries are the slowest Queries − Hits of the histogram, and their
// q-quantile is its quantile 1 − (1 − q)·(Queries − Hits)/Queries. 0 when no
// query reached the backend.
func (s *Summary) BackendQuantile(q float64) float64 {
	n := s.Queries()
	if n == 0 || s.Hits >= n {
		return 0
	}
	share := float64(n-s.Hits) / float64(n)
	return s.Latency.Quantile(1 - (1-q)*share)
}

type agg struct {
	hits, misses, shadowHits uint64
	shadowBytes, limit       uint64
	latency, distance        loghist.Counts
}

type slot struct {
	sec int64 // Unix second; 0 = empty
	per map[string]map[uint32]*agg
}

// Store holds the last Retention seconds of reports. Safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	slots []slot
}

// New keeps retention (rounded up to whole seconds, at least one).
func New(retention time.Duration) *Store {
	n := int((retention + time.Second - 1) / time.Second)
	return &Store{slots: make([]slot, max(n, 1))}
}

// Retention is how far back a window may reach.
func (s *Store) Retention() time.Duration { return time.Duration(len(s.slots)) * time.Second }

// Add files reports that arrived at time at.
func (s *Store) Add(at time.Time, app string, reports []Report) {
	if len(reports) == 0 {
		return
	}
	sec := at.Unix()
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &s.slots[int(sec%int64(len(s.slots)))]
	if sl.sec != sec {
		*sl = slot{sec: sec, per: map[string]map[uint32]*agg{}}
	}
	m := sl.per[app]
	if m == nil {
		m = map[uint32]*agg{}
		sl.per[app] = m
	}
	for i := range reports {
		r := &reports[i]
		a := m[r.Backend]
		if a == nil {
			a = &agg{latency: loghist.Counts{}, distance: loghist.Counts{}}
			m[r.Backend] = a
		}
		a.hits += r.Hits
		a.misses += r.Misses
		a.shadowHits += r.ShadowHits
		if r.ShadowBytes > 0 {
			a.shadowBytes = r.ShadowBytes
		}
		if r.LimitBytes > 0 {
			a.limit = r.LimitBytes
		}
		a.latency.Add(r.Latency)
		a.distance.Add(r.Distance)
	}
}

// Window sums the reports that arrived in (now − window, now], per backend
// over every app server and per app server. Backends and app servers are in
// increasing order.
func (s *Store) Window(now time.Time, window time.Duration) (total []Summary, perApp map[string][]Summary) {
	from := now.Add(-window).Unix()
	to := now.Unix()
	all := map[uint32]*Summary{}
	apps := map[string]map[uint32]*Summary{}
	add := func(m map[uint32]*Summary, b uint32, a *agg, sec int64, latest map[uint32]int64) {
		sum := m[b]
		if sum == nil {
			sum = &Summary{Backend: b, Latency: loghist.Counts{}, Distance: loghist.Counts{}}
			m[b] = sum
		}
		sum.Hits += a.hits
		sum.Misses += a.misses
		sum.ShadowHits += a.shadowHits
		sum.Latency.Merge(a.latency)
		sum.Distance.Merge(a.distance)
		if sec >= latest[b] {
			latest[b] = sec
			if a.shadowBytes > 0 {
				sum.ShadowBytes = a.shadowBytes
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	allLatest := map[uint32]int64{}
	limits := map[string]map[uint32][2]int64{} // app → backend → (sec, limit), the latest
	appLatest := map[string]map[uint32]int64{}
	for _, sl := range s.slots {
		if sl.sec == 0 || sl.sec <= from || sl.sec > to {
			continue
		}
		for app, m := range sl.per {
			if apps[app] == nil {
				apps[app] = map[uint32]*Summary{}
				appLatest[app] = map[uint32]int64{}
				limits[app] = map[uint32][2]int64{}
			}
			for b, a := range m {
				add(all, b, a, sl.sec, allLatest)
				add(apps[app], b, a, sl.sec, appLatest[app])
				if l := limits[app][b]; a.limit > 0 && sl.sec >= l[0] {
					limits[app][b] = [2]int64{sl.sec, int64(a.limit)}
				}
			}
		}
	}
	for app, m := range apps {
		for b, l := range limits[app] {
			m[b].LimitBytes = uint64(l[1])
			all[b].LimitBytes += uint64(l[1])
		}
	}
	total = sorted(all)
	perApp = map[string][]Summary{}
	for app, m := range apps {
		perApp[app] = sorted(m)
	}
	return total, perApp
}

func sorted(m map[uint32]*Summary) []Summary {
	out := make([]Summary, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Backend < out[j].Backend })
	return out
}
