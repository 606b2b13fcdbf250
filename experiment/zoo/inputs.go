package zoo

import (
	"fmt"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/feasibility"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/model"
)

// Load reads the Inputs from a topology and a trace: the backends and their
// initial limits, and, for the partitioned app server appID (or the first),
// each backend's query rate and miss load under the configured allocation
// from every app server, measured from the trace's requests before duration
// (feasibility.Scan: the same load model scenario check uses). The warm-up
// and SLO latency are the topology's slo block's, else DefaultWarmup and the
// schema's default latency; the caller may override the warm-up.
func Load(topo *config.Topology, tracePath string, duration time.Duration, appID string) (Inputs, error) {
	in := Inputs{Duration: duration, Warmup: DefaultWarmup, SLOLatency: time.Duration(config.DefaultSLO().Latency)}
	if topo.SLO != nil {
		in.Warmup, in.SLOLatency = time.Duration(topo.SLO.Warmup), time.Duration(topo.SLO.Latency)
	}
	if duration <= 0 {
		return in, fmt.Errorf("--duration: the run's length is needed")
	}
	app := topo.PartitionedAppServer(appID)
	if app == nil {
		return in, fmt.Errorf("--app-server: no partitioned app server %q in the topology (drop depths are relative to the miss loads under a partitioned cache's configured allocation)", appID)
	}
	in.AppServer = app.ID
	w, err := feasibility.Scan(tracePath, duration, len(topo.AppServers), app.CacheBudgetMB)
	if err != nil {
		return in, fmt.Errorf("--trace: %w", err)
	}
	measured, _ := w.LoadModel(0, duration)
	for i := range measured { // at what a partition is worth (memcached's slab classes)
		measured[i].MissRatio = w.AsHeld(i, measured[i].MissRatio)
	}
	byName := map[string]model.Backend{}
	for _, b := range measured {
		byName[b.Name] = b
	}
	conf := app.InitialAllocationMB()
	for _, tb := range topo.Backends {
		b := Backend{Name: tb.Name, Limits: tb.Limits, ConfiguredMB: conf[tb.Name]}
		if m, ok := byName[tb.Name]; ok {
			b.Load = m.Load(b.ConfiguredMB)
			b.QueryRate = m.CacheableRate + m.UncacheableRate
		}
		in.Backends = append(in.Backends, b)
	}
	return in, nil
}
