// Package replay replays a trace open-loop against a topology's application
// servers: a scheduler sends every request at its time (the trace's ts_ms,
// or Poisson arrivals at a rate) on its own goroutine and never waits for
// answers; it measures every request's end-to-end latency, applies a
// capacity scenario in step with the clock, and writes requests.csv,
// summary.json (with the SLO series of docs/algorithms.md) and scenario.jsonl.
package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// Defaults and fixed parameters.
const (
	// RequestPath is the application servers' request endpoint.
	RequestPath        = "/v1/request"
	DefaultTimeout     = 10 * time.Second
	DefaultMaxInFlight = 20000
	DefaultMaxConns    = 2048
	// LateThreshold is how late a send may be before it counts as late
	// (late_sends, replay_late_sends_total).
	LateThreshold = time.Millisecond
	// BehindThreshold is how late a send must be for the replayer to say it
	// fell behind (a warning, fell_behind). Go's timers wake up to about
	// 1 ms late when the process is idle, so sends a little over
	// LateThreshold are jitter, not a schedule slipping.
	BehindThreshold = 10 * time.Millisecond
	// maxResponse bounds how much of an answer is read.
	maxResponse = 1 << 20
)

// Statuses other than HTTP codes.
const (
	StatusTimeout = "timeout" // no answer within --timeout
	StatusError   = "error"   // no HTTP answer (connection refused, reset, …)
	StatusDropped = "dropped" // not sent: the in-flight cap was reached
)

// Config is a replay run.
type Config struct {
	Topology *config.Topology
	// Credentials are the token and TLS settings for the app servers and
	// the backends' admin API (docs/security.md); nil: none.
	Credentials *auth.Client
	TracePath   string
	OutDir      string
	// Rate > 0 sends Poisson arrivals at that many requests/s; 0 follows
	// the trace's ts_ms.
	Rate float64
	// Duration ends the schedule; 0 means at the end of the trace.
	Duration time.Duration
	// AppServers are the ids to spread requests over; empty means all.
	AppServers []string
	// Scenario is applied in step with the replay when set; ScenarioSeed
	// drives its random walks.
	Scenario     *scenario.Scenario
	ScenarioSeed uint64
	// SLO are the SLO series parameters. A negative Warmup means
	// WarmupFraction of the run.
	SLO slo.Params
	// WarmupFraction is the warm-up as a share of the run when SLO.Warmup
	// is negative (no default of its own: the caller's SLO settings say).
	WarmupFraction float64
	Seed           uint64
	// Loop restarts the trace at its end until Duration.
	Loop        bool
	Timeout     time.Duration
	MaxInFlight int
	// MaxConns bounds the connections to each application server.
	MaxConns int
	// MetricsAddr serves /metrics while the run lasts, when set.
	MetricsAddr string
	Log         *slog.Logger
	// Progress is the interval of the progress line (default 1 s).
	Progress time.Duration
}

type appServer struct {
	id  string
	url string
}

// result is one finished (or dropped) request.
type result struct {
	send    time.Duration // from the start of the run
	latency time.Duration
	status  string
	code    int
	block   string
	app     string
}

type run struct {
	cfg     Config
	log     *slog.Logger
	apps    []appServer
	client  *http.Client
	met     *metrics
	start   time.Time
	senders sync.WaitGroup
	// jobs hands requests to idle senders; closed when the schedule ends.
	jobs chan job

	// Written by the scheduler, read by the progress line.
	sent      atomic.Int64
	dropped   atomic.Int64
	late      atomic.Int64
	maxLateNs atomic.Int64
	// intervalMaxNs is the worst lateness since the last progress line.
	intervalMaxNs atomic.Int64
	inFlight      atomic.Int64
	peak          atomic.Int64
	// lateUs is every send's lateness in µs (0 when on time); owned by
	// the scheduler until it returns.
	lateUs []uint32

	// Owned by the collector goroutine.
	rec      *slo.Recorder
	csv      *csv.Writer
	csvErr   error
	status   map[string]int64
	kinds    map[string]int64
	lastSend time.Duration
	scratch  []uint32
	lastSent int64
	lastLate int64
	errs     int64
}

