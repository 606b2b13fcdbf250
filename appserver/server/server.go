// Package server is the application server's request path (docs/appserver.md): it
// takes one request (a trace line) over HTTP, runs its layers in sequence
// and, within a layer, every backend's batch in parallel — multi-get from
// the backend's cache partition, fetch the misses from one replica, queue
// the cacheable values for a background fill — then answers with the
// request's latency and blocking backend, and records both for the RBC
// server. docs/appserver.md describes the HTTP interface.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/robinhoodcache/robinhood/appserver/cache"
	"github.com/robinhoodcache/robinhood/appserver/replicas"
	"github.com/robinhoodcache/robinhood/appserver/report"
	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/dialopts"
	"github.com/robinhoodcache/robinhood/lib/dispatch"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Defaults of Config.
const (
	DefaultMemcachedConns = 128
	// DefaultCacheTimeout bounds one cache operation (memcached or Redis):
	// a healthy local instance answers in well under a millisecond, and
	// one that does not answer in this long is bypassed by the circuit
	// breaker after three in a row (docs/appserver.md).
	DefaultCacheTimeout     = 50 * time.Millisecond
	DefaultMemcachedItemMax = 1 << 20
	DefaultMaxBodyBytes     = 8 << 20
	// DefaultMaxRequestBytes bounds the value bytes one request may ask for
	// in all (the sum of its queries' sizes).
	DefaultMaxRequestBytes = 16 << 20
)

// Config configures a Server. Zero values mean the defaults.
type Config struct {
	// Topology is the deployment; AppServerID selects this server's entry.
	Topology    *config.Topology
	AppServerID string
	// Logger receives startup, shutdown and state-change lines (nothing per
	// request above debug level).
	Logger *slog.Logger
	// CacheTimeout bounds one cache operation, memcached or Redis (0:
	// DefaultCacheTimeout).
	CacheTimeout time.Duration
	// MemcachedConns bounds the connections to each cache instance
	// (memcached or Redis); idle ones are kept open for reuse. It should be
	// at least the expected number of concurrent requests.
	MemcachedConns int
	// MemcachedItemMax is the memcached item size limit (-I); larger
	// values are not cached.
	MemcachedItemMax int
	// FillQueue and FillWorkers size each backend's fill queue.
	FillQueue, FillWorkers int
	// RBCBuffer bounds the records waiting for the next RBC batch.
	RBCBuffer int
	// ReportInterval is the RBC batch interval (default 1 s).
	ReportInterval time.Duration
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// MaxRequestBytes bounds the sum of the sizes a request asks for; a
	// larger one is refused (413) before anything is sent.
	MaxRequestBytes int64
	// ShadowBytes is the shadow region of each partition's shadow model
	// (shadow hits: misses that this much more cache would have hit).
	ShadowBytes int64
	// ShadowQueue bounds the queries waiting for the shadow models; more
	// are dropped and counted.
	ShadowQueue int
	// NoStats turns the per-backend statistics off (no backend_stats in the
	// RBC batches, no shadow models).
	NoStats bool
	// Credentials are the app server's token and TLS settings for the
	// backends and the RBC server (docs/security.md); nil: none.
	Credentials *auth.Client
}

// Server serves one application server's requests. It owns its background
// goroutines (the RBC reporter and the fill workers); Close stops them.
type Server struct {
	app            *config.AppServer
	log            *slog.Logger
	backends       map[string]*backend
	names          string // the topology's backend names, for error messages
	clients        []cache.Store
	itemMax        int
	maxBody        int64
	maxRequest     int64
	requestTimeout time.Duration
	backendTimeout time.Duration
	m              *metrics
	reporter       *report.Reporter
	stats          *statsCollector // nil when statistics are off or nothing reports
	rbcConn        *grpc.ClientConn
	stopReporter   context.CancelFunc
	reporterDone   chan struct{}
	closeOnce      sync.Once
	bufs           sync.Pool
}

// backend is one backend as this application server sees it.
type backend struct {
	name       string
	id         uint32
	replicas   *replicas.Replicas
	dispatcher *replicas.Dispatcher
	cache      cache.Store // memcached or Redis; nil in cache mode none
	filler     *cache.Filler
	m          backendMetrics
	stats      backendStats
}

