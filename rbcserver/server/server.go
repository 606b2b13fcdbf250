// Package server is the RBC server's network shell: the gRPC RBCService
// (Report, GetRBC), the standard gRPC health and reflection services, and
// the HTTP endpoints /v1/rbc, /metrics and /healthz. The records live in a
// ring.Ring and the counts are computed by rbc.Calculator; this package
// only validates, stores, snapshots and answers.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	// A gRPC receiver of OTLP must accept gzip-compressed requests (the
	// OTLP specification; the Collector's otlp exporter compresses by
	// default), and any client may compress a Report stream.
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/otlp"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/ring"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
)

// MaxMessageBytes is the largest gRPC message the server accepts (16 MiB);
// a larger one fails with ResourceExhausted. At two packed uint32 arrays
// (≤ 10 bytes per record) a batch of a million records fits.
const MaxMessageBytes = 16 << 20

// flowWindowBytes is the HTTP/2 flow-control window per stream and per
// connection: enough for tens of thousands of records in flight.
const flowWindowBytes = 256 << 10

// Config holds the server's settings; the zero values of Clock and Logger
// mean time.Now and slog.Default().
type Config struct {
	// RingSize is the number of records kept (--ring-size).
	RingSize int
	// Window is the default time window of GetRBC (--window).
	Window time.Duration
	// StatsRetention is how long per-backend statistics are kept: the
	// longest GetStats window (--stats-retention).
	StatsRetention time.Duration
	// LowPct and HighPct are the default band (--low-pct, --high-pct).
	LowPct, HighPct float64
	// MaxBackends bounds backend ids: every id must be below it
	// (--max-backends).
	MaxBackends int
	// MaxAppShare bounds one app server's records in the window to this
	// many times the mean of the other app servers reporting in it (with two
	// reporters and the default 4, 80% of the window at most); beyond it
	// its records are thinned to the bound, never refused (shares.admit). 0
	// turns the bound off (--max-app-share).
	MaxAppShare float64
	// Reporters, when set, are the only names records are taken from: a
	// Report's app_server_id (the topology's app servers, with --topology)
	// and OTLP's caller (see OTLPCallers). Empty takes any name.
	Reporters map[string]bool
	// OTLPCallers are the names whose OTLP exports are taken when Reporters
	// is set: the caller of a token, or "otlp" without authentication
	// (--otlp-callers).
	OTLPCallers map[string]bool
	// MaxBatchFraction bounds one batch to this fraction of the ring
	// (--max-batch-fraction).
	MaxBatchFraction float64
	// Clock returns the current time; tests inject a fake one. Arrival
	// times and windows are measured on it.
	Clock func() time.Time
	// Logger receives the server's structured logs.
	Logger *slog.Logger
	// Security checks tokens and serves TLS (docs/security.md); nil: none.
	Security *auth.Guard
	// OTLP says which spans of the OTLP trace service are requests and how
	// their queries name backends (docs/opentelemetry.md).
	OTLP otlp.Config
}

// DefaultConfig returns the defaults: the topology schema's rbc_server
// settings (schema/topology.schema.yaml) and a bound of 1024 backends.
func DefaultConfig() Config {
	s, err := config.ReadRBCSettings(map[string]any{}, "")
	if err != nil {
		panic(err)
	}
	return Config{
		RingSize:         s.RingSize,
		Window:           s.Window.D(),
		StatsRetention:   s.StatsRetention.D(),
		LowPct:           s.LowPct,
		HighPct:          s.HighPct,
		MaxBackends:      rbc.DefaultMaxBackends,
		MaxAppShare:      DefaultMaxAppShare,
		MaxBatchFraction: DefaultMaxBatchFraction,
	}
}

// Defaults of the reporter bounds (docs/rbcserver.md, "One reporter's share").
const (
	DefaultMaxAppShare      = 4.0
	DefaultMaxBatchFraction = 1.0 / 16
)

// Validate checks every setting against the schema's rules for rbc_server
// (the error names the field) and the backend bound.
func (c Config) Validate() error {
	doc := map[string]any{
		"window": c.Window.String(), "ring_size": int64(c.RingSize), "low_pct": c.LowPct, "high_pct": c.HighPct,
		"stats_retention": c.StatsRetention.String(),
	}
	if _, err := config.ReadRBCSettings(doc, ""); err != nil {
		return err
	}
	if c.MaxBackends < 1 || c.MaxBackends > rbc.MaxBackends {
		return fmt.Errorf("max_backends: %d is out of range [1, %d]", c.MaxBackends, rbc.MaxBackends)
	}
	if !(c.MaxAppShare == 0 || c.MaxAppShare >= 1) || math.IsInf(c.MaxAppShare, 0) {
		return fmt.Errorf("max_app_share: %v must be 0 (off) or at least 1", c.MaxAppShare)
	}
	if !(c.MaxBatchFraction > 0 && c.MaxBatchFraction <= 1) {
		return fmt.Errorf("max_batch_fraction: %v is not in (0, 1]", c.MaxBatchFraction)
	}
	return nil
}

// Server is the RBC service. Create it with New and run it with Serve, or
// register it on a gRPC server of your own and mount Handler.
type Server struct {
	robinhoodv1.UnimplementedRBCServiceServer

	cfg      Config
	clock    func() time.Time
	epoch    time.Time // arrival times are nanoseconds since epoch
	log      *slog.Logger
	ring     *ring.Ring
	stats    *stats.Store
	shares   *shares
	defaults query
	m        *metrics
	health   *health.Server
	traces   *traceService

	draining  chan struct{} // closed by Drain
	drainOnce sync.Once

	// compute is a one-slot semaphore around the scratch state below:
	// one GetRBC computes at a time, later ones wait (or give up when
	// their context ends).
	compute   chan struct{}
	calc      rbc.Calculator
	lat, be   []uint32            // window snapshot
	published map[uint32]struct{} // backends with a blocking-count gauge
}

