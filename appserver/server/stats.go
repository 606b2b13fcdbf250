package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/shadow"
	"github.com/robinhoodcache/robinhood/lib/loghist"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Defaults of the statistics the app server reports with its RBC batches.
const (
	DefaultShadowBytes = 4 << 20
	DefaultShadowQueue = 1 << 15
	limitPollInterval  = 2 * time.Second
)

// backendStats is what the app server measures about one backend for the
// statistics service: counters since the last batch (drained by the
// reporter), written on the request path with atomic adds only.
type backendStats struct {
	hits, misses, shadowHits atomic.Uint64
	latency                  loghist.Histogram
	// distances is the shadow model's stack-distance histogram (limit bytes).
	distances loghist.Histogram
	limit     atomic.Int64 // the partition's memory limit, bytes (0: unknown)
}

// shadowEvent is one cacheable query for the shadow model of its partition.
type shadowEvent struct {
	be   *backend
	key  string
	size int64
	hit  bool
}

// statsCollector runs the shadow models and polls the partitions' limits
// in the background: the request path only offers events to a bounded
// queue and drops (and counts) them when it is full.
type statsCollector struct {
	events      chan shadowEvent
	dropped     atomic.Uint64
	shadowBytes int64
	depth       int64 // the shadow models forget objects deeper than this
	backends    []*backend
	stop        context.CancelFunc
	done        sync.WaitGroup
}

func newStatsCollector(backends []*backend, shadowBytes, budgetBytes int64, queue int, partitioned bool) *statsCollector {
	sc := &statsCollector{shadowBytes: shadowBytes, depth: 2*budgetBytes + shadowBytes, backends: backends}
	if partitioned {
		sc.events = make(chan shadowEvent, queue)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sc.stop = cancel
	if partitioned {
		sc.done.Add(2)
		go sc.runModels(ctx)
		go sc.pollLimits(ctx)
	}
	return sc
}

// offer hands a query to the shadow model without ever waiting.
func (sc *statsCollector) offer(ev shadowEvent) {
	if sc.events == nil {
		return
	}
	select {
	case sc.events <- ev:
	default:
		sc.dropped.Add(1)
	}
}

func (sc *statsCollector) runModels(ctx context.Context) {
	defer sc.done.Done()
	models := map[*backend]*shadow.Model{}
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-sc.events:
			m := models[ev.be]
			if m == nil {
				m = shadow.New(sc.shadowBytes, sc.depth)
				m.Distances = &ev.be.stats.distances
				models[ev.be] = m
			}
			if m.Observe(ev.key, ev.size, ev.hit, ev.be.stats.limit.Load()) {
				ev.be.stats.shadowHits.Add(1)
			}
		}
	}
}

// pollLimits reads every partition's memory limit now and then (memcached's
// limit_maxbytes, Redis's maxmemory: Store.Limit).
func (sc *statsCollector) pollLimits(ctx context.Context) {
	defer sc.done.Done()
	t := time.NewTicker(limitPollInterval)
	defer t.Stop()
	for {
		for _, be := range sc.backends {
			if be.cache == nil {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			if v, err := be.cache.Limit(pctx); err == nil {
				be.stats.limit.Store(v)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// drain returns every backend's statistics since the previous drain, for
// the next RBC batch.
func (sc *statsCollector) drain() []*pb.BackendStats {
	out := make([]*pb.BackendStats, 0, len(sc.backends))
	for _, be := range sc.backends {
		st := &be.stats
		lat, dist := st.latency.Drain(), st.distances.Drain()
		b := &pb.BackendStats{
			Backend: be.id, CacheHits: st.hits.Swap(0), CacheMisses: st.misses.Swap(0),
			ShadowHits: st.shadowHits.Swap(0), LatencyBucket: lat.Index, LatencyCount: lat.Count,
			PartitionLimitBytes: uint64(max(st.limit.Load(), 0)),
			DistanceBucket:      dist.Index, DistanceCount: dist.Count,
		}
		if sc.events != nil {
			b.ShadowBytes = uint64(sc.shadowBytes)
		}
		if b.CacheHits+b.CacheMisses == 0 && len(b.LatencyBucket) == 0 {
			continue
		}
		out = append(out, b)
	}
	return out
}

func (sc *statsCollector) close() {
	sc.stop()
	sc.done.Wait()
}