// New builds a server for cfg.AppServerID and starts its background
// goroutines. Connections are made on first use, so the caches, backends
// and RBC server need not be up yet.
func New(cfg Config) (_ *Server, err error) {
	if cfg.Topology == nil {
		return nil, errors.New("server: no topology")
	}
	app, ok := cfg.Topology.AppServer(cfg.AppServerID)
	if !ok {
		ids := make([]string, 0, len(cfg.Topology.AppServers))
		for _, a := range cfg.Topology.AppServers {
			ids = append(ids, a.ID)
		}
		return nil, fmt.Errorf("--id %q: no such application server in the topology (it has: %s)", cfg.AppServerID, strings.Join(ids, ", "))
	}
	where := "app_servers[" + strconv.Itoa(appIndex(cfg.Topology, app.ID)) + "].dispatch"
	if _, err := dispatch.Params(app.Dispatch); err != nil {
		return nil, fmt.Errorf("%s.%w", where, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MemcachedConns <= 0 {
		cfg.MemcachedConns = DefaultMemcachedConns
	}
	if cfg.MemcachedItemMax <= 0 {
		cfg.MemcachedItemMax = DefaultMemcachedItemMax
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	s := &Server{
		app:            app,
		log:            cfg.Logger,
		backends:       map[string]*backend{},
		itemMax:        cfg.MemcachedItemMax,
		maxBody:        cfg.MaxBodyBytes,
		maxRequest:     cfg.MaxRequestBytes,
		requestTimeout: time.Duration(app.RequestTimeout),
		backendTimeout: time.Duration(app.BackendTimeout),
		m:              newMetrics(),
		reporterDone:   make(chan struct{}),
	}
	defer func() {
		if err != nil {
			s.closeResources()
		}
	}()

	if cfg.CacheTimeout <= 0 {
		cfg.CacheTimeout = DefaultCacheTimeout
	}
	copt := cache.Options{MaxConns: cfg.MemcachedConns, Timeout: min(cfg.CacheTimeout, s.backendTimeout)}
	var shared *cache.Client
	if app.CacheMode == config.CacheShared {
		shared = cache.NewClient(app.SharedCache, copt)
		s.clients = append(s.clients, shared)
	}
	names := make([]string, 0, len(cfg.Topology.Backends))
	for _, tb := range cfg.Topology.Backends {
		names = append(names, tb.Name)
		if err := s.addBackend(cfg, tb, copt, shared, where); err != nil {
			return nil, err
		}
	}
	sort.Strings(names)
	s.names = strings.Join(names, ", ")
	if err := s.startReporter(cfg); err != nil {
		return nil, err
	}
	s.registerFuncMetrics()
	return s, nil
}

// addBackend dials a backend's replicas, builds its dispatcher and, in the
// partitioned and shared modes, its cache client and filler; each with its
// metrics.
func (s *Server) addBackend(cfg Config, tb config.Backend, copt cache.Options, shared *cache.Client, where string) error {
	app := s.app
	rs, err := replicas.Dial(tb, cfg.Credentials.DialOptions()...)
	if err != nil {
		return err
	}
	rs.AttemptTimeout = s.backendTimeout
	be := &backend{name: tb.Name, id: tb.ID, replicas: rs, m: s.m.forBackend(tb.Name)}
	s.backends[tb.Name] = be
	if be.dispatcher, err = replicas.Build(app.Dispatch, rs); err != nil {
		return fmt.Errorf("%s: backend %s: %w", where, tb.Name, err)
	}
	s.registerReplicaMetrics(tb.Name, rs, be.dispatcher)
	switch app.CacheMode {
	case config.CachePartitioned:
		c, err := s.partitionCache(tb.Name, copt, where)
		if err != nil {
			return err
		}
		be.cache = c
	case config.CacheShared:
		be.cache = shared
	}
	if be.cache != nil {
		bm := be.m
		be.filler = cache.NewFiller(be.cache, cache.FillOptions{
			QueueLen: cfg.FillQueue,
			Workers:  cfg.FillWorkers,
			Timeout:  s.backendTimeout,
			Done: func(err error) {
				switch {
				case err == nil:
					bm.fills.Inc()
				case errors.Is(err, cache.ErrTooLarge):
					bm.fillTooLarge.Inc()
				default:
					bm.cacheEr(cache.ErrorKind(err)).Inc()
				}
			},
		})
	}
	return nil
}

// registerReplicaMetrics registers a backend's retry, ejection and rotation
// metrics and its dispatcher's.
func (s *Server) registerReplicaMetrics(name string, rs *replicas.Replicas, d *replicas.Dispatcher) {
	lbl := prometheus.Labels{"backend": name}
	s.m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "appserver_backend_retries_total", ConstLabels: lbl,
			Help: "Batches retried on another replica after their replica failed with Unavailable or did not answer within backend_timeout."},
			func() float64 { return float64(d.Stats().Retries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "appserver_replica_ejections_total", ConstLabels: lbl,
			Help: "Times a replica was taken out of rotation after failing calls in a row (passive health checks)."},
			func() float64 { return float64(rs.Ejections()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "appserver_replica_readmissions_total", ConstLabels: lbl,
			Help: "Ejected replicas readmitted early because they passed an active gRPC health check after at least 1 s out."},
			func() float64 { return float64(rs.Readmissions()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "appserver_replicas_in_rotation", ConstLabels: lbl,
			Help: "Replicas not ejected (all of them when every one is: a backend is never given up on)."},
			func() float64 {
				n := 0
				for i := range rs.Len() {
					if rs.Healthy(i) {
						n++
					}
				}
				return float64(n)
			}),
		newDispatchCollector(name, d))
}

// partitionCache is the client of a backend's cache partition (memcached or
// Redis), with its circuit breaker's metrics.
func (s *Server) partitionCache(name string, copt cache.Options, where string) (cache.Store, error) {
	var c cache.Store
	if p := s.app.Partitions[name]; p.Store() == config.StoreRedis {
		pw, err := p.Password()
		if err != nil {
			return nil, fmt.Errorf("%s: partition %s: %w", where, name, err)
		}
		ropt := copt
		ropt.Username, ropt.Password = p.User, pw
		c = cache.NewRedisClient(p.Endpoint(), ropt)
	} else {
		c = cache.NewClient(p.Endpoint(), copt)
	}
	s.clients = append(s.clients, c)
	s.warnUnresolvable(name, s.app.Partitions[name].Endpoint())
	lbl := prometheus.Labels{"backend": name}
	s.m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "appserver_cache_breaker_openings_total", ConstLabels: lbl,
			Help: "Times the circuit breaker in front of the backend's cache partition (memcached or Redis) opened (three operations in a row unanswered)."},
			func() float64 { return float64(c.BreakerOpenings()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "appserver_cache_bypassed", ConstLabels: lbl,
			Help: "1 while the backend's cache partition (memcached or Redis) is bypassed by its circuit breaker."},
			func() float64 {
				if c.Bypassed() {
					return 1
				}
				return 0
			}))
	return c, nil
}

// startReporter connects to the RBC server and starts the reporter (and the
// statistics collector, unless NoStats); without an rbc_server.grpc
// address, nothing is reported.
func (s *Server) startReporter(cfg Config) error {
	app := s.app
	var err error
	ctx, cancel := context.WithCancel(context.Background())
	s.stopReporter = cancel
	if addr := cfg.Topology.RBCServer.GRPC; addr != "" {
		s.rbcConn, err = grpc.NewClient(addr, append(cfg.Credentials.DialOptions(), dialopts.Reconnect())...)
		if err != nil {
			cancel()
			return fmt.Errorf("rbc_server.grpc %q: %w", addr, err)
		}
		if !cfg.NoStats {
			if cfg.ShadowBytes <= 0 {
				cfg.ShadowBytes = DefaultShadowBytes
			}
			if cfg.ShadowQueue <= 0 {
				cfg.ShadowQueue = DefaultShadowQueue
			}
			bes := make([]*backend, 0, len(s.backends))
			for _, tb := range cfg.Topology.Backends {
				bes = append(bes, s.backends[tb.Name])
			}
			s.stats = newStatsCollector(bes, cfg.ShadowBytes, int64(app.CacheBudgetMB)<<20, cfg.ShadowQueue,
				app.CacheMode == config.CachePartitioned)
		}
		var statsFn func() []*pb.BackendStats
		if s.stats != nil {
			statsFn = s.stats.drain
		}
		s.reporter = report.New(pb.NewRBCServiceClient(s.rbcConn), report.Options{
			Stats:       statsFn,
			AppServerID: app.ID,
			BufferLen:   cfg.RBCBuffer,
			Interval:    cfg.ReportInterval,
			Logger:      s.log.With("component", "rbc-reporter", "rbc_server", addr),
		})
		go func() {
			defer close(s.reporterDone)
			s.reporter.Run(ctx)
		}()
	} else {
		close(s.reporterDone)
		s.log.Warn("the topology has no rbc_server.grpc address; request records are not reported")
	}
	return nil
}

// warnUnresolvable logs, at start, a cache partition whose host name does
// not resolve: the app server starts anyway (the name may resolve later; its
// requests go to the backend meanwhile), and every failed lookup after is
// counted in appserver_cache_errors_total{kind="resolve"}.
func (s *Server) warnUnresolvable(partition, addr string) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		s.log.Warn("cache partition host does not resolve; its requests go to the backend until it does",
			"partition", partition, "addr", addr, "err", err)
	}
}