func (c *Config) validate() error {
	switch {
	case c.Topology == nil:
		return errors.New("topology: required")
	case c.TracePath == "":
		return errors.New("trace: required")
	case c.OutDir == "":
		return errors.New("out: required")
	case c.Rate < 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return fmt.Errorf("rate: %v must be positive (or absent to follow ts_ms)", c.Rate)
	case c.Duration < 0:
		return fmt.Errorf("duration: %v must not be negative", c.Duration)
	case c.Loop && c.Duration == 0:
		return errors.New("loop: needs --duration")
	case c.Scenario != nil && c.Duration == 0:
		return errors.New("scenario: needs --duration")
	case c.Timeout < 0:
		return fmt.Errorf("timeout: %v must be positive", c.Timeout)
	case c.MaxInFlight < 0:
		return fmt.Errorf("max-in-flight: %d must be positive", c.MaxInFlight)
	case c.MaxConns < 0:
		return fmt.Errorf("max-conns: %d must be positive", c.MaxConns)
	case c.WarmupFraction < 0 || c.WarmupFraction >= 1:
		return fmt.Errorf("warmup: %v%% of the run must be within [0%%, 100%%)", c.WarmupFraction*100)
	}
	p := c.SLO
	p.Warmup = max(p.Warmup, 0)
	if err := p.Validate(); err != nil {
		return err
	}
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultMaxInFlight)
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConns)
	c.Progress = cmp.Or(max(c.Progress, 0), time.Second)
	c.Log = cmp.Or(c.Log, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return nil
}

// appServers are the app servers to send requests to: AppServers, or every
// one of the topology.
func (c *Config) appServers() ([]appServer, error) {
	ids, all := c.AppServers, len(c.AppServers) == 0
	if all {
		ids = c.Topology.AppServerIDs()
	}
	if len(ids) == 0 {
		return nil, errors.New("topology: no app_servers to send requests to")
	}
	var out []appServer
	seen := map[string]bool{}
	for _, id := range ids {
		a, ok := c.Topology.AppServer(id)
		switch {
		case !ok:
			return nil, fmt.Errorf("app-servers: %q is not an app server of the topology", id)
		case seen[id]:
			return nil, fmt.Errorf("app-servers: %q is given twice", id)
		case a.HTTP == "" && all:
			return nil, fmt.Errorf("topology: app server %q has no http address to send requests to", id)
		case a.HTTP == "":
			return nil, fmt.Errorf("app-servers: %q has no http address in the topology to send requests to", id)
		}
		seen[id] = true
		out = append(out, appServer{id: a.ID, url: c.Credentials.Scheme() + "://" + a.HTTP + RequestPath})
	}
	return out, nil
}

