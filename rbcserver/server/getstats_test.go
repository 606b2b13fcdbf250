package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/lib/loghist"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

func statsBatch(app string, hits, misses, shadow uint64, latencyUs float64, n uint64) *robinhoodv1.ReportRequest {
	b := batch(app, []uint32{100, 200}, []uint32{1, 1})
	b.BackendStats = []*robinhoodv1.BackendStats{{
		Backend: 1, CacheHits: hits, CacheMisses: misses, ShadowHits: shadow, ShadowBytes: 4 << 20,
		LatencyBucket: []uint32{uint32(loghist.Index(latencyUs))}, LatencyCount: []uint64{n}, PartitionLimitBytes: 64 << 20,
		DistanceBucket: []uint32{10, loghist.Buckets - 1}, DistanceCount: []uint64{hits, misses},
	}}
	return b
}

// One call answers the RBC and the statistics of every app server, summed
// and per app server; /metrics counts them.
func TestGetStatsSumsAppServers(t *testing.T) {
	h := start(t, nil)
	if _, err := h.report(t, statsBatch("app0", 90, 10, 3, 500, 100)); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Second)
	if _, err := h.report(t, statsBatch("app1", 50, 50, 7, 20_000, 100), batch("app2", []uint32{5}, []uint32{0})); err != nil {
		t.Fatal(err)
	}
	resp, err := h.client.GetStats(ctxT(t), &robinhoodv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRbc().GetWindowRequests() != 5 || resp.GetWindowSeconds() != 5 {
		t.Fatalf("rbc %v", resp.GetRbc())
	}
	if len(resp.GetBackends()) != 1 {
		t.Fatalf("backends %v", resp.GetBackends())
	}
	b := resp.GetBackends()[0]
	if b.GetCacheHits() != 140 || b.GetCacheMisses() != 60 || b.GetShadowHits() != 10 || b.GetQueries() != 200 ||
		b.GetPartitionLimitBytes() != 128<<20 || b.GetShadowBytes() != 4<<20 {
		t.Fatalf("backend 1: %v", b)
	}
	if p99 := b.GetP99QueryLatencyUs(); p99 < 19_600 || p99 > 20_400 {
		t.Fatalf("p99 %d", p99)
	}
	if p50 := b.GetP50QueryLatencyUs(); p50 < 490 || p50 > 510 {
		t.Fatalf("p50 %d", p50)
	}
	if len(b.GetLatencyBucket()) != 2 {
		t.Fatalf("histogram %v", b.GetLatencyBucket())
	}
	if d, c := b.GetDistanceBucket(), b.GetDistanceCount(); len(d) != 2 || d[0] != 10 || d[1] != loghist.Buckets-1 ||
		c[0] != 140 || c[1] != 60 {
		t.Fatalf("distance histogram %v %v, want the two app servers' summed", d, c)
	}
	apps := resp.GetAppServers()
	if len(apps) != 2 || apps[0].GetAppServerId() != "app0" || apps[1].GetBackends()[0].GetCacheMisses() != 50 {
		t.Fatalf("per app server %v", apps)
	}
	m := testutil.Metric(t, h.http, `rbcserver_cache_hits_total{backend="1"}`)
	if m != 140 {
		t.Fatalf("metric %v", m)
	}
	// The window moves on: 10 s later nothing is left in a 5 s window.
	h.clock.Advance(10 * time.Second)
	resp, _ = h.client.GetStats(ctxT(t), &robinhoodv1.GetStatsRequest{})
	if len(resp.GetBackends()) != 0 {
		t.Fatalf("stale %v", resp.GetBackends())
	}
	_, err = h.client.GetStats(ctxT(t), &robinhoodv1.GetStatsRequest{WindowSeconds: 3600})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--stats-retention") {
		t.Fatalf("long window: %v", err)
	}
}

// A batch with an invalid statistics entry is rejected whole, naming it.
func TestBadStatsRejectTheBatch(t *testing.T) {
	h := start(t, nil)
	bad := statsBatch("app0", 1, 1, 0, 100, 1)
	bad.BackendStats[0].LatencyCount = nil
	_, err := h.report(t, bad)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "backend_stats[0]: backend 1: latency_bucket has 1 entries but latency_count has 0") {
		t.Fatalf("%v", err)
	}
	if got := h.getRBC(t, &robinhoodv1.GetRBCRequest{}).GetWindowRequests(); got != 0 {
		t.Fatalf("the rejected batch's records were stored: %d", got)
	}
	bad = statsBatch("app0", 1, 1, 0, 100, 1)
	bad.BackendStats[0].DistanceBucket[1] = loghist.Buckets
	_, err = h.report(t, bad)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "backend_stats[0]: backend 1: distance_bucket[1] = 470 is not below 470") {
		t.Fatalf("%v", err)
	}
}
