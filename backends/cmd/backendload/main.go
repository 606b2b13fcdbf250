// Command backendload offers one backend an open-loop load of Get calls at a
// fixed query rate and prints the served rate and latency percentiles:
//
//	backendload --addr 127.0.0.1:7100 --rate 2000 --batch 10 --duration 10s
//
// Latency is measured from each call's scheduled send time. With --json the
// result is one JSON object.
//
// With --measure it measures the backend's jitter instead (docs/hedging.md,
// "Measure before hedging"): each of --queries keys is fetched --repeats
// times, one call at a time; a key's fastest call is its service time, the
// rest is jitter; it prints the stall probability and duration in
// multiples of the mean service time, the hedging bench's jitter model:
//
//	backendload --addr 127.0.0.1:7100 --measure --queries 200 --repeats 30 --json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/robinhoodcache/robinhood/backends/load"
	"github.com/robinhoodcache/robinhood/backends/server"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("backendload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:7100", "backend gRPC address")
	var c load.Config
	fs.Float64Var(&c.Rate, "rate", 1000, "offered load, queries (keys) per second")
	fs.IntVar(&c.Batch, "batch", 10, "keys per Get call")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "measured period")
	fs.DurationVar(&c.Warmup, "warmup", 2*time.Second, "load before the measured period (not counted)")
	fs.IntVar(&c.Keys, "keys", 100_000, "key space size (uniform)")
	fs.IntVar(&c.Size, "size", 100, "value size per key, bytes")
	fs.DurationVar(&c.Timeout, "timeout", 60*time.Second, "deadline per call")
	arrivals := fs.String("arrivals", "poisson", "call spacing: poisson or uniform")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of keys and gaps")
	fs.IntVar(&c.MaxInFlight, "max-inflight", 100_000, "outstanding calls beyond which due calls are dropped (and counted)")
	fs.StringVar(&c.Verify, "verify", "", "backend name: check every value against value.Bytes(name, key, size)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	measure := fs.Bool("measure", false, "measure the backend's jitter (one call at a time) instead of offering load")
	queries := fs.Int("queries", 200, "--measure: keys measured")
	repeats := fs.Int("repeats", 30, "--measure: calls per key")
	threshold := fs.Float64("threshold", 2, "--measure: a call whose jitter exceeds this many mean service times is a stall")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *measure {
		return runMeasure(*addr, *queries, *repeats, c.Size, *threshold, c.Timeout, *asJSON, stdout, stderr)
	}
	switch *arrivals {
	case "poisson":
		c.Poisson = true
	case "uniform":
	default:
		fmt.Fprintf(stderr, "backendload: --arrivals: %q is not poisson or uniform\n", *arrivals)
		return 2
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "backendload: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(server.MaxResponseBytes+16<<20)))
	if err != nil {
		fmt.Fprintf(stderr, "backendload: --addr %q: %v\n", *addr, err)
		return 2
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := load.Run(ctx, robinhoodv1.NewBackendServiceClient(conn), c)
	if err != nil && res.Calls == 0 {
		fmt.Fprintf(stderr, "backendload: %v\n", err)
		return 1
	}
	if *asJSON {
		codes := map[string]int{}
		for k, v := range res.Codes {
			codes[k.String()] = v
		}
		out := map[string]any{
			"offered_qps": res.Offered, "served_qps": res.Served,
			"calls": res.Calls, "ok": res.OK, "failed": res.Failed, "dropped": res.Dropped, "failed_by_code": codes,
			"latency_ms":         map[string]float64{"mean": ms(res.Latency.Mean), "p50": ms(res.Latency.P50), "p90": ms(res.Latency.P90), "p99": ms(res.Latency.P99), "max": ms(res.Latency.Max)},
			"queue_us_per_query": res.QueueUsMean, "service_us_per_query": res.ServiceUsMean, "mismatches": res.Mismatches,
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	} else {
		fmt.Fprintf(stdout, "offered   %.1f queries/s (%d calls of %d keys in %v; %d dropped)\n", res.Offered, res.Calls, c.Batch, c.Duration, res.Dropped)
		fmt.Fprintf(stdout, "served    %.1f queries/s\n", res.Served)
		fmt.Fprintf(stdout, "calls     %d ok, %d failed%s\n", res.OK, res.Failed, codeList(res))
		l := res.Latency
		fmt.Fprintf(stdout, "latency   mean %s  p50 %s  p90 %s  p99 %s  max %s (per call, from its scheduled send)\n",
			fmtMs(l.Mean), fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.Max))
		fmt.Fprintf(stdout, "per query queue %.0f µs, service %.0f µs (mean, as reported by the backend)\n", res.QueueUsMean, res.ServiceUsMean)
		if c.Verify != "" {
			fmt.Fprintf(stdout, "verify    %d mismatched values\n", res.Mismatches)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "backendload: %v\n", err)
		return 1
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.3fms", ms(d)) }

func codeList(r load.Result) string {
	if len(r.Codes) == 0 {
		return ""
	}
	var parts []string
	for k, v := range r.Codes {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

func runMeasure(addr string, queries, repeats, size int, threshold float64, timeout time.Duration, asJSON bool, stdout, stderr io.Writer) int {
	if queries < 1 || repeats < 2 || !(threshold > 0) {
		fmt.Fprintf(stderr, "backendload: --measure needs --queries >= 1, --repeats >= 2 and --threshold > 0 (got %d, %d, %g)\n", queries, repeats, threshold)
		return 2
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(server.MaxResponseBytes+16<<20)))
	if err != nil {
		fmt.Fprintf(stderr, "backendload: --addr %q: %v\n", addr, err)
		return 2
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	measured, err := load.MeasureJitter(ctx, robinhoodv1.NewBackendServiceClient(conn), queries, repeats, size, timeout)
	if err != nil {
		fmt.Fprintf(stderr, "backendload: %v\n", err)
		return 1
	}
	runs, clock := measured.Runs()
	m, err := load.AnalyzeJitter(runs, threshold)
	if err != nil {
		fmt.Fprintf(stderr, "backendload: %v\n", err)
		return 1
	}
	m.Clock = clock
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(m)
		return 0
	}
	fmt.Fprintf(stdout, "service   P̄ = %.3f ms (mean of each key's fastest of %d calls, %d keys; the %s's clock)\n", m.MeanServiceMs, repeats, queries, clock)
	fmt.Fprintf(stdout, "jitter    median %.2f P̄, P99 %.2f P̄, robust σ %.2f P̄\n", m.JitterP50X, m.JitterP99X, m.NoiseSigmaX)
	fmt.Fprintf(stdout, "stalls    probability %.4f, mean %.1f P̄ (jitter above %.3g P̄: --threshold %g, or the noise's median + %d σ)\n", m.StallProb, m.StallX, m.ThresholdX, threshold, load.NoiseMADs)
	fmt.Fprintf(stdout, "bench     service: {dist: exponential, mean_ms: 1}, hiccup_prob: %.4g, hiccup_ms: %.3g\n", m.StallProb, m.StallX)
	return 0
}