// Run replays the trace and writes the output folder. It returns the
// summary also written to summary.json. Request failures are results, not
// errors; an error means the run could not start or the trace broke off.
// Cancelling ctx stops the schedule early (the summary says so).
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	apps, err := cfg.appServers()
	if err != nil {
		return nil, err
	}
	if err := preflight(cfg.TracePath, cfg.Topology, cfg.Rate == 0); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, log: cfg.Log, apps: apps, met: newMetrics(),
		status: map[string]int64{}, kinds: map[string]int64{}}
	r.rec, err = slo.NewRecorder(cfg.SLO.Step)
	if err != nil {
		return nil, err
	}
	r.client = cfg.httpClient(len(apps))
	defer r.client.CloseIdleConnections()

	// The scenario, complete, before anything starts.
	changes, replicas, err := cfg.expandScenario(ctx, r.client)
	if err != nil {
		return nil, err
	}
	lr, err := openLines(cfg.TracePath)
	if err != nil {
		return nil, err
	}
	defer lr.close()
	sched := &schedule{lr: lr, rate: cfg.Rate, loop: cfg.Loop, until: cfg.Duration,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x6172726976616c))} // "arrival"
	stopMetrics, err := r.serveMetrics()
	if err != nil {
		return nil, err
	}
	defer stopMetrics()

	// Nothing is written before every check above has passed.
	out, err := openOutputs(cfg.OutDir)
	if err != nil {
		return nil, err
	}
	defer out.close()
	r.csv = csv.NewWriter(out.bw)
	_ = r.csv.Write([]string{"send_ms", "latency_us", "status", "blocking_backend", "app_server"})

	r.log.Info("replay starting", "trace", cfg.TracePath, "app_servers", len(apps), "rate", cfg.Rate,
		"duration", cfg.Duration, "scenario_changes", len(changes))
	r.start = time.Now()

	// The reader: trace lines to timed items, ahead of the scheduler.
	items, stopRead, readDone := readAhead(sched)

	// The collector: results to requests.csv, the recorder and metrics,
	// plus the progress line.
	results := make(chan result, 1<<16)
	collected := make(chan struct{})
	go r.collect(results, collected)

	// The scenario, in step with the same clock.
	scCtx, scCancel := context.WithCancel(ctx)
	var scTotals scenario.Totals
	var scErr error
	scDone := make(chan struct{})
	go func() {
		defer close(scDone)
		if len(changes) == 0 {
			return
		}
		ap := &scenario.Applier{Client: r.client, Replicas: replicas, Log: r.log, Out: out.scenario, Scheme: cfg.Credentials.Scheme()}
		scTotals, scErr = ap.Run(scCtx, r.start, changes)
	}()

	r.jobs = make(chan job)
	interrupted := r.schedule(ctx, items, results)
	close(r.jobs)
	close(stopRead)
	readErr := <-readDone
	schedEnd := time.Since(r.start)
	scCancel()
	<-scDone
	if interrupted {
		r.log.Warn("interrupted: waiting for the requests in flight", "in_flight", r.inFlight.Load())
	}
	r.senders.Wait()
	close(results)
	<-collected
	stopMetrics()
	r.csv.Flush()
	if err := errors.Join(r.csvErr, r.csv.Error(), out.bw.Flush()); err != nil {
		return nil, fmt.Errorf("writing requests.csv: %w", err)
	}

	end := cfg.Duration
	if end == 0 || sched.Ended || interrupted || readErr != nil {
		end = r.lastSend
	}
	if sched.Ended && cfg.Duration > 0 && !interrupted {
		r.log.Warn("the trace ended before --duration", "at_s", r.lastSend.Seconds(), "duration_s", cfg.Duration.Seconds())
	}
	sum, err := r.summary(end, schedEnd, sched, interrupted, len(changes), scTotals)
	if err != nil {
		return nil, err
	}
	if readErr != nil {
		sum.Aborted = readErr.Error()
	}
	if scErr != nil {
		sum.Scenario.Error = scErr.Error()
	}
	if err := WriteJSON(filepath.Join(cfg.OutDir, "summary.json"), sum); err != nil {
		return nil, fmt.Errorf("out: %w", err)
	}
	return sum, readErr
}

// httpClient is the client of the app servers (and the backends' admin
// API): up to MaxConns connections to each of apps app servers.
func (cfg Config) httpClient(apps int) *http.Client {
	return &http.Client{Transport: cfg.Credentials.Transport(&http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.MaxConns * apps,
		MaxIdleConnsPerHost: cfg.MaxConns,
		MaxConnsPerHost:     cfg.MaxConns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	})}
}

// expandScenario reads the backends' initial limits the scenario needs and
// expands it into its changes, and the replicas' admin addresses (nothing
// without a scenario).
func (cfg Config) expandScenario(ctx context.Context, client *http.Client) ([]scenario.Change, map[string][]string, error) {
	if cfg.Scenario == nil {
		return nil, nil, nil
	}
	replicas, err := cfg.Scenario.Replicas(cfg.Topology)
	if err != nil {
		return nil, nil, err
	}
	initial, err := scenario.ReadInitial(ctx, client, cfg.Credentials.Scheme(), replicas, cfg.Scenario.NeedsInitial())
	if err != nil {
		return nil, nil, fmt.Errorf("scenario: %w", err)
	}
	changes, err := cfg.Scenario.Expand(cfg.Duration, cfg.ScenarioSeed, initial)
	if err != nil {
		return nil, nil, err
	}
	return changes, replicas, nil
}

// serveMetrics serves the replayer's /metrics on cfg.MetricsAddr (nothing
// without one) and returns what stops it (safe to call more than once).
func (r *run) serveMetrics() (func(), error) {
	if r.cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", r.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.met.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	r.log.Info("serving metrics", "addr", ln.Addr().String())
	return sync.OnceFunc(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
		<-done
	}), nil
}

