package sim

import (
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// The simulator's speed (docs/benchmarks.md): simulated queries per second
// of wall time on one core, reported as queries/s.
//
//	go test -run '^$' -bench . -benchtime 3x ./sim/
//
// all-hit: every query hits a cache big enough for every key (the lookup
// path alone); misses: a cache far too small, so most queries go to their
// backend's queue and workers.

const benchTopology = `
rbc_server: {grpc: 127.0.0.1:1, window: 5s}
backends:
  - {id: 0, name: a, type: kv, replicas: [{grpc: 127.0.0.1:2}], limits: {workers: 8, extra_latency_ms: 2, hiccup_prob: 0.01, hiccup_ms: 20}}
  - {id: 1, name: b, type: sql, replicas: [{grpc: 127.0.0.1:3}], limits: {workers: 8, extra_latency_ms: 2, hiccup_prob: 0.01, hiccup_ms: 20}}
app_servers:
  - {id: app0, http: 127.0.0.1:5, cache_mode: shared, shared_cache: 127.0.0.1:6, cache_budget_mb: BUDGET, backend_timeout: 1s, request_timeout: 2s}
`

func benchSim(b *testing.B, budget string) {
	dir := b.TempDir()
	cfg := simConfigN(b, dir, strings.Replace(benchTopology, "BUDGET", budget, 1), "", 20000, 10)
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // as bin/sim runs
	b.ResetTimer()
	var queries uint64
	var hit float64
	start := time.Now()
	for i := range b.N {
		cfg.OutDir = filepath.Join(dir, "out", string(rune('a'+i%26)))
		res, err := Run(cfg)
		if err != nil {
			b.Fatal(err)
		}
		queries += res.Queries
		hit = *res.OverallHitRatio
	}
	b.ReportMetric(float64(queries)/time.Since(start).Seconds(), "queries/s")
	b.ReportMetric(hit, "hit-ratio")
}

func BenchmarkAllHit(b *testing.B) { benchSim(b, "1024") }
func BenchmarkMisses(b *testing.B) { benchSim(b, "8") }
