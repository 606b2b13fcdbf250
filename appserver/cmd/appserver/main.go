// Command appserver is RobinHood's application server: it serves requests
// (one trace line per POST /v1/request) by looking every query up in its
// backend's memcached partition, fetching the misses from a backend replica
// and filling the cache, and reports each request's latency and blocking
// backend to the RBC server. See docs/appserver.md.
//
//	appserver --topology topology.yaml --id app0
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/cache"
	"github.com/robinhoodcache/robinhood/appserver/report"
	"github.com/robinhoodcache/robinhood/appserver/server"
	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/bytesize"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/dispatch"
	"github.com/robinhoodcache/robinhood/lib/redislog"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("appserver", flag.ContinueOnError)
	topoPath := fs.String("topology", "", "topology file (YAML; docs/topology.md)")
	id := fs.String("id", "", "this application server's id in the topology")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	bounds := boundFlags(fs)
	shadowBytes := fs.String("shadow-bytes", bytesize.Format(server.DefaultShadowBytes), "shadow region of each partition's shadow model: misses that this much more cache would have hit are reported as shadow hits")
	noStats := fs.Bool("no-stats", false, "do not report per-backend statistics (hits, misses, shadow hits, query latencies) with the RBC batches")
	check := fs.Bool("check", false, "validate the topology and this app server's settings (dispatch policy parameters among them), print what would run, and exit")
	listDispatch := fs.Bool("list-dispatch-policies", false, "print every registered dispatch policy, one a line (name, parameters with defaults, summary), and exit; on stderr, how to pick one")
	listJSON := fs.Bool("json", false, "with --list-dispatch-policies: print the policies and their parameters' declarations (type, range, default, doc) as JSON")
	var sec auth.ServerOptions
	sec.Register(fs)
	listen := fs.String("http-addr", "", "listen address (default: the app server's http address in the topology; set it when that name is not local, e.g. 0.0.0.0:8080 behind a container service name)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: appserver --topology FILE --id ID [flags]\n       appserver --list-dispatch-policies [--json]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "appserver: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usage("--log-level %q is not one of debug, info, warn, error", *logLevel)
	}
	if *listDispatch && *listJSON {
		out, _ := json.MarshalIndent(dispatch.Describe(), "", "  ")
		fmt.Println(string(out))
		return 0
	}
	if *listDispatch {
		fmt.Fprintln(os.Stderr, adviseLine)
		printDispatchPolicies(os.Stdout)
		return 0
	}
	if *topoPath == "" {
		return usage("--topology is required")
	}
	if *id == "" {
		return usage("--id is required")
	}
	for i, f := range serverBounds {
		if v := bounds[i](); v <= 0 {
			return usage("--%s %d must be positive", f.name, v)
		}
	}
	shadow, err := bytesize.Parse(*shadowBytes)
	if err != nil || shadow <= 0 {
		return usage("--shadow-bytes: %q must be a positive byte size (%s)", *shadowBytes, bytesize.Hint)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	redislog.Use(log) // Redis partitions: connection trouble as structured lines

	topo, err := config.LoadTopology(*topoPath)
	if err != nil {
		return usage("%v", err)
	}
	// Its own credentials (auth.token with {id} = --id, tls) for the
	// backends and the RBC server; the servers' settings for its listener.
	creds, err := auth.ClientFromTopology(topo, *id)
	if err != nil {
		return usage("%v", err)
	}
	sec = sec.FromTopology(topo, config.SetFlags(fs))
	cfg := server.Config{Topology: topo, AppServerID: *id, Logger: log, ShadowBytes: shadow, NoStats: *noStats, Credentials: creds}
	for i, f := range serverBounds {
		f.set(&cfg, bounds[i]())
	}
	srv, err := server.New(cfg)
	if err != nil {
		return usage("%v", err)
	}
	defer srv.Close()
	app := srv.AppServer()
	addr := app.HTTP
	if *listen != "" {
		addr = *listen
	}
	if addr == "" {
		return usage("app server %s has no http address in the topology: bin/appserver serves requests there (or give --http-addr)", app.ID)
	}
	guard, err := auth.NewGuard(sec, map[string]string{"--http-addr": addr}, log)
	if err != nil {
		return usage("%v", err)
	}
	if *check {
		fmt.Printf("app server %s: valid (cache_mode %s, dispatch %s, %d backends)\n", app.ID, app.CacheMode, app.Dispatch.Policy, len(topo.Backends))
		return 0
	}

	return serve(log, srv, guard, addr, topo)
}

