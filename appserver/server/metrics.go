package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/robinhoodcache/robinhood/appserver/replicas"
)

// latencyBuckets cover all-hit requests (tens of µs) up to timeouts; 150 ms
// is the default SLO.
var latencyBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
	0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5,
}

// Request outcomes (label status of appserver_requests_total).
const (
	statusOK         = "ok"
	statusPartial    = "partial"
	statusBadRequest = "bad_request"
)

type metrics struct {
	reg           *prometheus.Registry
	requestSec    prometheus.Histogram
	requests      *prometheus.CounterVec
	inFlight      prometheus.Gauge
	querySec      *prometheus.HistogramVec
	hits          *prometheus.CounterVec
	misses        *prometheus.CounterVec
	backendErrors *prometheus.CounterVec
	cacheErrors   *prometheus.CounterVec
	fillDropped   *prometheus.CounterVec
	fillSkipped   *prometheus.CounterVec
	fills         *prometheus.CounterVec
	blocking      *prometheus.CounterVec
	okRequests    prometheus.Counter
	partial       prometheus.Counter
	badRequests   prometheus.Counter
}

// backendMetrics are one backend's series, resolved once.
type backendMetrics struct {
	hitSec, missSec     prometheus.Observer
	hits, misses        prometheus.Counter
	fillDropped         prometheus.Counter
	fillTooLarge        prometheus.Counter
	fills               prometheus.Counter
	blocking            prometheus.Counter
	backendErr, cacheEr func(kind string) prometheus.Counter
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &metrics{
		reg: reg,
		requestSec: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "appserver_request_seconds",
			Help:    "Request latency: receipt to the last query's values (ok and partial requests).",
			Buckets: latencyBuckets,
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_requests_total",
			Help: "Requests by outcome: ok, partial (a backend call failed; HTTP 502), bad_request (HTTP 400 or 413).",
		}, []string{"status"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "appserver_requests_in_flight",
			Help: "Requests being served.",
		}),
		querySec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "appserver_query_seconds",
			Help:    "Query latency from the start of its backend's batch: hits when the multi-get answered, misses when the backend's values arrived.",
			Buckets: latencyBuckets,
		}, []string{"backend", "result"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_cache_hits_total",
			Help: "Queries answered from the cache.",
		}, []string{"backend"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_cache_misses_total",
			Help: "Queries sent to the backend: cache misses, uncacheable queries, and every query in cache mode none.",
		}, []string{"backend"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_backend_errors_total",
			Help: "Failed backend calls by kind: timeout, unavailable, canceled, bad_response, error.",
		}, []string{"backend", "kind"}),
		cacheErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_cache_errors_total",
			Help: "Failed cache operations (memcached or Redis; gets and fills) by kind; size_mismatch counts cached values whose length differed from the requested size.",
		}, []string{"backend", "kind"}),
		fillDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_cache_fill_dropped_total",
			Help: "Values not stored because the backend's fill queue was full.",
		}, []string{"backend"}),
		fillSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_cache_fill_skipped_total",
			Help: "Cacheable values not stored, by reason (too_large: above the item size limit, --memcached-item-max, or refused by the cache).",
		}, []string{"backend", "reason"}),
		fills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_cache_fills_total",
			Help: "Values stored in the cache.",
		}, []string{"backend"}),
		blocking: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appserver_blocking_total",
			Help: "Requests whose last query to finish was this backend's.",
		}, []string{"backend"}),
	}
	reg.MustRegister(m.requestSec, m.requests, m.inFlight, m.querySec, m.hits, m.misses,
		m.backendErrors, m.cacheErrors, m.fillDropped, m.fillSkipped, m.fills, m.blocking)
	m.okRequests = m.requests.WithLabelValues(statusOK)
	m.partial = m.requests.WithLabelValues(statusPartial)
	m.badRequests = m.requests.WithLabelValues(statusBadRequest)
	return m
}

func (m *metrics) forBackend(name string) backendMetrics {
	return backendMetrics{
		hitSec:       m.querySec.WithLabelValues(name, "hit"),
		missSec:      m.querySec.WithLabelValues(name, "miss"),
		hits:         m.hits.WithLabelValues(name),
		misses:       m.misses.WithLabelValues(name),
		fillDropped:  m.fillDropped.WithLabelValues(name),
		fillTooLarge: m.fillSkipped.WithLabelValues(name, "too_large"),
		fills:        m.fills.WithLabelValues(name),
		blocking:     m.blocking.WithLabelValues(name),
		backendErr:   func(kind string) prometheus.Counter { return m.backendErrors.WithLabelValues(name, kind) },
		cacheEr:      func(kind string) prometheus.Counter { return m.cacheErrors.WithLabelValues(name, kind) },
	}
}

// dispatchCollector exports one backend's dispatch counters (its policy's
// Machine, lib/dispatch) from one snapshot per scrape.
type dispatchCollector struct {
	d                                                 *replicas.Dispatcher
	copies, cancelled, wins, denied, ratio, purgeErrs *prometheus.Desc
}

func newDispatchCollector(backend string, d *replicas.Dispatcher) *dispatchCollector {
	lbl := prometheus.Labels{"backend": backend, "policy": d.Policy()}
	return &dispatchCollector{
		d: d,
		copies: prometheus.NewDesc("appserver_dispatch_copies_total",
			"Copies of batches sent to the backend's replicas: the first copy of a batch, a duplicate the policy sent (hedge, reissue) or a retry after a failure.",
			[]string{"kind"}, lbl),
		cancelled: prometheus.NewDesc("appserver_dispatch_cancelled_total",
			"Copies the policy cancelled (the loser of a hedge, the copies of an abandoned batch); each is also purged at its replica.", nil, lbl),
		wins: prometheus.NewDesc("appserver_dispatch_wins_total",
			"Answered batches by the copy that answered: the first sent, or a later one (duplicate or retry).", []string{"copy"}, lbl),
		denied: prometheus.NewDesc("appserver_dispatch_denied_total",
			"Duplicates the policy's extra-load budget refused.", nil, lbl),
		ratio: prometheus.NewDesc("appserver_dispatch_extra_ratio",
			"Duplicates per batch over the policy's budget window (0 for a policy without a budget).", nil, lbl),
		purgeErrs: prometheus.NewDesc("appserver_dispatch_purge_errors_total",
			"Purge calls for cancelled copies that failed (best effort: the copy is cancelled anyway).", nil, lbl),
	}
}

func (c *dispatchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.copies, c.cancelled, c.wins, c.denied, c.ratio, c.purgeErrs} {
		ch <- d
	}
}

func (c *dispatchCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.d.Stats()
	counter := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	counter(c.copies, s.Copies-s.Extra-s.Retries, "first")
	counter(c.copies, s.Extra, "extra")
	counter(c.copies, s.Retries, "retry")
	counter(c.cancelled, s.Cancelled)
	counter(c.wins, s.WonFirst, "first")
	counter(c.wins, s.WonLater, "later")
	counter(c.denied, s.Denied)
	counter(c.purgeErrs, s.PurgeErrors)
	ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, s.ExtraRatio)
}