// outputs are the files a run writes as it goes.
type outputs struct {
	requests, scenario *os.File
	bw                 *bufio.Writer
}

func openOutputs(dir string) (*outputs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("out: %w", err)
	}
	reqFile, err := os.Create(filepath.Join(dir, "requests.csv"))
	if err != nil {
		return nil, fmt.Errorf("out: %w", err)
	}
	scFile, err := os.Create(filepath.Join(dir, "scenario.jsonl"))
	if err != nil {
		reqFile.Close()
		return nil, fmt.Errorf("out: %w", err)
	}
	return &outputs{requests: reqFile, scenario: scFile, bw: bufio.NewWriterSize(reqFile, 1<<20)}, nil
}

func (o *outputs) close() {
	o.requests.Close()
	o.scenario.Close()
}

// readAhead turns the schedule's trace lines into timed items on a
// goroutine of its own, ahead of the scheduler, until the trace ends or
// stop is closed; done receives its error (nil at the end).
func readAhead(sched *schedule) (items chan item, stop chan struct{}, done chan error) {
	items, stop, done = make(chan item, 8192), make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(items)
		for {
			it, err := sched.next()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				done <- err
				return
			}
			select {
			case items <- it:
			case <-stop:
				done <- nil
				return
			}
		}
	}()
	return items, stop, done
}

// schedule sends every item at its time and returns whether ctx ended it.
func (r *run) schedule(ctx context.Context, items <-chan item, results chan<- result) bool {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x61707073)) // "apps"
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var it item
		var ok bool
		select {
		case it, ok = <-items:
			if !ok {
				return false
			}
		case <-ctx.Done():
			return true
		}
		due := r.start.Add(it.offset)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return true
			}
		}
		now := time.Now()
		late := now.Sub(due)
		r.lateUs = append(r.lateUs, uint32(min(max(late.Microseconds(), 0), math.MaxUint32)))
		if late > LateThreshold {
			r.late.Add(1)
			r.met.late.Inc()
			raise(&r.maxLateNs, int64(late))
			raise(&r.intervalMaxNs, int64(late))
		}
		app := r.apps[0]
		if len(r.apps) > 1 {
			app = r.apps[rng.IntN(len(r.apps))]
		}
		send := now.Sub(r.start)
		if r.inFlight.Load() >= int64(r.cfg.MaxInFlight) {
			r.dropped.Add(1)
			r.met.dropped.Inc()
			results <- result{send: send, status: StatusDropped, app: app.id}
			continue
		}
		raise(&r.peak, r.inFlight.Add(1))
		r.met.inFlight.Inc()
		r.sent.Add(1)
		r.met.sent.Inc()
		j := job{app: app, body: it.body, send: send}
		select {
		case r.jobs <- j: // an idle sender took it
		default:
			r.senders.Add(1)
			go r.sender(j, results)
		}
	}
}

// raise sets a to v if v is larger (a has one writer, the scheduler).
func raise(a *atomic.Int64, v int64) {
	if v > a.Load() {
		a.Store(v)
	}
}

// job is one request handed to a sender.
type job struct {
	app  appServer
	body []byte
	send time.Duration
}

// senderIdle is how long an idle sender goroutine waits for another job.
const senderIdle = 2 * time.Second

// sender sends its job, then serves further jobs while it is idle for less
// than senderIdle. Every request in flight has a goroutine of its own: the
// scheduler hands a job to an idle sender only if one is waiting (an
// unbuffered send), else starts a new one, so it never waits. Reusing
// senders saves a goroutine start and its stack growth per request.
func (r *run) sender(j job, results chan<- result) {
	defer r.senders.Done()
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		res := r.do(j.app, j.body)
		r.inFlight.Add(-1)
		r.met.inFlight.Dec()
		res.send = j.send
		results <- res
		idle.Reset(senderIdle)
		var ok bool
		select {
		case j, ok = <-r.jobs:
			if !ok {
				return
			}
		case <-idle.C:
			return
		}
	}
}

