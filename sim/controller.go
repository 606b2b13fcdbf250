package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/robinhoodcache/robinhood/lib/model"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
)

// startPolicies starts the policy server and opens every app server with a
// partitioned cache on it, at its topology and with its timeline.
func (s *Sim) startPolicies() error {
	var controlled []*app
	for _, a := range s.apps {
		if a.controlled {
			controlled = append(controlled, a)
		}
	}
	if len(controlled) == 0 {
		return nil
	}
	var ps *PolicyServer
	var err error
	if s.cfg.PolicyServer != "" {
		ps, err = DialPolicyServer(s.cfg.PolicyServer)
	} else {
		ps, err = StartPolicyServer(s.cfg.Controller)
	}
	if err != nil {
		return err
	}
	s.policy = ps
	for _, a := range controlled {
		ans, err := ps.Open(s.cfg.TopologyPath, a.id, filepath.Join(s.cfg.OutDir, "controller-"+a.id+".jsonl"))
		if err != nil {
			return err
		}
		iv := time.Duration(ans.IntervalS * float64(time.Second))
		if iv <= 0 {
			return fmt.Errorf("policy server: app server %s has interval %vs", a.id, ans.IntervalS)
		}
		if s.interval == 0 || iv < s.interval {
			s.interval = iv
		}
	}
	return nil
}

// report1s is the app servers' one-second report: statistics to the store,
// RBC records to the ring; then a line of the RBC timeline.
func (s *Sim) report1s() {
	s.report()
	at := s.epoch.Add(s.eng.Now()).UnixNano()
	for i := range s.apps {
		if len(s.pendingLat[i]) > 0 {
			s.ring.Append(at, s.pendingLat[i], s.pendingBe[i])
			s.pendingLat[i], s.pendingBe[i] = s.pendingLat[i][:0], s.pendingBe[i][:0]
		}
	}
	res := s.rbcNow()
	line, _ := json.Marshal(map[string]any{"t": s.eng.Now().Seconds(), "unix": float64(at) / 1e9, "rbc": s.rbcCounts(res),
		"window_requests": res.N, "p99_latency_us": res.P99, "backends": s.truth()})
	s.rbcOut.Write(append(line, '\n'))
}

// backendTruth is what a backend really was in the last second: what an
// online estimate of it is checked against (docs/simulator.md).
type backendTruth struct {
	// Capacity is lib/model.Capacity of its replicas' limits, summed
	// (queries/s); nil when they bound nothing.
	Capacity *float64 `json:"capacity"`
	// Sent is the queries sent to it in the second.
	Sent uint64 `json:"sent"`
}

// truth is every backend's truth of the last second (an exact run only: a
// miniature's backends are fluid), and starts the next second's counts.
func (s *Sim) truth() map[string]backendTruth {
	if s.miniature() {
		return nil
	}
	out := make(map[string]backendTruth, len(s.backends))
	for _, b := range s.backends {
		c := 0.0
		for _, r := range b.fleet.reps {
			c += model.Capacity(r.model.Limits())
		}
		t := backendTruth{Sent: b.sent}
		if !math.IsInf(c, 1) {
			t.Capacity = &c
		}
		out[b.name] = t
		b.sent = 0
	}
	return out
}

// rbcCounts is an RBC result by backend name, 0 for a backend that blocked
// nothing.
func (s *Sim) rbcCounts(res rbc.Result) map[string]uint64 {
	counts := make(map[string]uint64, len(s.backends))
	for _, b := range s.backends {
		counts[b.name] = 0
	}
	for _, c := range res.Backends {
		if b := s.byID[c.Backend]; b != nil {
			counts[b.name] = c.Blocking
		}
	}
	return counts
}

// rbcNow is the RBC over the RBC server's window, now.
func (s *Sim) rbcNow() rbc.Result {
	at := s.epoch.Add(s.eng.Now()).UnixNano()
	since := at - int64(s.cfg.Topology.RBCServer.Window)
	s.scratchLat, s.scratchBe = s.ring.Window(since, s.scratchLat, s.scratchBe)
	res, err := s.calc.Compute(s.scratchLat, s.scratchBe, s.rbcP)
	if err != nil && s.err == nil {
		s.err = err
	}
	return res
}

