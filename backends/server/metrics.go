package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/robinhoodcache/robinhood/backends/capacity"
)

// LatencyBuckets are the bounds (seconds) of the latency histograms: 50 µs
// to about 26 s, doubling.
var LatencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 20)

type metrics struct {
	served, cancelled, rejected, errors, hiccups prometheus.Counter
	refused                                      prometheus.Counter
	querySeconds, queueSeconds, serviceSeconds   prometheus.Histogram
	servedBy                                     [2]prometheus.Counter // by capacity.Priority
	purged                                       *prometheus.CounterVec
	purgeRefused                                 prometheus.Counter
}

// priorityNames are the priority label's values, by capacity.Priority.
var priorityNames = [2]string{"normal", "low"}

func newMetrics(reg prometheus.Registerer, name string, model *capacity.Model) (*metrics, error) {
	labels := prometheus.Labels{"backend": name}
	counter := func(n, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: labels})
	}
	hist := func(n, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: n, Help: help, ConstLabels: labels, Buckets: LatencyBuckets})
	}
	m := &metrics{
		served:         counter("backend_queries_served_total", "Queries (keys) served."),
		cancelled:      counter("backend_queries_cancelled_total", "Queries whose caller gave up (cancelled or past its deadline) while queued or in service; queued ones left the queue unserved. A purged batch's queries count in backend_queries_purged_total instead."),
		rejected:       counter("backend_queries_rejected_total", "Queries rejected because the queue held queue_limit or more operations when they arrived, or because the backend shut down before serving them."),
		errors:         counter("backend_query_errors_total", "Queries whose data path failed."),
		hiccups:        counter("backend_hiccups_total", "Served queries that drew a hiccup (hiccup_ms extra)."),
		refused:        counter("backend_batches_refused_total", "Batches refused before anything was queued: too many keys, a key or value too large, or more bytes in all than --max-batch-bytes."),
		querySeconds:   hist("backend_query_seconds", "Time from arrival to completion of a served query: queue plus service."),
		queueSeconds:   hist("backend_queue_seconds", "Time a served query waited for a worker and a token."),
		serviceSeconds: hist("backend_service_seconds", "Time a served query held its worker: data path plus injected latency."),
	}
	byPrio := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "backend_queries_served_by_priority_total",
		Help: "Queries served, by priority class (low: duplicates of laedge and das, admitted only when no normal query waits).", ConstLabels: labels},
		[]string{"priority"})
	for p, n := range priorityNames {
		m.servedBy[p] = byPrio.WithLabelValues(n)
	}
	m.purged = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "backend_queries_purged_total",
		Help: "Queries of purged batches (Purge): taken out of the queue (state=queued) or stopped while running (state=running).", ConstLabels: labels},
		[]string{"state"})
	m.purged.WithLabelValues("queued")
	m.purged.WithLabelValues("running")
	queuedBy := func(p int) func() float64 {
		return func() float64 {
			st := model.Stats()
			if p == 1 {
				return float64(st.LowQueued)
			}
			return float64(st.QueueLength - st.LowQueued)
		}
	}
	m.purgeRefused = counter("backend_purges_refused_total", "Batches a Purge named that another caller sent: left alone (a batch belongs to the caller that sent it).")
	cs := []prometheus.Collector{byPrio, m.purged, m.purgeRefused,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "backend_stalls_total", Help: "Whole-replica stalls (limits stall_prob, stall_ms).", ConstLabels: labels},
			func() float64 { return float64(model.Stats().Stalls) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "backend_queue_length_by_priority", Help: "Queries waiting for admission, by priority class.",
			ConstLabels: prometheus.Labels{"backend": name, "priority": "normal"}}, queuedBy(0)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "backend_queue_length_by_priority", Help: "Queries waiting for admission, by priority class.",
			ConstLabels: prometheus.Labels{"backend": name, "priority": "low"}}, queuedBy(1)),
		m.served, m.cancelled, m.rejected, m.errors, m.hiccups, m.refused, m.querySeconds, m.queueSeconds, m.serviceSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "backend_queue_length", Help: "Queries waiting for admission.", ConstLabels: labels},
			func() float64 { return float64(model.Stats().QueueLength) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "backend_in_service", Help: "Queries admitted and not yet done (≤ workers, except right after workers is lowered).", ConstLabels: labels},
			func() float64 { return float64(model.Stats().InService) }),
	}
	for _, f := range capacity.Fields {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "backend_limit",
			Help:        "Current capacity limits (admin API fields; rate and queue_limit 0 mean unlimited).",
			ConstLabels: prometheus.Labels{"backend": name, "limit": f},
		}, func() float64 { v, _ := model.Limits().Get(f); return v }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
