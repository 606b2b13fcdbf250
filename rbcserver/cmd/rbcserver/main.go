// Command rbcserver is RobinHood's RBC (request blocking count) server: it
// ingests per-request records from application servers over gRPC and
// answers blocking counts on demand over gRPC and HTTP. See
// docs/rbcserver.md.
//
// Usage (every setting of the topology's rbc_server block, which --topology
// reads, can be given or overridden by its flag):
//
//	rbcserver [--topology FILE] [--grpc-addr 127.0.0.1:7070] [--http-addr 127.0.0.1:7071]
//	          [--ring-size 1000000] [--window 5s] [--low-pct 98.5] [--high-pct 99.5]
//	          [--max-backends 1024] [--shutdown-timeout 10s] [--log-level info]
//	          [--auth-token-file FILE] [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]] [--insecure]
//
// A non-loopback --grpc-addr or --http-addr needs --auth-token-file (or
// --insecure); docs/security.md.
//
// Unless GOMEMLIMIT is set, the Go runtime gets a soft memory limit of
// 48 MiB + 28 bytes per ring record (about 75 MiB for the default ring).
//
// Exit status: 0 after a shutdown by SIGTERM or SIGINT, 1 when a listener
// fails, 2 for invalid flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/rbcserver/otlp"
	"github.com/robinhoodcache/robinhood/rbcserver/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// options are the command-line flags.
type options struct {
	grpcAddr, httpAddr string
	cfg                server.Config
	shutdownTimeout    time.Duration
	logLevel           slog.Level
	sec                auth.ServerOptions
}

// errReported is a flag error the flag package already printed.
var errReported = errors.New("invalid flags")

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{cfg: server.DefaultConfig()}
	def := o.cfg
	fs := flag.NewFlagSet("rbcserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	topoPath := fs.String("topology", "", "topology `file`: start from its rbc_server block (addresses, window, ring size, band); flags override it")
	grpcAddr := fs.String("grpc-addr", "", "gRPC listen address (RBCService, health, reflection) (default: rbc_server.grpc of the topology, else 127.0.0.1:7070)")
	httpAddr := fs.String("http-addr", "", "HTTP listen address (/v1/rbc, /metrics, /healthz) (default: rbc_server.http of the topology, else 127.0.0.1:7071)")
	ringSize := fs.Int("ring-size", def.RingSize, "records kept (the newest ones), 16 bytes each (rbc_server.ring_size)")
	window := fs.String("window", def.Window.String(), "default GetRBC window: records that arrived in the last `duration` (rbc_server.window)")
	lowPct := fs.Float64("low-pct", def.LowPct, "default lower percentile of the RBC band, in (0, 100] (rbc_server.low_pct)")
	highPct := fs.Float64("high-pct", def.HighPct, "default upper percentile of the RBC band, in (0, 100] (rbc_server.high_pct)")
	statsRetention := fs.String("stats-retention", def.StatsRetention.String(), "how long per-backend statistics are kept: the longest GetStats window (rbc_server.stats_retention)")
	fs.IntVar(&o.cfg.MaxBackends, "max-backends", o.cfg.MaxBackends, "backend ids must be below this")
	fs.Float64Var(&o.cfg.MaxAppShare, "max-app-share", o.cfg.MaxAppShare, "no app server's records weigh more in the window than this many times the mean of the other app servers' records: beyond it they are thinned to that, evenly, never refused (0: no bound; docs/rbcserver.md)")
	fs.Float64Var(&o.cfg.MaxBatchFraction, "max-batch-fraction", o.cfg.MaxBatchFraction, "no batch may hold more than this fraction of the ring")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown may take before connections are closed")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	o.sec.Register(fs)
	otlpRequest := fs.String("otlp-request", "server", "OTLP traces: which server spans are requests: server (every server span, with or without a parent), root (root spans only) or service:NAME (every server span of service NAME) (docs/opentelemetry.md)")
	otlpCallers := fs.String("otlp-callers", "otlp", "with --topology, the callers whose OTLP exports are taken, comma-separated: a token's caller, or otlp without tokens (Report batches are taken from the topology's app servers only)")
	otlpAttrs := fs.String("otlp-backend-attrs", "peer.service,server.address", "OTLP traces: the attributes of a client span naming its backend, tried in order; names map to ids through --topology's backends (a decimal value is an id)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, errReported // the flag package printed it with the usage
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q: rbcserver takes flags only", fs.Args())
	}
	// The rbc_server block: from the topology, with the flags given on top,
	// validated by the schema's rules (one set of rules for both sources).
	block := map[string]any{}
	set := config.SetFlags(fs)
	if *topoPath != "" {
		doc, err := config.ReadTopologyDoc(*topoPath)
		if err != nil {
			return o, err
		}
		t, err := config.TopologyFrom(doc)
		if err != nil {
			return o, fmt.Errorf("topology %s: %w", *topoPath, err)
		}
		o.sec = o.sec.FromTopology(t, set)
		o.cfg.Reporters, o.cfg.OTLPCallers = map[string]bool{}, map[string]bool{}
		for _, a := range t.AppServers {
			o.cfg.Reporters[a.ID] = true
		}
		for _, c := range strings.Split(*otlpCallers, ",") {
			if c = strings.TrimSpace(c); c != "" {
				o.cfg.OTLPCallers[c] = true
			}
		}
		o.cfg.OTLP.Backends = map[string]uint32{}
		for _, b := range t.Backends {
			o.cfg.OTLP.Backends[b.Name] = b.ID
		}
		block = doc["rbc_server"].(map[string]any)
	}
	var ov config.Overrides
	for _, f := range []struct {
		flag, field string
		v           any
	}{
		{"grpc-addr", "grpc", *grpcAddr}, {"http-addr", "http", *httpAddr}, {"ring-size", "ring_size", int64(*ringSize)},
		{"window", "window", *window}, {"low-pct", "low_pct", *lowPct}, {"high-pct", "high_pct", *highPct},
		{"stats-retention", "stats_retention", *statsRetention},
	} {
		if set[f.flag] {
			ov.Set(block, "rbc_server", f.field, f.flag, f.v)
		}
	}
	rs, err := config.ReadRBCSettings(block, "rbc_server")
	if err != nil {
		return o, ov.Annotate(err)
	}
	o.cfg.RingSize, o.cfg.Window, o.cfg.LowPct, o.cfg.HighPct = rs.RingSize, rs.Window.D(), rs.LowPct, rs.HighPct
	o.cfg.StatsRetention = rs.StatsRetention.D()
	o.grpcAddr, o.httpAddr = rs.GRPC, rs.HTTP
	if o.grpcAddr == "" {
		o.grpcAddr = "127.0.0.1:7070"
	}
	if o.httpAddr == "" {
		o.httpAddr = "127.0.0.1:7071"
	}
	if err := o.cfg.Validate(); err != nil {
		return o, err
	}
	if err := o.sec.Validate(); err != nil {
		return o, err
	}
	if o.cfg.OTLP.Mode, o.cfg.OTLP.Service, err = otlp.ParseRequestMode(*otlpRequest); err != nil {
		return o, err
	}
	for _, a := range strings.Split(*otlpAttrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.cfg.OTLP.BackendAttrs = append(o.cfg.OTLP.BackendAttrs, a)
		}
	}
	if len(o.cfg.OTLP.BackendAttrs) == 0 {
		return o, fmt.Errorf("--otlp-backend-attrs %q: give at least one attribute key", *otlpAttrs)
	}
	if o.shutdownTimeout <= 0 {
		return o, fmt.Errorf("--shutdown-timeout %v must be positive", o.shutdownTimeout)
	}
	return o, nil
}

