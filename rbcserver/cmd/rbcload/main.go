// Command rbcload is a load generator for the RBC server. It opens K Report
// streams, each as a simulated application server with its own connection,
// sends synthetic records for a fixed duration and prints the achieved
// rate. Optionally it calls GetRBC periodically and reports that call's
// latency.
//
// Usage:
//
//	rbcload --addr 127.0.0.1:7070 --streams 16 --rate 0 --duration 10s --backends 8
//	        [--batch 1000] [--app-prefix rbcload] [--query-every 1s] [--seed 1]
//
// --rate is the total records per second over all streams; 0 sends as fast
// as the server takes them. The synthetic records (synth.go) are log-normal
// query latencies over a fan-out of up to six backends; backend 1 is slower
// in the median and backend 3 has a heavy tail, so the RBC is meaningful.
//
// Exit status: 0 when every stream finished cleanly, 1 when one failed,
// 2 for invalid flags.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/robinhoodcache/robinhood/lib/percentile"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command-line flags.
type options struct {
	addr       string
	streams    int
	rate       float64
	duration   time.Duration
	backends   int
	batch      int
	appPrefix  string
	queryEvery time.Duration
	seed       uint64
}

// errReported is a flag error the flag package already printed.
var errReported = errors.New("invalid flags")

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("rbcload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:7070", "gRPC address of the RBC server")
	fs.IntVar(&o.streams, "streams", 16, "concurrent Report streams (simulated application servers)")
	fs.Float64Var(&o.rate, "rate", 0, "total records per second over all streams; 0 = as fast as possible")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send")
	fs.IntVar(&o.backends, "backends", 8, "number of backends (ids 0…B-1)")
	fs.IntVar(&o.batch, "batch", 1000, "records per ReportRequest")
	fs.StringVar(&o.appPrefix, "app-prefix", "rbcload", "app_server_id prefix; stream i reports as <prefix>-<i>")
	fs.DurationVar(&o.queryEvery, "query-every", 0, "call GetRBC this often and report its latency; 0 = never")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic records")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, errReported
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q: rbcload takes flags only", fs.Args()))
	}
	if o.streams < 1 || o.streams > 10000 {
		errs = append(errs, fmt.Errorf("--streams %d is outside [1, 10000]", o.streams))
	}
	if !(o.rate >= 0) {
		errs = append(errs, fmt.Errorf("--rate %v must be ≥ 0 (0 = as fast as possible)", o.rate))
	}
	if o.duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration %v must be positive", o.duration))
	}
	if o.backends < 1 || o.backends > rbc.MaxBackends {
		errs = append(errs, fmt.Errorf("--backends %d is outside [1, %d]", o.backends, rbc.MaxBackends))
	}
	// 2 × 5 bytes per record at most keeps a batch under the server's
	// 16 MiB message limit.
	if o.batch < 1 || o.batch > 1_000_000 {
		errs = append(errs, fmt.Errorf("--batch %d is outside [1, 1000000]", o.batch))
	}
	if o.queryEvery < 0 {
		errs = append(errs, fmt.Errorf("--query-every %v must be ≥ 0", o.queryEvery))
	}
	return o, errors.Join(errs...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errReported):
		return 2
	case err != nil:
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "rbcload: %s\n", line)
		}
		return 2
	}
	if err := load(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "rbcload: %v\n", err)
		return 1
	}
	return 0
}

// poolRecords is the size of the synthetic record pool the streams send
// slices of: large enough that every window sees a varied sample, cheap
// enough to build (about 0.1 s).
const poolRecords = 1 << 20

// load runs the streams (and the GetRBC poller) and prints the summary.
func load(ctx context.Context, o options, stdout io.Writer) error {
	lat, be := synthesize(rand.New(rand.NewPCG(o.seed, 0x5eed)), max(poolRecords, 2*o.batch), o.backends)

	fmt.Fprintf(stdout, "rbcload: %d streams × %d records/batch to %s for %v, rate %s, %d backends\n",
		o.streams, o.batch, o.addr, o.duration, rateString(o.rate), o.backends)

	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()

	var sent atomic.Uint64
	results := make([]streamResult, o.streams)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range o.streams {
		wg.Go(func() {
			results[i] = runStream(ctx, o, i, lat, be, &sent)
		})
	}
	var queries []time.Duration
	var last *robinhoodv1.GetRBCResponse
	var queryErr error
	if o.queryEvery > 0 {
		wg.Go(func() { queries, last, queryErr = poll(ctx, o) })
	}
	wg.Wait()
	elapsed := time.Since(start)

	var accepted, rejected uint64
	var errs []error
	for i, r := range results {
		accepted += r.accepted
		rejected += r.rejected
		if r.err != nil {
			errs = append(errs, fmt.Errorf("stream %d: %w", i, r.err))
		}
	}
	fmt.Fprintf(stdout, "sent %d records in %.2f s; server accepted %d: %.0f records/s\n",
		sent.Load(), elapsed.Seconds(), accepted, float64(accepted)/elapsed.Seconds())
	if rejected > 0 {
		errs = append(errs, fmt.Errorf("the server refused %d records (a blocking backend not below its --max-backends: give --backends at most its value)", rejected))
	}
	if o.queryEvery > 0 {
		printQueries(stdout, queries, last)
		if queryErr != nil {
			errs = append(errs, fmt.Errorf("GetRBC: %w", queryErr))
		}
	}
	return errors.Join(errs...)
}

