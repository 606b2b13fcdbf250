package replay

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return f.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	return &metrics{
		reg:  reg,
		sent: counter("replay_requests_sent_total", "Requests sent to the application servers."),
		responses: f.NewCounterVec(prometheus.CounterOpts{Name: "replay_responses_total",
			Help: "Finished requests by status: the HTTP code, timeout, error (no HTTP answer) or dropped (not sent: in-flight cap)."},
			[]string{"status"}),
		latency: f.NewHistogram(prometheus.HistogramOpts{Name: "replay_request_seconds",
			Help:    "End-to-end request latency seen by the replayer (answered and timed-out requests).",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 30, 24)}),
		windowP99: gauge("replay_window_p99_seconds",
			"P99 request latency over the last SLO window (--slo-window), updated every second."),
		late: counter("replay_late_sends_total",
			"Requests the scheduler sent more than 1 ms after their time (the replayer falling behind)."),
		inFlight: gauge("replay_in_flight_requests", "Requests sent and not yet answered."),
		dropped: counter("replay_dropped_requests_total",
			"Requests not sent because the in-flight cap (--max-in-flight) was reached."),
	}
}
