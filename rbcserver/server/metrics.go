package server

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/ring"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
)

// metrics are the server's Prometheus metrics, in a registry of their own
// (with the Go runtime and process collectors) served on /metrics.
type metrics struct {
	reg             *prometheus.Registry
	ingested        prometheus.Counter
	recordsRejected *prometheus.CounterVec
	batches         prometheus.Counter
	batchesRejected *prometheus.CounterVec
	lateBatches     prometheus.Counter
	appRefused      *prometheus.CounterVec
	appThinned      *prometheus.CounterVec
	appsMu          sync.Mutex
	appsSeen        map[string]bool
	appsThinned     map[string]bool // app servers whose thinning was logged
	streams         prometheus.Gauge
	compute         prometheus.Histogram
	blocking        *prometheus.GaugeVec
	share           *prometheus.GaugeVec
	windowRequests  prometheus.Gauge
	cacheHits       *prometheus.CounterVec
	cacheMisses     *prometheus.CounterVec
	shadowHits      *prometheus.CounterVec
	queryP50        *prometheus.GaugeVec
	queryP99        *prometheus.GaugeVec
	ingestedTotal   atomic.Uint64 // the counter's value, for the final log line
}

func newMetrics(r *ring.Ring) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		ingested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rbcserver_records_ingested_total",
			Help: "Records accepted from Report streams and stored in the ring.",
		}),
		recordsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rbcserver_records_rejected_total",
			Help: "Records in batches rejected by validation, by reason.",
		}, []string{"reason"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rbcserver_batches_total",
			Help: "Batches (ReportRequest messages) accepted.",
		}),
		batchesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rbcserver_batches_rejected_total",
			Help: "Batches rejected, by reason (too_large: over the 16 MiB message limit).",
		}, []string{"reason"}),
		appRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rbcserver_app_records_refused_total",
			Help: "Records refused because a batch of their app server's was over its fraction of the ring (--max-batch-fraction), by app server (the first 256 ids; the rest as \"other\").",
		}, []string{"app_server"}),
		appThinned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rbcserver_app_records_thinned_total",
			Help: "Records accepted but not stored because their app server held its share of the window (--max-app-share): its stored records stand for them, by app server (the first 256 ids; the rest as \"other\").",
		}, []string{"app_server"}),
		appsSeen:    map[string]bool{},
		appsThinned: map[string]bool{},
		lateBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rbcserver_late_batches_total",
			Help: "Batches that arrived a second or more after their client cut them (sent_unix_nano); their records are filed at the time they were cut.",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rbcserver_report_streams",
			Help: "Report streams currently open.",
		}),
		compute: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rbcserver_getrbc_compute_seconds",
			Help:    "Time of one RBC computation: copying the window out of the ring, selection and counting.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14), // 50 µs … 0.4 s
		}),
		blocking: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rbcserver_blocking_requests",
			Help: "Requests of the band blocked by the backend (its RBC), from the most recent GetRBC with the default parameters.",
		}, []string{"backend"}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rbcserver_band_share",
			Help: "Fraction of the band's requests blocked by the backend, from the most recent GetRBC with the default parameters.",
		}, []string{"backend"}),
		windowRequests: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rbcserver_window_requests",
			Help: "Records in the window of the most recent GetRBC with the default parameters.",
		}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rbcserver_cache_hits_total",
			Help: "Cache hits app servers reported per backend (all app servers).",
		}, []string{"backend"}),
		cacheMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rbcserver_cache_misses_total",
			Help: "Cache misses app servers reported per backend (all app servers).",
		}, []string{"backend"}),
		shadowHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rbcserver_shadow_hits_total",
			Help: "Shadow hits (misses that more cache would have hit) app servers reported per backend.",
		}, []string{"backend"}),
		queryP50: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rbcserver_query_latency_p50_seconds",
			Help: "Median query latency per backend over the window of the most recent GetStats with the default window.",
		}, []string{"backend"}),
		queryP99: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rbcserver_query_latency_p99_seconds",
			Help: "P99 query latency per backend over the window of the most recent GetStats with the default window.",
		}, []string{"backend"}),
	}
	ringRecords := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rbcserver_ring_records",
		Help: "Records currently stored in the ring.",
	}, func() float64 { return float64(r.Len()) })
	ringCapacity := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rbcserver_ring_capacity_records",
		Help: "Capacity of the ring (--ring-size).",
	})
	ringCapacity.Set(float64(r.Cap()))
	m.recordsRejected.WithLabelValues(ReasonLengthMismatch)
	m.batchesRejected.WithLabelValues(ReasonLengthMismatch)
	m.recordsRejected.WithLabelValues(ReasonBackendRange) // refused one by one, never a whole batch
	m.batchesRejected.WithLabelValues(ReasonTooLarge)
	m.recordsRejected.WithLabelValues(ReasonBadStats)
	m.batchesRejected.WithLabelValues(ReasonBadStats)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.ingested, m.recordsRejected, m.batches, m.batchesRejected, m.lateBatches, m.appRefused, m.appThinned, m.streams,
		m.compute, m.blocking, m.share, m.windowRequests, ringRecords, ringCapacity,
		m.cacheHits, m.cacheMisses, m.shadowHits, m.queryP50, m.queryP99,
	)
	return m
}

