package server

import (
	"context"
	"fmt"
	"math"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
)

// GetStats answers the RBC snapshot and the per-backend statistics of one
// window in one call (docs/protocol.md). The window may not reach back past
// the statistics' retention.
func (s *Server) GetStats(ctx context.Context, req *robinhoodv1.GetStatsRequest) (*robinhoodv1.GetStatsResponse, error) {
	q, err := s.resolve(req.GetWindowSeconds(), req.GetLowPct(), req.GetHighPct())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if q.window > s.stats.Retention() {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf(
			"window_seconds = %v is longer than the statistics are kept (--stats-retention %v)", q.window.Seconds(), s.stats.Retention()))
	}
	rbcResp, err := s.snapshot(ctx, q)
	if err != nil {
		return nil, err
	}
	now, _ := s.now()
	total, perApp := s.stats.Window(now, q.window)
	if q == s.defaults {
		s.m.publishStats(total)
	}
	resp := &robinhoodv1.GetStatsResponse{
		Rbc:               rbcResp,
		Backends:          summaries(total, true),
		WindowSeconds:     q.window.Seconds(),
		ComputedUnixNanos: now.UnixNano(),
	}
	apps := make([]string, 0, len(perApp))
	for a := range perApp {
		apps = append(apps, a)
	}
	sort.Strings(apps)
	for _, a := range apps {
		resp.AppServers = append(resp.AppServers, &robinhoodv1.AppServerStats{AppServerId: a, Backends: summaries(perApp[a], false)})
	}
	return resp, nil
}

func summaries(in []stats.Summary, withHistogram bool) []*robinhoodv1.BackendSummary {
	out := make([]*robinhoodv1.BackendSummary, len(in))
	for i := range in {
		s := &in[i]
		b := &robinhoodv1.BackendSummary{
			Backend: s.Backend, CacheHits: s.Hits, CacheMisses: s.Misses, ShadowHits: s.ShadowHits,
			ShadowBytes: s.ShadowBytes, Queries: s.Queries(), PartitionLimitBytes: s.LimitBytes,
			P50QueryLatencyUs: us(s.Latency.Quantile(0.5)), P99QueryLatencyUs: us(s.Latency.Quantile(0.99)),
			P50BackendLatencyUs: us(s.BackendQuantile(0.5)), P90BackendLatencyUs: us(s.BackendQuantile(0.9)),
		}
		if withHistogram {
			lat, dist := s.Latency.Sparse(), s.Distance.Sparse()
			b.LatencyBucket, b.LatencyCount = lat.Index, lat.Count
			b.DistanceBucket, b.DistanceCount = dist.Index, dist.Count
		}
		out[i] = b
	}
	return out
}

func us(v float64) uint32 { return uint32(min(math.Round(v), math.MaxUint32)) }
