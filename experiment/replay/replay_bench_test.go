package replay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// trivialServerEnv makes the test binary serve trivial answers instead of
// running tests: BenchmarkReplay5000 starts it as a separate process, as an
// application server would be.
const trivialServerEnv = "TRACEGEN_REPLAY_TRIVIAL_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(trivialServerEnv) != "" {
		serveTrivial()
		return
	}
	os.Exit(m.Run())
}

func trivialHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	fmt.Fprint(w, `{"latency_us": 1, "blocking_backend": "b1", "status": "ok", "backends": {}}`)
}

// serveTrivial listens on a free loopback port, prints it, and serves until
// its standard input closes.
func serveTrivial() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{Handler: http.HandlerFunc(trivialHandler)}
	go func() { _ = srv.Serve(ln) }()
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
}

// startTrivialServer runs serveTrivial in a child process.
func startTrivialServer(b *testing.B) string {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), trivialServerEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(addr)
}

// BenchmarkReplay5000 replays Poisson arrivals at 5,000 requests/s for 5 s
// against a trivial HTTP server in a separate process and reports how well
// the schedule held: sends per second, sends more than 1 ms late, lateness
// percentiles, and the replayer's CPU per request. Run it with
// -benchtime=1x. BenchmarkReplay5000InProcess puts the server in the
// replayer's process (sharing its Go scheduler).
func BenchmarkReplay5000(b *testing.B) { benchReplay(b, startTrivialServer(b)) }

func BenchmarkReplay5000InProcess(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(trivialHandler))
	defer srv.Close()
	benchReplay(b, strings.TrimPrefix(srv.URL, "http://"))
}

func benchReplay(b *testing.B, addr string) {
	tp := topo(b, addr)
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
		b.ReportMetric(float64(cpu.Microseconds())/float64(sum.Sent), "cpu_us/req")
		b.ReportMetric(float64(sum.Sent)/sum.ScheduleS, "sent/s")
		b.ReportMetric(100*float64(sum.Lateness.LateSends)/float64(sum.Sent), "late_%")
		b.ReportMetric(sum.Lateness.P99LateMs, "p99_late_ms")
		b.ReportMetric(sum.Lateness.MaxLateMs, "max_late_ms")
		b.ReportMetric(float64(sum.Errors["transport"]+sum.Errors["timeout"]+sum.Dropped), "failed")
		b.ReportMetric(*sum.Latency.P99, "p99_ms")
	}
}
