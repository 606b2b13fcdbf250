// Command backend runs one backend service: gRPC robinhood.v1.BackendService
// in front of a kv, sql or compute data path, with a capacity model whose
// limits the admin API changes at run time (docs/backends.md).
//
//	backend --type kv|sql|compute --name NAME --grpc-addr ADDR --http-addr ADDR [flags]
//
// Flags are validated before anything starts (exit status 2 with a message
// naming the flag). SIGTERM or SIGINT drains: new calls are refused, queued
// and in-service queries get --shutdown-timeout to finish, then the rest
// fail with UNAVAILABLE.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/backends/compute"
	"github.com/robinhoodcache/robinhood/backends/kv"
	"github.com/robinhoodcache/robinhood/backends/server"
	"github.com/robinhoodcache/robinhood/backends/sqldb"
	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/redislog"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errFlagSyntax) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "backend: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})).
		With("backend", cfg.Name, "type", cfg.Type)
	guard, err := auth.NewGuard(cfg.Security, map[string]string{"--grpc-addr": cfg.GRPCAddr, "--http-addr": cfg.HTTPAddr}, log)
	if err != nil {
		fmt.Fprintf(stderr, "backend: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	guard.ReloadOnHUP(ctx)
	if err := serve(ctx, cfg, guard, log); err != nil {
		log.Error("backend failed", "err", err)
		return 1
	}
	return 0
}

// openStore opens the data path of cfg.Type and registers its own metrics.
func openStore(ctx context.Context, cfg settings, reg prometheus.Registerer, log *slog.Logger) (server.Store, error) {
	switch cfg.Type {
	case config.TypeKV:
		if cfg.Redis != "" {
			redislog.Use(log)
			// Connections open on demand; the pool must not become a second
			// queue when workers is raised at run time.
			return kv.NewRedis(ctx, cfg.Name, kv.RedisOptions{Addr: cfg.Redis, PoolSize: max(cfg.Limits.Workers, 128)})
		}
		m, err := kv.NewMemory(cfg.Name, cfg.MaxBytes)
		if err != nil {
			return nil, err
		}
		labels := prometheus.Labels{"backend": cfg.Name}
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "backend_kv_items", Help: "Keys held by the in-memory kv store.", ConstLabels: labels},
				func() float64 { return float64(m.Stats().Items) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "backend_kv_bytes", Help: "Bytes charged to the in-memory kv store (keys, values, per-entry overhead); bounded by --max-bytes.", ConstLabels: labels},
				func() float64 { return float64(m.Stats().Bytes) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "backend_kv_evictions_total", Help: "Entries evicted from the in-memory kv store to stay within --max-bytes.", ConstLabels: labels},
				func() float64 { return float64(m.Stats().Evictions) }),
		)
		return m, nil
	case config.TypeSQL:
		return sqldb.Open(ctx, sqldb.Options{Name: cfg.Name, Path: cfg.DB, Rows: cfg.Rows, Conns: cfg.Limits.Workers, Logger: log})
	case config.TypeCompute:
		return compute.New(cfg.Name, cfg.MatrixSize)
	}
	return nil, fmt.Errorf("unknown type %q", cfg.Type)
}

func serve(ctx context.Context, cfg settings, guard *auth.Guard, log *slog.Logger) error {
	model, err := capacity.New(cfg.Limits, cfg.Seed, nil)
	if err != nil {
		return err
	}
	defer model.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "backend_info", Help: "Always 1; the labels describe the backend.",
		ConstLabels: prometheus.Labels{"backend": cfg.Name, "type": cfg.Type},
	})
	info.Set(1)
	reg.MustRegister(info)

	store, err := openStore(ctx, cfg, reg, log)
	if err != nil {
		return fmt.Errorf("open %s data path: %w", cfg.Type, err)
	}
	defer store.Close()

	srv, err := server.New(server.Options{Name: cfg.Name, Type: cfg.Type, Store: store, Model: model, Registry: reg, Logger: log,
		MaxBatchBytes: cfg.MaxBatchBytes})
	if err != nil {
		return err
	}

	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("--http-addr: %w", err)
	}

	g := grpc.NewServer(append(guard.GRPCOptions(), server.GRPCServerOptions()...)...)
	robinhoodv1.RegisterBackendServiceServer(g, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(robinhoodv1.BackendService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	httpSrv := &http.Server{Handler: guard.HTTP(srv.HTTPHandler()), ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() {
		if err := g.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("grpc: %w", err)
		}
	}()
	go func() {
		if err := httpSrv.Serve(guard.Listener(httpLis)); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	l := cfg.Limits
	attrs := append([]any{"grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String()}, l.Attrs()...)
	log.Info("backend ready", append(attrs, "seed", cfg.Seed, "options", options(cfg), "security", guard.Describe())...)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	case runErr = <-errc:
	}

	// Drain: refuse new calls, let queued and in-service queries finish
	// within the timeout, then fail what is left.
	srv.SetDraining(true)
	hs.Shutdown()
	drained := make(chan struct{})
	go func() { g.GracefulStop(); close(drained) }()
	timer := time.NewTimer(cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		st := model.Stats()
		log.Warn("shutdown timeout: failing the remaining queries", "queued", st.QueueLength, "in_service", st.InService)
		model.Close()
		g.Stop()
		<-drained
	}
	hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(hctx); err != nil {
		httpSrv.Close()
	}
	log.Info("backend stopped")
	return runErr
}

// options describes the type's options for the start-up log line.
func options(cfg settings) string {
	switch cfg.Type {
	case config.TypeKV:
		if cfg.Redis != "" {
			return "redis=" + cfg.Redis
		}
		return fmt.Sprintf("max_bytes=%d", cfg.MaxBytes)
	case config.TypeSQL:
		return fmt.Sprintf("db=%s rows=%d", cfg.DB, cfg.Rows)
	case config.TypeCompute:
		return fmt.Sprintf("matrix_size=%d", cfg.MatrixSize)
	}
	return ""
}
