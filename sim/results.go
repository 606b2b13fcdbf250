package sim

import (
	"path/filepath"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
)

// Result is sim.json: what the simulator did besides the replay summary.
type Result struct {
	SimulatedS      float64               `json:"simulated_s"`
	Sample          float64               `json:"sample"`
	Engine          string                `json:"engine"`
	RequestSample   float64               `json:"request_sample,omitempty"`
	AppsSimulated   int                   `json:"apps_simulated,omitempty"`
	CacheAccesses   uint64                `json:"cache_accesses,omitempty"`
	WallS           float64               `json:"wall_s"`
	Requests        int64                 `json:"requests"`
	Queries         uint64                `json:"queries"`
	BackendQueries  uint64                `json:"backend_queries"`
	Events          uint64                `json:"events"`
	QueriesPerSec   float64               `json:"queries_per_wall_s"`
	HitRatio        map[string]float64    `json:"hit_ratio"`
	OverallHitRatio *float64              `json:"overall_hit_ratio"`
	Timeouts        uint64                `json:"backend_timeouts"`
	ControllerTicks int                   `json:"controller_ticks"`
	Calibration     costmodel.Calibration `json:"calibration"`
	// Dispatch sums the dispatch policies' counters over every app server,
	// by backend.
	Dispatch map[string]DispatchCounters `json:"dispatch"`
}

// DispatchCounters are the dispatch totals of one backend.
type DispatchCounters struct {
	Batches   uint64 `json:"batches"`
	Copies    uint64 `json:"copies"`
	Extra     uint64 `json:"extra"`
	Retries   uint64 `json:"retries"`
	Cancelled uint64 `json:"cancelled"`
	Denied    uint64 `json:"denied"`
	WonLater  uint64 `json:"won_later"`
}

func (s *Sim) writeSummary(src *traceFeed) error {
	p := s.cfg.SLO
	end := s.cfg.Duration
	sum := &replay.Summary{
		Trace: s.cfg.TracePath, Mode: "trace", Seed: s.cfg.Seed, DurationS: end.Seconds(),
		ScheduleS: end.Seconds(), TraceEnded: src.ended, Sent: s.sent, Status: s.status,
		Errors:     map[string]int64{"http_4xx": 0, "http_5xx": s.status["502"], "timeout": 0, "transport": 0, "dropped": 0},
		OutOfOrder: src.timing.OutOfOrder, InFlight: replay.InFlight{Peak: s.peak},
		Lateness: replay.Lateness{ThresholdMs: float64(replay.LateThreshold) / 1e6,
			BehindThresholdMs: float64(replay.BehindThreshold) / 1e6},
	}
	if s.cfg.TopologyPath != "" {
		for _, a := range s.apps {
			sum.AppServers = append(sum.AppServers, a.id)
		}
	}
	for code, n := range s.status {
		sum.Answered += n
		if code == "200" {
			sum.OK += n
		}
	}
	sum.Latency = replay.LatencyOf(s.rec.All(0))
	sum.LatencyAfterWarmup = replay.LatencyOf(s.rec.All(p.Warmup))
	sec, err := replay.SLOResults(s.rec, p, end)
	if err != nil {
		return err
	}
	sum.SLO = sec
	if s.cfg.Scenario != nil {
		sum.Scenario = replay.ScenarioSection{File: s.cfg.Scenario.File}
	}
	return replay.WriteJSON(filepath.Join(s.cfg.OutDir, "replay", "summary.json"), sum)
}

func (s *Sim) result(wall time.Duration) *Result {
	r := &Result{SimulatedS: s.cfg.Duration.Seconds(), Sample: s.cfg.Sample, Engine: "exact", CacheAccesses: s.cacheAccesses, WallS: wall.Seconds(), Requests: s.sent, Queries: s.queries,
		BackendQueries: s.backendQueries, Events: s.eng.Fired(), Timeouts: s.timeouts, ControllerTicks: s.ticks,
		HitRatio: map[string]float64{}, Calibration: s.cal}
	if s.mini != nil {
		r.Engine, r.RequestSample, r.AppsSimulated = "miniature", s.cfg.RequestSample, s.cfg.Apps
	}
	if wall > 0 {
		r.QueriesPerSec = float64(s.queries) / wall.Seconds()
	}
	for _, b := range s.backends {
		if h, m := b.hits, b.misses; h+m > 0 {
			r.HitRatio[b.name] = float64(h) / float64(h+m)
		}
	}
	if s.hits+s.misses > 0 {
		v := float64(s.hits) / float64(s.hits+s.misses)
		r.OverallHitRatio = &v
	}
	r.Dispatch = map[string]DispatchCounters{}
	for _, a := range s.simulated() {
		for _, b := range s.backends {
			d := a.drivers[b.id]
			if d == nil {
				continue
			}
			c, m := r.Dispatch[b.name], d.m.Counters
			c.Batches += m.Batches
			c.Copies += m.Copies
			c.Extra += m.Extra
			c.Retries += m.Retries
			c.Cancelled += m.Cancelled
			c.Denied += m.Denied
			c.WonLater += m.WonLater
			r.Dispatch[b.name] = c
		}
	}
	return r
}