// New returns a server with an empty ring.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := ring.New(cfg.RingSize)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       cfg,
		clock:     cfg.Clock,
		log:       cfg.Logger,
		ring:      r,
		stats:     stats.New(cfg.StatsRetention),
		shares:    newShares(int64(cfg.Window)),
		defaults:  query{window: cfg.Window, params: rbc.Params{LowPct: cfg.LowPct, HighPct: cfg.HighPct}},
		health:    health.NewServer(),
		draining:  make(chan struct{}),
		compute:   make(chan struct{}, 1),
		published: map[uint32]struct{}{},
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.epoch = s.clock()
	s.m = newMetrics(r)
	s.traces = newTraceService(s, cfg.OTLP)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(robinhoodv1.RBCService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// now returns the current time on the arrival clock: nanoseconds since the
// server started (monotonic when Clock is time.Now).
func (s *Server) now() (time.Time, int64) {
	t := s.clock()
	return t, int64(t.Sub(s.epoch))
}

// Register adds the RBCService, the OTLP TraceService, the gRPC health
// service and server reflection to gs.
func (s *Server) Register(gs *grpc.Server) {
	robinhoodv1.RegisterRBCServiceServer(gs, s)
	collectortrace.RegisterTraceServiceServer(gs, s.traces)
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
}

// Drain starts shutting down: open Report streams end with Unavailable,
// new ones are refused, and the health services report not serving.
// It is idempotent.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		close(s.draining)
		s.health.Shutdown()
	})
}

// Serve serves gRPC on grpcLis and HTTP on httpLis until ctx ends or a
// listener fails, then shuts down: Drain, gRPC GracefulStop for at most
// grace (then Stop), HTTP Shutdown with the same deadline. It returns the
// listener error, or nil after a shutdown requested through ctx.
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener, grace time.Duration) error {
	gs := grpc.NewServer(append(s.cfg.Security.GRPCOptions(),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		// Fixed HTTP/2 flow-control windows (this turns off gRPC's
		// bandwidth-delay estimation, which grows them to megabytes per
		// connection): a client sending faster than the server stores is
		// held back by the window instead of filling the server's memory.
		grpc.InitialWindowSize(flowWindowBytes),
		grpc.InitialConnWindowSize(flowWindowBytes),
	)...)
	s.Register(gs)
	hs := &http.Server{
		Handler:           s.cfg.Security.HTTP(s.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := gs.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("gRPC server on %s: %w", grpcLis.Addr(), err)
		}
	})
	wg.Go(func() {
		if err := hs.Serve(s.cfg.Security.Listener(httpLis)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("HTTP server on %s: %w", httpLis.Addr(), err)
		}
	})
	s.log.Info("rbcserver serving",
		"grpc_addr", grpcLis.Addr().String(), "http_addr", httpLis.Addr().String(),
		"ring_size", s.cfg.RingSize, "window", s.cfg.Window.String(),
		"low_pct", s.cfg.LowPct, "high_pct", s.cfg.HighPct, "max_backends", s.cfg.MaxBackends,
		"security", s.cfg.Security.Describe(), "otlp_request", s.cfg.OTLP.ModeString(),
		"otlp_backend_attrs", strings.Join(s.cfg.OTLP.BackendAttrs, ","))

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.log.Info("rbcserver shutting down", "grace", grace.String())
	s.shutdown(gs, hs, grace)
	wg.Wait()
	s.log.Info("rbcserver stopped", "ingested_records", s.m.ingestedTotal.Load())
	return err
}

func (s *Server) shutdown(gs *grpc.Server, hs *http.Server, grace time.Duration) {
	s.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := hs.Shutdown(ctx); err != nil {
			s.log.Warn("HTTP shutdown deadline passed; closing connections", "err", err)
			_ = hs.Close()
		}
	})
	stopped := make(chan struct{})
	go func() { // ends when GracefulStop returns, which Stop below forces
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.log.Warn("gRPC graceful stop deadline passed; stopping hard")
		gs.Stop()
		<-stopped
	}
	wg.Wait()
}

// query is one resolved GetRBC request.
type query struct {
	window time.Duration
	params rbc.Params
}

// resolve fills the defaults into a request's parameters and validates
// them. The error message names the parameter and its value.
func (s *Server) resolve(windowSeconds, lowPct, highPct float64) (query, error) {
	q := s.defaults
	switch {
	case math.IsNaN(windowSeconds) || math.IsInf(windowSeconds, 0) || windowSeconds < 0:
		return query{}, fmt.Errorf("window_seconds = %v must be a finite number ≥ 0 (0 means the server's --window %v)", windowSeconds, s.cfg.Window)
	case windowSeconds >= float64(math.MaxInt64)/1e9:
		q.window = time.Duration(math.MaxInt64) // longer than anything the ring holds
	case windowSeconds > 0:
		q.window = time.Duration(windowSeconds * 1e9)
	}
	if lowPct != 0 {
		q.params.LowPct = lowPct
	}
	if highPct != 0 {
		q.params.HighPct = highPct
	}
	if err := q.params.Validate(); err != nil {
		return query{}, err
	}
	return q, nil
}