func rateString(rate float64) string {
	if rate == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f records/s", rate)
}

// streamResult is how one stream ended.
type streamResult struct {
	accepted uint64 // records the server acknowledged
	rejected uint64 // records it refused one by one
	err      error
}

// runStream sends batches on one connection until ctx ends, then closes
// the stream and returns the server's count.
func runStream(ctx context.Context, o options, i int, lat, be []uint32, sent *atomic.Uint64) streamResult {
	conn, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return streamResult{err: err}
	}
	defer conn.Close()
	// The stream outlives ctx: it is closed explicitly after the last
	// batch, so the server's response arrives.
	streamCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := robinhoodv1.NewRBCServiceClient(conn).Report(streamCtx)
	if err != nil {
		return streamResult{err: err}
	}
	id := fmt.Sprintf("%s-%d", o.appPrefix, i)
	span := len(lat) - o.batch
	off := (i * 7919 * o.batch) % (span + 1)
	var interval time.Duration // between batches of this stream
	if o.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(o.batch) * float64(o.streams) / o.rate)
	}
	next := time.Now()
	for ctx.Err() == nil {
		if interval > 0 {
			if !sleepUntil(ctx, next) {
				break
			}
			next = next.Add(interval)
			if lag := time.Since(next); lag > time.Second { // far behind: do not burst to catch up
				next = time.Now()
			}
		}
		// A new message each time: gRPC may read a sent message lazily. The
		// arrays are read-only views of the pool.
		req := &robinhoodv1.ReportRequest{AppServerId: id, LatencyUs: lat[off : off+o.batch], BlockingBackend: be[off : off+o.batch]}
		if err := stream.Send(req); err != nil {
			// The server ended the stream; its status comes from CloseAndRecv.
			break
		}
		sent.Add(uint64(o.batch))
		off += o.batch
		if off > span {
			off -= span
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return streamResult{err: err}
	}
	return streamResult{accepted: resp.GetAcceptedRecords(), rejected: resp.GetRejectedRecords()}
}

// sleepUntil waits until t or ctx's end; false means ctx ended.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// getRBCTimeout bounds one GetRBC call of the poller.
const getRBCTimeout = 10 * time.Second

// poll calls GetRBC (default parameters) every o.queryEvery until ctx
// ends and returns the call latencies and the last response.
func poll(ctx context.Context, o options) ([]time.Duration, *robinhoodv1.GetRBCResponse, error) {
	conn, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	client := robinhoodv1.NewRBCServiceClient(conn)
	ticker := time.NewTicker(o.queryEvery)
	defer ticker.Stop()
	var took []time.Duration
	var last *robinhoodv1.GetRBCResponse
	for {
		select {
		case <-ctx.Done():
			return took, last, nil
		case <-ticker.C:
		}
		// Each call gets its own deadline: one started just before the end
		// of the run is allowed to finish and counts.
		callCtx, cancel := context.WithTimeout(context.Background(), getRBCTimeout)
		start := time.Now()
		resp, err := client.GetRBC(callCtx, &robinhoodv1.GetRBCRequest{})
		cancel()
		if err != nil {
			return took, last, err
		}
		took = append(took, time.Since(start))
		last = resp
	}
}

func printQueries(w io.Writer, took []time.Duration, last *robinhoodv1.GetRBCResponse) {
	if len(took) == 0 {
		fmt.Fprintln(w, "GetRBC: no calls completed")
		return
	}
	sorted := slices.Sorted(slices.Values(took))
	at := func(pct float64) float64 { return percentile.Of(sorted, pct/100).Seconds() * 1000 }
	fmt.Fprintf(w, "GetRBC: %d calls, median %.2f ms, p95 %.2f ms, max %.2f ms\n",
		len(sorted), at(50), at(95), at(100))
	if last == nil {
		return
	}
	fmt.Fprintf(w, "last RBC: %d requests in the %gs window, band P%g–P%g = [%d, %d] µs holds %d; P50 %d µs, P99 %d µs\n",
		last.GetWindowRequests(), last.GetWindowSeconds(), last.GetLowPct(), last.GetHighPct(),
		last.GetLowLatencyUs(), last.GetHighLatencyUs(), last.GetBandRequests(),
		last.GetP50LatencyUs(), last.GetP99LatencyUs())
	backends := slices.Clone(last.GetBackends())
	slices.SortFunc(backends, func(x, y *robinhoodv1.BackendRBC) int {
		return cmp.Compare(y.GetBlockingCount(), x.GetBlockingCount())
	})
	for _, b := range backends[:min(len(backends), 5)] {
		share := 0.0
		if band := last.GetBandRequests(); band > 0 {
			share = 100 * float64(b.GetBlockingCount()) / float64(band)
		}
		fmt.Fprintf(w, "  backend %d: RBC %d (%.1f%% of the band), blocked %d of the window\n",
			b.GetBackend(), b.GetBlockingCount(), share, b.GetWindowBlocking())
	}
}