func run(args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errReported) {
		return 2
	}
	if err != nil {
		usageError(stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	o.cfg.Logger = log
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := memoryLimit(o.cfg.RingSize)
		debug.SetMemoryLimit(limit)
		log.Debug("soft memory limit set", "bytes", limit)
	}

	guard, err := auth.NewGuard(o.sec, map[string]string{"--grpc-addr": o.grpcAddr, "--http-addr": o.httpAddr}, log)
	if err != nil {
		usageError(stderr, err)
		return 2
	}
	o.cfg.Security = guard
	srv, err := server.New(o.cfg)
	if err != nil {
		usageError(stderr, err)
		return 2
	}
	grpcLis, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		log.Error("cannot listen for gRPC", "addr", o.grpcAddr, "err", err)
		return 1
	}
	httpLis, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		grpcLis.Close()
		log.Error("cannot listen for HTTP", "addr", o.httpAddr, "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	guard.ReloadOnHUP(ctx)
	if err := srv.Serve(ctx, grpcLis, httpLis, o.shutdownTimeout); err != nil {
		log.Error("rbcserver failed", "err", err)
		return 1
	}
	return 0
}

// usageError prints err, one "rbcserver:" line per problem.
func usageError(w io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(w, "rbcserver: %s\n", line)
	}
}

// memoryLimit is the default soft memory limit of the Go runtime (unless
// GOMEMLIMIT is set): the ring (16 bytes per record), the GetRBC snapshot
// buffers (12 bytes per record) and 48 MiB for everything else. Without it
// the collector lets the heap grow to twice the live data, and under a
// flood of batches the server's resident memory would reach about twice
// the ring's size plus the garbage of incoming messages.
func memoryLimit(ringSize int) int64 {
	return 48<<20 + 28*int64(ringSize)
}