// appIndex is the position of app server id in the topology, for error
// paths.
func appIndex(t *config.Topology, id string) int {
	for i, a := range t.AppServers {
		if a.ID == id {
			return i
		}
	}
	return -1
}

func (s *Server) registerFuncMetrics() {
	if sc := s.stats; sc != nil {
		s.m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "appserver_shadow_events_dropped_total",
			Help: "Cacheable queries the shadow models could not take (their queue was full); the shadow hits undercount by as many.",
		}, func() float64 { return float64(sc.dropped.Load()) }))
	}
	var sent, dropped, connected func() float64
	if r := s.reporter; r != nil {
		sent = func() float64 { return float64(r.Sent()) }
		dropped = func() float64 { return float64(r.Dropped()) }
		connected = func() float64 {
			if r.Connected() {
				return 1
			}
			return 0
		}
	} else {
		sent, dropped, connected = zero, zero, zero
	}
	s.m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "appserver_rbc_records_sent_total", Help: "Request records handed to the RBC server's Report stream."}, sent),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "appserver_rbc_records_dropped_total", Help: "Request records dropped: buffer full or RBC server unreachable."}, dropped),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "appserver_rbc_connected", Help: "1 while a Report stream to the RBC server is open."}, connected),
	)
	for _, be := range s.backends {
		if f := be.filler; f != nil {
			s.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "appserver_cache_fill_queue_length",
				Help:        "Values waiting in the backend's fill queue.",
				ConstLabels: prometheus.Labels{"backend": be.name},
			}, func() float64 { return float64(f.Len()) }))
		}
	}
}

func zero() float64 { return 0 }

// AppServer returns this server's topology entry.
func (s *Server) AppServer() *config.AppServer { return s.app }

// Handler serves POST /v1/request, GET /metrics and GET /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/request", s.serveRequest)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{Registry: s.m.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// Close sends the buffered RBC records one last time, stops the fill
// workers (abandoning queued values) and closes every connection. Stop the
// HTTP server first.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stopReporter()
		<-s.reporterDone
		s.closeResources()
	})
	return nil
}

func (s *Server) closeResources() {
	if s.stats != nil {
		s.stats.close()
	}
	for _, be := range s.backends {
		if be.filler != nil {
			be.filler.Close()
		}
		if be.replicas != nil {
			_ = be.replicas.Close()
		}
	}
	for _, c := range s.clients {
		_ = c.Close()
	}
	if s.rbcConn != nil {
		_ = s.rbcConn.Close()
	}
}