// adviseLine is what --list-dispatch-policies writes to stderr beside the list:
// no dispatch policy is the one to run everywhere, the best depends on the
// backend's jitter (docs/hedging.md).
const adviseLine = "# which to run depends on the backend: measure its jitter (bin/backendload --addr ADDR --measure --json > jitter.json) " +
	"and let bin/sim advise --measured jitter.json pick (docs/hedging.md)"

// serverBounds are the flags of server.Config's sizes and bounds, each
// positive, in the order they are checked.
var serverBounds = []struct {
	name, help string
	def        any // int, int64 or time.Duration: the flag's type and default
	set        func(c *server.Config, v int64)
}{
	{"memcached-conns", "connections per memcached instance (at least the expected concurrent requests)",
		int(server.DefaultMemcachedConns), func(c *server.Config, v int64) { c.MemcachedConns = int(v) }},
	{"memcached-item-max", "memcached item size limit in bytes (memcached -I); larger values are not cached",
		int(server.DefaultMemcachedItemMax), func(c *server.Config, v int64) { c.MemcachedItemMax = int(v) }},
	{"fill-queue", "values waiting to be stored, per backend; more are dropped and counted",
		int(cache.DefaultFillQueue), func(c *server.Config, v int64) { c.FillQueue = int(v) }},
	{"fill-workers", "goroutines storing values, per backend",
		int(cache.DefaultFillWorkers), func(c *server.Config, v int64) { c.FillWorkers = int(v) }},
	{"rbc-buffer", "request records buffered for the next RBC batch; more are dropped and counted",
		int(report.DefaultBufferLen), func(c *server.Config, v int64) { c.RBCBuffer = int(v) }},
	{"max-body-bytes", "largest accepted request body",
		int64(server.DefaultMaxBodyBytes), func(c *server.Config, v int64) { c.MaxBodyBytes = v }},
	{"max-request-bytes", "most value bytes one request may ask for in all (the sum of its sizes); a larger one is refused with 413 before anything is sent",
		int64(server.DefaultMaxRequestBytes), func(c *server.Config, v int64) { c.MaxRequestBytes = v }},
	{"cache-timeout", "bound on one memcached operation; after three in a row go unanswered the instance is bypassed (circuit breaker) and probed again later",
		time.Duration(server.DefaultCacheTimeout), func(c *server.Config, v int64) { c.CacheTimeout = time.Duration(v) }},
}

// boundFlags registers serverBounds; the functions give their values.
func boundFlags(fs *flag.FlagSet) []func() int64 {
	out := make([]func() int64, len(serverBounds))
	for i, f := range serverBounds {
		switch d := f.def.(type) {
		case int:
			p := fs.Int(f.name, d, f.help)
			out[i] = func() int64 { return int64(*p) }
		case int64:
			p := fs.Int64(f.name, d, f.help)
			out[i] = func() int64 { return *p }
		case time.Duration:
			p := fs.Duration(f.name, d, f.help)
			out[i] = func() int64 { return int64(*p) }
		}
	}
	return out
}

// serve serves the app server's HTTP API at addr until SIGINT or SIGTERM,
// then shuts down; its exit status.
func serve(log *slog.Logger, srv *server.Server, guard *auth.Guard, addr string, topo *config.Topology) int {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("cannot listen", "addr", addr, "err", err)
		return 1
	}
	hs := &http.Server{
		Handler:           guard.HTTP(srv.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	app := srv.AppServer()
	log.Info("serving", "id", app.ID, "http", l.Addr().String(), "cache_mode", app.CacheMode,
		"request_timeout", time.Duration(app.RequestTimeout), "backend_timeout", time.Duration(app.BackendTimeout),
		"rbc_server", topo.RBCServer.GRPC, "security", guard.Describe())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	guard.ReloadOnHUP(ctx)
	go func() { errc <- hs.Serve(guard.Listener(l)) }()
	select {
	case err := <-errc:
		log.Error("HTTP server failed", "err", err)
		return 1
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("HTTP shutdown", "err", err)
	}
	<-errc
	return 0
}

// printDispatchPolicies writes one line per registered dispatch policy: its
// name, its parameters with their defaults, and what it does.
func printDispatchPolicies(w io.Writer) {
	for _, d := range dispatch.Describe() {
		parts := []string{d.Name}
		for _, p := range d.Params {
			parts = append(parts, fmt.Sprintf("%s=%v", p.Name, p.Default))
		}
		fmt.Fprintf(w, "%s -- %s\n", strings.Join(parts, " "), d.Summary)
	}
}