// do sends one request and waits for its answer.
func (r *run) do(app appServer, body []byte) result {
	res := result{app: app.id}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, app.url, bytes.NewReader(body))
	if err != nil {
		res.status = StatusError
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := r.client.Do(req)
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(resp.Body, maxResponse))
		resp.Body.Close()
	}
	res.latency = time.Since(t0)
	if err != nil {
		res.status = failure(ctx, err)
		return res
	}
	res.code = resp.StatusCode
	res.status = strconv.Itoa(resp.StatusCode)
	var v struct {
		BlockingBackend string `json:"blocking_backend"`
	}
	if json.Unmarshal(data, &v) == nil {
		res.block = v.BlockingBackend
	}
	return res
}

func failure(ctx context.Context, err error) string {
	var ne net.Error
	if ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return StatusTimeout
	}
	return StatusError
}

// hasLatency reports whether a result's latency counts in the percentiles:
// every answered request and every timeout (at least the timeout), but not
// requests without an HTTP answer or never sent.
func (res *result) hasLatency() bool { return res.code != 0 || res.status == StatusTimeout }

// kind classifies a result for the summary's error counts ("" for 2xx/3xx).
func (res *result) kind() string {
	switch {
	case res.status == StatusDropped:
		return "dropped"
	case res.status == StatusTimeout:
		return "timeout"
	case res.status == StatusError:
		return "transport"
	case res.code >= 500:
		return "http_5xx"
	case res.code >= 400:
		return "http_4xx"
	}
	return ""
}

func (r *run) collect(results <-chan result, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(r.cfg.Progress)
	defer tick.Stop()
	row := make([]string, 5)
	for {
		select {
		case res, ok := <-results:
			if !ok {
				return
			}
			r.account(&res, row)
		case <-tick.C:
			r.progress()
		}
	}
}

func (r *run) account(res *result, row []string) {
	r.status[res.status]++
	r.met.responses.WithLabelValues(res.status).Inc()
	if k := res.kind(); k != "" {
		r.kinds[k]++
		r.errs++
	}
	if res.send > r.lastSend {
		r.lastSend = res.send
	}
	row[0] = strconv.FormatFloat(float64(res.send)/float64(time.Millisecond), 'f', 3, 64)
	row[1] = ""
	if res.status != StatusDropped {
		row[1] = strconv.FormatInt(res.latency.Microseconds(), 10)
	}
	row[2], row[3], row[4] = res.status, res.block, res.app
	if err := r.csv.Write(row); err != nil && r.csvErr == nil {
		r.csvErr = err
	}
	if res.hasLatency() {
		us := res.latency.Microseconds()
		r.rec.Add(res.send, uint32(min(us, math.MaxUint32)))
		r.met.latency.Observe(res.latency.Seconds())
	}
}

// progress logs one line: elapsed, sent/s, errors, P99 over the last
// window; and a warning when the scheduler fell behind since the last one.
func (r *run) progress() {
	elapsed := time.Since(r.start)
	sent := r.sent.Load() + r.dropped.Load()
	rate := float64(sent-r.lastSent) / r.cfg.Progress.Seconds()
	r.lastSent = sent
	n, p, buf := r.rec.Window(elapsed, r.cfg.SLO.Window, r.scratch, 0.99)
	r.scratch = buf
	p99 := math.NaN()
	if n > 0 {
		p99 = slo.Ms(p[0])
		r.met.windowP99.Set(p99 / 1000)
	}
	late := r.late.Load()
	worst := time.Duration(r.intervalMaxNs.Swap(0))
	r.log.Info("progress", "elapsed_s", math.Round(elapsed.Seconds()), "sent_per_s", math.Round(rate),
		"errors", r.errs, "p99_ms", p99, "window_n", n, "in_flight", r.inFlight.Load(), "dropped", r.dropped.Load(),
		"late_sends", late-r.lastLate)
	if worst > BehindThreshold {
		r.log.Warn("replay is behind schedule", "late_sends", late-r.lastLate, "late_sends_total", late,
			"max_late_ms", float64(worst)/1e6)
	}
	r.lastLate = late
}

// WriteJSON writes v to path as indented JSON and a newline (the
// replayer's summary.json, and the simulator's files).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