// publish sets the per-backend gauges to res and removes the series of
// backends that are no longer in it. published tracks the current series.
func (m *metrics) publish(res rbc.Result, published map[uint32]struct{}) {
	current := make(map[uint32]struct{}, len(res.Backends))
	for _, c := range res.Backends {
		label := strconv.FormatUint(uint64(c.Backend), 10)
		share := 0.0
		if res.Band > 0 {
			share = float64(c.Blocking) / float64(res.Band)
		}
		m.blocking.WithLabelValues(label).Set(float64(c.Blocking))
		m.share.WithLabelValues(label).Set(share)
		current[c.Backend] = struct{}{}
	}
	for b := range published {
		if _, ok := current[b]; !ok {
			label := strconv.FormatUint(uint64(b), 10)
			m.blocking.DeleteLabelValues(label)
			m.share.DeleteLabelValues(label)
			delete(published, b)
		}
	}
	for b := range current {
		published[b] = struct{}{}
	}
	m.windowRequests.Set(float64(res.N))
}

// addIngested counts n stored records.
func (m *metrics) addIngested(n int) {
	m.ingested.Add(float64(n))
	m.ingestedTotal.Add(uint64(n))
	m.batches.Inc()
}

// addStats counts the per-backend statistics of an accepted batch.
func (m *metrics) addStats(reports []stats.Report) {
	for i := range reports {
		r := &reports[i]
		label := strconv.FormatUint(uint64(r.Backend), 10)
		m.cacheHits.WithLabelValues(label).Add(float64(r.Hits))
		m.cacheMisses.WithLabelValues(label).Add(float64(r.Misses))
		m.shadowHits.WithLabelValues(label).Add(float64(r.ShadowHits))
	}
}

// publishStats sets the per-backend query latency gauges.
func (m *metrics) publishStats(total []stats.Summary) {
	for i := range total {
		s := &total[i]
		if s.Queries() == 0 {
			continue
		}
		label := strconv.FormatUint(uint64(s.Backend), 10)
		m.queryP50.WithLabelValues(label).Set(s.Latency.Quantile(0.5) / 1e6)
		m.queryP99.WithLabelValues(label).Set(s.Latency.Quantile(0.99) / 1e6)
	}
}

// maxAppLabels bounds the app_server label's values: ids come from clients.
const maxAppLabels = 256

// appLabel is app's label value: app itself among the first maxAppLabels
// ids, "other" after them.
func (m *metrics) appLabel(app string) string {
	m.appsMu.Lock()
	defer m.appsMu.Unlock()
	if !m.appsSeen[app] {
		if len(m.appsSeen) >= maxAppLabels {
			return "other"
		}
		m.appsSeen[app] = true
	}
	return app
}

// appRejected counts n records of app refused for the ring's share.
func (m *metrics) appRejected(app string, n int) {
	m.appRefused.WithLabelValues(m.appLabel(app)).Add(float64(n))
}

// appThinnedAdd counts n records of app thinned to its share of the window;
// true the first time for app (among the labelled ones), to log it once.
func (m *metrics) appThinnedAdd(app string, n int) bool {
	label := m.appLabel(app)
	m.appThinned.WithLabelValues(label).Add(float64(n))
	m.appsMu.Lock()
	defer m.appsMu.Unlock()
	if label == "other" || m.appsThinned[label] {
		return false
	}
	m.appsThinned[label] = true
	return true
}
