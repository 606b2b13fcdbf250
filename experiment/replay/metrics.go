package replay

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the replayer's Prometheus metrics (--metrics ADDR).
type metrics struct {
	reg       *prometheus.Registry
	sent      prometheus.Counter
	responses *prometheus.CounterVec
	latency   prometheus.Histogram
	windowP99 prometheus.Gauge
	late      prometheus.Counter
	inFlight  prometheus.Gauge
	dropped   prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replay_requests_sent_total",
			Help: "Requests sent to the application servers.",
		}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replay_responses_total",
			Help: "Finished requests by status: the HTTP code, timeout, error (no HTTP answer) or dropped (not sent: in-flight cap).",
		}, []string{"status"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replay_request_seconds",
			Help:    "End-to-end request latency seen by the replayer (answered and timed-out requests).",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 30, 24),
		}),
		windowP99: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "replay_window_p99_seconds",
			Help: "P99 request latency over the last SLO window (--slo-window), updated every second.",
		}),
		late: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replay_late_sends_total",
			Help: "Requests the scheduler sent more than 1 ms after their time (the replayer falling behind).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "replay_in_flight_requests",
			Help: "Requests sent and not yet answered.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replay_dropped_requests_total",
			Help: "Requests not sent because the in-flight cap (--max-in-flight) was reached.",
		}),
	}
	m.reg.MustRegister(m.sent, m.responses, m.latency, m.windowP99, m.late, m.inFlight, m.dropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
