package server

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/ring"
)

// metrics are the server's Prometheus metrics, in a registry of their own
// (with the Go runtime and process collectors) served on /metrics.
type metrics struct {
	reg             *prometheus.Registry
	ingested        prometheus.Counter
	recordsRejected *prometheus.CounterVec
	batches         prometheus.Counter
	batchesRejected *prometheus.CounterVec
	streams         prometheus.Gauge
	compute         prometheus.Histogram
	blocking        *prometheus.GaugeVec
	share           *prometheus.GaugeVec
	windowRequests  prometheus.Gauge
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
			Name: "rbcserver_blocking_count",
			Help: "Request blocking count per backend from the most recent GetRBC with the default parameters.",
		}, []string{"backend"}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rbcserver_band_share",
			Help: "Fraction of the band's requests blocked by the backend, from the most recent GetRBC with the default parameters.",
		}, []string{"backend"}),
		windowRequests: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rbcserver_window_requests",
			Help: "Records in the window of the most recent GetRBC with the default parameters.",
		}),
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
	for _, reason := range []string{ReasonLengthMismatch, ReasonBackendRange} {
		m.recordsRejected.WithLabelValues(reason)
		m.batchesRejected.WithLabelValues(reason)
	}
	m.batchesRejected.WithLabelValues(ReasonTooLarge)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.ingested, m.recordsRejected, m.batches, m.batchesRejected, m.streams,
		m.compute, m.blocking, m.share, m.windowRequests, ringRecords, ringCapacity,
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
