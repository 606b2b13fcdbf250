package replay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkReplay5000 replays Poisson arrivals at 5,000 requests/s for 5 s
// against a trivial local HTTP server (in this process, sharing the CPU) and
// reports how well the schedule held: sends per second, sends more than 1 ms
// late, and the worst lateness. Run it with -benchtime=1x.
func BenchmarkReplay5000(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, `{"latency_us": 1, "blocking_backend": "b1", "status": "ok", "backends": {}}`)
	}))
	defer srv.Close()
	tp := topo(b, strings.TrimPrefix(srv.URL, "http://"))
	trace := writeTrace(b, 5000, 0)
	for i := 0; i < b.N; i++ {
		cfg := baseConfig(b, tp, trace)
		cfg.Rate = 5000
		cfg.Duration = 5 * time.Second
		cfg.Loop = true
		cfg.SLO.Step, cfg.SLO.Window = time.Second, time.Second
		cfg.OutDir = filepath.Join(b.TempDir(), "out")
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		sum, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(after.Utime.Nano() - before.Utime.Nano() + after.Stime.Nano() - before.Stime.Nano())
		// CPU of the replayer and the in-process server together.
		b.ReportMetric(float64(cpu.Microseconds())/float64(sum.Sent), "cpu_us/req")
		b.ReportMetric(sum.Lateness.P99LateMs, "p99_late_ms")
		b.ReportMetric(float64(sum.Sent)/sum.ScheduleS, "sent/s")
		b.ReportMetric(float64(sum.Lateness.LateSends), "late_sends")
		b.ReportMetric(100*float64(sum.Lateness.LateSends)/float64(sum.Sent), "late_%")
		b.ReportMetric(sum.Lateness.MaxLateMs, "max_late_ms")
		b.ReportMetric(float64(sum.Errors["transport"]+sum.Errors["timeout"]+sum.Dropped), "failed")
		b.ReportMetric(*sum.Latency.P99, "p99_ms")
	}
}