// controllerTick asks the policy of every partitioned app server for its
// limits and applies them to the caches at once.
func (s *Sim) controllerTick() {
	if s.err != nil {
		return
	}
	s.ticks++
	now := s.epoch.Add(s.eng.Now())
	res := s.rbcNow()
	window := time.Duration(s.cfg.Topology.RBCServer.Window)
	total, perApp := s.store.Window(now, window)
	// One RBC snapshot and one statistics window for every app server, as
	// they read the same RBC server.
	snap := &pb.PolicyRBCSnapshot{Counts: s.rbcCounts(res), WindowRequests: uint64(res.N), BandRequests: res.Band, P99LatencyUs: res.P99}
	all := s.statsByName(total)
	for _, a := range s.apps {
		if !a.controlled {
			continue
		}
		req := &pb.PolicyTickRequest{AppServer: a.id, Now: float64(now.UnixNano()) / 1e9, Rbc: snap,
			Partitions: map[string]*pb.PolicyPartitionSample{}, Stats: all, Local: s.statsByName(perApp[a.id])}
		for _, p := range a.parts {
			if p == nil {
				continue
			}
			c := p.cache
			sample := &pb.PolicyPartitionSample{LimitBytes: uint64(s.unscale(c.Limit())), MallocedBytes: uint64(s.unscale(c.Malloced())),
				SlabClasses: uint32(c.Classes()),
				ItemBytes:   uint64(s.unscale(c.ItemBytes())), Items: uint64(c.Len()), Evictions: c.Evictions, GetHits: c.Hits, GetMisses: c.Misses}
			last := s.lastHM[p]
			if dh, dm := c.Hits-last[0], c.Misses-last[1]; dh+dm > 0 {
				r := float64(dh) / float64(dh+dm)
				sample.HitRatio = &r
			}
			s.lastHM[p] = [2]uint64{c.Hits, c.Misses}
			req.Partitions[p.backend.name] = sample
		}
		ans, err := s.policy.Tick(req)
		if err != nil {
			s.err = err
			return
		}
		for name, mb := range ans.LimitsMb {
			b := s.byName[name]
			if b == nil || a.parts[b.id] == nil {
				s.err = fmt.Errorf("policy server: a limit for unknown partition %q of %s", name, a.id)
				return
			}
			a.parts[b.id].cache.SetLimit(s.scale(int64(mb) << 20))
		}
	}
}

// statsByName is queryStats of every summary, by its backend's name.
func (s *Sim) statsByName(sums []stats.Summary) map[string]*pb.PolicyQueryStats {
	out := map[string]*pb.PolicyQueryStats{}
	for _, sum := range sums {
		if b := s.byID[sum.Backend]; b != nil {
			out[b.name] = s.queryStats(sum)
		}
	}
	return out
}

// queryStats is GetStats' summary of one backend (sizes in the full
// system's bytes).
func (s *Sim) queryStats(sum stats.Summary) *pb.PolicyQueryStats {
	us := func(v float64) uint32 { return uint32(min(math.Round(v), math.MaxUint32)) }
	dist := sum.Distance.Sparse()
	return &pb.PolicyQueryStats{Hits: sum.Hits, Misses: sum.Misses, ShadowHits: sum.ShadowHits,
		DistanceBucket: dist.Index, DistanceCount: dist.Count,
		ShadowBytes: uint64(s.unscale(int64(sum.ShadowBytes))), Queries: sum.Queries(),
		P50QueryLatencyUs: us(sum.Latency.Quantile(0.5)), P99QueryLatencyUs: us(sum.Latency.Quantile(0.99)),
		P50BackendLatencyUs: us(sum.BackendQuantile(0.5)), P90BackendLatencyUs: us(sum.BackendQuantile(0.9)),
		LimitBytes: uint64(s.unscale(int64(sum.LimitBytes)))}
}
