package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/shadow"
	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/trace"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/ring"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// Config is one simulated run: one arm's topology driven by a trace and a
// scenario, with the replayer's SLO settings.
type Config struct {
	// TopologyPath is the arm's topology file (the testbed writes it);
	// Topology is its content.
	TopologyPath string
	Topology     *config.Topology
	TracePath    string
	// Synth, instead of a trace file, generates the requests in process
	// (the options of `tracegen synth`; its Rate is the whole topology's).
	Synth *synth.Options
	// Scenario, when set, changes the backends' limits during the run;
	// ScenarioSeed seeds its random walks.
	Scenario     *scenario.Scenario
	ScenarioSeed uint64
	Duration     time.Duration
	// Seed drives every random choice of the run (app server, replica).
	Seed uint64
	SLO  slo.Params
	// OutDir is the arm's folder: replay/summary.json, rbc.jsonl,
	// controller-<app>.jsonl, sim.json.
	OutDir string
	// Epoch is the wall-clock time the simulated run starts at (the run's
	// start file holds it).
	Epoch time.Time
	// Controller is the robinhood-controller command; needed when an app
	// server has a partitioned cache.
	Controller  []string
	Calibration Calibration
	// ShadowBytes is each partition's shadow region (0: the app server's
	// default).
	ShadowBytes int64
	// Sample, in (0, 1), makes the run a miniature (docs/simulator.md):
	// only the queries of a spatially sampled fraction of the keys run,
	// against caches, memcached pages, shadow regions and backend rates
	// scaled by it. 0 or 1 simulates everything.
	Sample float64
	// RequestSample, in (0, 1], is the fraction of requests a miniature of
	// a generated workload simulates with their whole fan-out (default
	// 0.1); Apps is how many of the topology's app servers it simulates,
	// the first ones (default all): docs/simulator.md, "Miniature
	// simulation".
	RequestSample float64
	Apps          int
	// InlineShadows runs the shadow models on the run's own goroutine
	// instead of beside it (shadowpipe.go); the results are the same.
	InlineShadows bool
	// InlineSource generates the requests of a Synth workload on the run's
	// own goroutine instead of ahead of it (synthsource.go); the results
	// are the same.
	InlineSource bool
	// Progress, when set, hears a line every ProgressEvery of wall time
	// (default a minute): how far the run is and how long it has left.
	Progress      io.Writer
	ProgressEvery time.Duration
	Log           *slog.Logger
}

// Result is sim.json: what the simulator did besides the replay summary.
type Result struct {
	SimulatedS      float64            `json:"simulated_s"`
	Sample          float64            `json:"sample"`
	Engine          string             `json:"engine"`
	RequestSample   float64            `json:"request_sample,omitempty"`
	AppsSimulated   int                `json:"apps_simulated,omitempty"`
	CacheAccesses   uint64             `json:"cache_accesses,omitempty"`
	WallS           float64            `json:"wall_s"`
	Requests        int64              `json:"requests"`
	Queries         uint64             `json:"queries"`
	BackendQueries  uint64             `json:"backend_queries"`
	Events          uint64             `json:"events"`
	QueriesPerSec   float64            `json:"queries_per_wall_s"`
	HitRatio        map[string]float64 `json:"hit_ratio"`
	OverallHitRatio *float64           `json:"overall_hit_ratio"`
	Timeouts        uint64             `json:"backend_timeouts"`
	ControllerTicks int                `json:"controller_ticks"`
	Calibration     Calibration        `json:"calibration"`
}

// Sim is one simulated run.
type Sim struct {
	cfg    Config
	cal    Calibration
	eng    *Engine
	epoch  time.Time
	rng    *rand.Rand // replicas
	appRng *rand.Rand // which app server gets a request (the replayer's rule)

	backends []*backend
	byName   map[string]*backend
	byID     map[uint32]*backend
	apps     []*app

	ring  *ring.Ring
	calc  rbc.Calculator
	rbcP  rbc.Params
	store *stats.Store
	// pendingRBC holds each app server's records until its next report.
	pendingLat, pendingBe [][]uint32
	scratchLat, scratchBe []uint32

	policy   *PolicyServer
	interval time.Duration
	ticks    int
	lastHM   map[*partition][2]uint64

	rec      *slo.Recorder
	status   map[string]int64
	sent     int64
	inFlight int64
	peak     int64

	queries, backendQueries, hits, misses, timeouts uint64
	cacheAccesses                                   uint64
	// shadows runs the shadow models beside the run (shadowpipe.go); nil:
	// in line.
	shadows *shadowPipe
	// mini is the miniature engine of a generated workload (mini.go).
	mini   *miniature
	rbcOut *bufio.Writer
	err    error
}

// Run simulates the run and writes its folder.
func Run(cfg Config) (*Result, error) {
	wall := time.Now()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Sample < 0 || cfg.Sample > 1 {
		return nil, fmt.Errorf("sample: %v is not in (0, 1]", cfg.Sample)
	}
	if cfg.Sample == 0 {
		cfg.Sample = 1
	}
	if cfg.Duration <= 0 {
		return nil, errors.New("duration: must be positive")
	}
	if err := cfg.SLO.Validate(); err != nil {
		return nil, err
	}
	cal := cfg.Calibration
	if cal.Service == nil {
		cal = DefaultCalibration()
	}
	if err := cal.Validate(); err != nil {
		return nil, err
	}
	t := cfg.Topology
	s := &Sim{cfg: cfg, cal: cal, eng: &Engine{}, epoch: cfg.Epoch, byName: map[string]*backend{}, byID: map[uint32]*backend{},
		rng:    rand.New(rand.NewPCG(cfg.Seed, 0x7265706c696361)), // "replica"
		appRng: rand.New(rand.NewPCG(cfg.Seed, 0x61707073)),       // "apps", as the replayer
		status: map[string]int64{}, lastHM: map[*partition][2]uint64{}}
	var err error
	if s.rec, err = slo.NewRecorder(cfg.SLO.Step); err != nil {
		return nil, err
	}
	s.rbcP = rbc.Params{LowPct: t.RBCServer.LowPct, HighPct: t.RBCServer.HighPct}
	if err := s.rbcP.Validate(); err != nil {
		return nil, fmt.Errorf("rbc_server: %w", err)
	}
	if s.ring, err = ring.New(max(t.RBCServer.RingSize, 1)); err != nil {
		return nil, err
	}
	s.store = stats.New(max(time.Duration(t.RBCServer.StatsRetention), time.Duration(t.RBCServer.Window)))
	maxID := uint32(0)
	for _, b := range t.Backends {
		be, err := s.newBackend(b)
		if err != nil {
			return nil, err
		}
		s.backends = append(s.backends, be)
		s.byName[b.Name] = be
		s.byID[b.ID] = be
		maxID = max(maxID, b.ID)
	}
	if err := s.buildApps(maxID); err != nil {
		return nil, err
	}
	if !cfg.InlineShadows && runtime.GOMAXPROCS(0) > 1 {
		s.shadows = newShadowPipe()
		defer s.shadows.close()
	}
	// Everything that can be wrong with the input fails here, before the
	// run's folder is written.
	if err := s.scheduleScenario(); err != nil {
		return nil, err
	}
	var src source
	var mini *miniature
	switch {
	case s.miniature():
		if mini, err = s.newMiniature(); err != nil {
			return nil, err
		}
		s.mini = mini
		for _, a := range s.apps[s.cfg.Apps:] {
			a.controlled = false // not simulated: no controller runs for it
		}
	case cfg.Synth != nil:
		if src, err = newSynthSource(*cfg.Synth, !cfg.InlineSource && runtime.GOMAXPROCS(0) > 1); err != nil {
			return nil, err
		}
	default:
		if src, err = openTrace(cfg.TracePath, cfg.Sample); err != nil {
			return nil, err
		}
	}
	if src != nil {
		defer src.close()
	}
	if err := os.MkdirAll(filepath.Join(cfg.OutDir, "replay"), 0o755); err != nil {
		return nil, err
	}
	rf, err := os.Create(filepath.Join(cfg.OutDir, "rbc.jsonl"))
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	s.rbcOut = bufio.NewWriter(rf)
	if err := s.startPolicies(); err != nil {
		return nil, err
	}
	defer func() {
		if s.policy != nil {
			_ = s.policy.Close()
		}
	}()

	// Periodic work: reports every second (the app servers' batches), the
	// RBC timeline every second, controller ticks every interval.
	var every func(d time.Duration, f func()) func()
	every = func(d time.Duration, f func()) func() {
		var tick func()
		tick = func() {
			f()
			if s.eng.Now()+d <= cfg.Duration {
				s.eng.After(d, tick)
			}
		}
		return tick
	}
	s.eng.At(time.Second, every(time.Second, s.report1s))
	if s.policy != nil {
		s.eng.At(0, every(s.interval, s.controllerTick))
	}
	var feed *traceFeed
	if mini != nil {
		err = mini.run()
		feed = &mini.feed
	} else {
		err = s.arrivals(src)
		feed = src.feed()
	}
	if err != nil {
		return nil, err
	}
	// Requests sent before the end get their answers (within the request
	// timeout, as the replayer waits for them).
	s.eng.RunUntil(cfg.Duration + s.maxTimeout() + time.Second)
	if s.err != nil {
		return nil, s.err
	}
	if err := s.rbcOut.Flush(); err != nil {
		return nil, err
	}
	if err := s.writeSummary(feed); err != nil {
		return nil, err
	}
	res := s.result(time.Since(wall))
	if err := writeJSON(filepath.Join(cfg.OutDir, "sim.json"), res); err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Sim) maxTimeout() time.Duration {
	var d time.Duration
	for _, a := range s.apps {
		d = max(d, a.reqTimeout)
	}
	return d
}

func (s *Sim) buildApps(maxID uint32) error {
	t := s.cfg.Topology
	for i, as := range t.AppServers {
		a := &app{id: as.ID, idx: i, mode: as.CacheMode, budget: int64(as.CacheBudgetMB) << 20,
			parts: make([]*partition, maxID+1), stats: make([]*partition, maxID+1),
			reqTimeout: time.Duration(as.RequestTimeout), beTimeout: time.Duration(as.BackendTimeout)}
		if as.Dispatch.Policy != "" && as.Dispatch.Policy != "random" {
			return fmt.Errorf("app_servers[%d].dispatch.policy: %q: the simulator runs the random dispatch policy only (docs/simulator.md)", i, as.Dispatch.Policy)
		}
		shadowBytes := s.cfg.ShadowBytes
		if shadowBytes <= 0 {
			shadowBytes = DefaultShadowBytes
		}
		depth := 2*a.budget + shadowBytes
		if as.CacheMode == config.CacheShared {
			a.shared = s.newCache(a.budget)
		}
		for _, b := range s.backends {
			p := &partition{backend: b}
			if as.CacheMode == config.CachePartitioned {
				part, ok := as.Partitions[b.name]
				if !ok {
					return fmt.Errorf("app_servers[%d].partitions: no partition for backend %s", i, b.name)
				}
				p.cache = s.newCache(int64(part.InitialMB) << 20)
				p.shadow = shadow.NewByID(s.scale(shadowBytes), s.scale(depth))
				a.parts[b.id] = p
				a.controlled = true
			}
			a.stats[b.id] = p
		}
		s.apps = append(s.apps, a)
	}
	if len(s.apps) == 0 {
		return errors.New("app_servers: the topology has none")
	}
	s.pendingLat = make([][]uint32, len(s.apps))
	s.pendingBe = make([][]uint32, len(s.apps))
	return nil
}

// miniature reports whether the run is a miniature of a generated workload
// (mini.go).
// --request-sample or --apps asks for it with every key (--sample 1): what
// measures the key sample's error alone.
func (s *Sim) miniature() bool {
	return s.cfg.Synth != nil && (s.cfg.Sample < 1 || s.cfg.RequestSample != 0 || s.cfg.Apps != 0)
}

// scale is a size of the full system in the miniature.
func (s *Sim) scale(b int64) int64 { return int64(math.Round(float64(b) * s.cfg.Sample)) }

// unscale is a size of the miniature in the full system.
func (s *Sim) unscale(b int64) int64 { return int64(math.Round(float64(b) / s.cfg.Sample)) }

// newCache is a memcached instance of limit bytes (scaled in a miniature).
func (s *Sim) newCache(limit int64) *Cache {
	if s.cfg.Sample == 1 {
		return NewCache(limit)
	}
	return NewScaledCache(s.scale(limit), s.scale(pageBytes))
}

func (s *Sim) startPolicies() error {
	var controlled []*app
	for _, a := range s.apps {
		if a.controlled {
			controlled = append(controlled, a)
		}
	}
	if len(controlled) == 0 {
		return nil
	}
	ps, err := StartPolicyServer(s.cfg.Controller)
	if err != nil {
		return err
	}
	s.policy = ps
	for _, a := range controlled {
		ans, err := ps.Open(s.cfg.TopologyPath, a.id, filepath.Join(s.cfg.OutDir, "controller-"+a.id+".jsonl"))
		if err != nil {
			return err
		}
		iv := time.Duration(ans.IntervalS * float64(time.Second))
		if iv <= 0 {
			return fmt.Errorf("policy server: app server %s has interval %vs", a.id, ans.IntervalS)
		}
		if s.interval == 0 || iv < s.interval {
			s.interval = iv
		}
	}
	return nil
}

// scheduleScenario turns the scenario's timeline into limit updates of
// every replica's model; random walks without an initial value start from
// the topology's limits (what the replayer would read from the backends).
func (s *Sim) scheduleScenario() error {
	sc := s.cfg.Scenario
	if sc == nil {
		return nil
	}
	initial := map[scenario.BackendField]float64{}
	for _, bf := range sc.NeedsInitial() {
		b, ok := s.cfg.Topology.BackendByName(bf.Backend)
		if !ok {
			return fmt.Errorf("scenario: unknown backend %s", bf.Backend)
		}
		v, ok := b.Limits.Get(bf.Field)
		if !ok {
			return fmt.Errorf("scenario: unknown field %s", bf.Field)
		}
		initial[bf] = v
	}
	changes, err := sc.Expand(s.cfg.Duration, s.cfg.ScenarioSeed, initial)
	if err != nil {
		return err
	}
	for _, c := range changes {
		b := s.byName[c.Backend]
		if b == nil {
			return fmt.Errorf("scenario: line %d: unknown backend %s", c.Line, c.Backend)
		}
		var p capacity.Patch
		for _, f := range c.Fields {
			v := f.Value
			iv := int(math.Round(v))
			switch f.Field {
			case capacity.FieldWorkers:
				p.Workers = &iv
			case capacity.FieldQueueLimit:
				p.QueueLimit = &iv
			case capacity.FieldRate:
				if !s.miniature() {
					v *= s.cfg.Sample
				}
				p.Rate = &v
			case capacity.FieldExtraLatencyMs:
				p.ExtraLatencyMs = &v
			case capacity.FieldHiccupProb:
				p.HiccupProb = &v
			case capacity.FieldHiccupMs:
				p.HiccupMs = &v
			default:
				return fmt.Errorf("scenario: line %d: unknown field %s", c.Line, f.Field)
			}
		}
		s.eng.At(c.At, func() {
			if s.mini != nil {
				if err := s.mini.applyLimits(b, p); err != nil && s.err == nil {
					s.err = fmt.Errorf("scenario: line %d on %s: %w", c.Line, b.name, err)
				}
				return
			}
			for _, r := range b.replicas {
				if _, _, err := r.model.Update(p); err != nil && s.err == nil {
					s.err = fmt.Errorf("scenario: line %d on %s: %w", c.Line, b.name, err)
				}
				s.drain(b, r)
			}
		})
	}
	return nil
}

// traceSource reads the trace's requests with their send offsets.
type traceSource struct {
	sample uint64 // keep a query when its key's hash is below it (0: every query)
	f      *os.File
	br     *bufio.Reader
	line   int64
	traceFeed
}

// traceFeed is what the run's summary says about its request source.
type traceFeed struct {
	timing replay.Timing
	ended  bool
}

// source is where requests come from: a trace file, or the generator in
// process (synthSource).
type source interface {
	// next returns the next request and its send offset, io.EOF at the
	// end; the request is the caller's.
	next() (*trace.Request, time.Duration, error)
	feed() *traceFeed
	// where names the last request for errors ("trace line 7").
	where() string
	close()
}

func openTrace(path string, sample float64) (*traceSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	t := &traceSource{f: f, br: bufio.NewReaderSize(f, 1<<20)}
	if sample < 1 {
		t.sample = uint64(sample * math.MaxUint64)
	}
	return t, nil
}

// keyHash is FNV-1a over the backend's name, a zero byte and the key: the
// spatial sample keeps a key on every request or on none.
func keyHash(backend, key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(backend); i++ {
		h = (h ^ uint64(backend[i])) * 1099511628211
	}
	h = (h ^ 0) * 1099511628211
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	// FNV's low bits mix poorly into the high ones: finish with a
	// multiply-xorshift so the threshold test is uniform.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// keep drops the queries outside the sample; it reports whether any is left.
func (t *traceSource) keep(req *trace.Request) bool {
	n := 0
	layers := req.Layers[:0]
	for _, layer := range req.Layers {
		out := layer[:0]
		for _, q := range layer {
			j := 0
			for i, k := range q.Keys {
				if keyHash(q.Backend, k) < t.sample {
					q.Keys[j], q.Sizes[j], q.Cacheable[j] = k, q.Sizes[i], q.Cacheable[i]
					j++
				}
			}
			if j > 0 {
				q.Keys, q.Sizes, q.Cacheable = q.Keys[:j], q.Sizes[:j], q.Cacheable[:j]
				out = append(out, q)
				n += j
			}
		}
		if len(out) > 0 {
			layers = append(layers, out)
		}
	}
	req.Layers = layers
	return n > 0
}

func (t *traceSource) close()           { t.f.Close() }
func (t *traceSource) feed() *traceFeed { return &t.traceFeed }
func (t *traceSource) where() string    { return fmt.Sprintf("trace line %d", t.line) }

// next returns the next request and its send offset, io.EOF at the end.
func (t *traceSource) next() (*trace.Request, time.Duration, error) {
	for {
		b, err := t.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // a line longer than the buffer
			long := append([]byte{}, b...)
			for err == bufio.ErrBufferFull {
				b, err = t.br.ReadSlice('\n')
				long = append(long, b...)
			}
			b = long
		}
		if len(b) == 0 && err != nil {
			if err == io.EOF {
				t.ended = true
			}
			return nil, 0, err
		}
		t.line++
		b = bytes.TrimRight(b, "\r\n")
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		req, perr := trace.Parse(b)
		if perr != nil {
			return nil, 0, fmt.Errorf("trace line %d: %w", t.line, perr)
		}
		if !req.HasTs {
			return nil, 0, fmt.Errorf("trace line %d: no ts_ms (the simulator replays the trace's own times)", t.line)
		}
		off := t.timing.Offset(req.TsMs)
		if t.sample > 0 && !t.keep(req) {
			continue
		}
		return req, off, nil
	}
}

// arrivals schedules the trace's requests one after another: each arrival
// reads the next line, so the trace is never all in memory.
func (s *Sim) arrivals(src source) error {
	var arrive func(req *trace.Request, at time.Duration)
	schedule := func() error {
		req, at, err := src.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if at >= s.cfg.Duration {
			return nil
		}
		if err := s.validate(req); err != nil {
			return fmt.Errorf("%s: %w", src.where(), err)
		}
		s.eng.At(at, func() { arrive(req, at) })
		return nil
	}
	arrive = func(req *trace.Request, at time.Duration) {
		a := s.apps[0]
		if len(s.apps) > 1 {
			a = s.apps[s.appRng.IntN(len(s.apps))]
		}
		s.sent++
		s.inFlight++
		s.peak = max(s.peak, s.inFlight)
		r := &request{app: a, send: at, req: req, blocking: -1}
		if len(req.Layers) == 0 {
			s.finish(r)
		} else {
			s.startLayer(r)
		}
		if err := schedule(); err != nil && s.err == nil {
			s.err = err
		}
	}
	if err := schedule(); err != nil {
		return err
	}
	return s.runSlices()
}

// runSlices runs the simulation to its end in slices of a simulated second,
// so that a failure stops it early and a long run can say how far it is.
func (s *Sim) runSlices() error {
	start := time.Now()
	last := start
	every := s.cfg.ProgressEvery
	if every <= 0 {
		every = time.Minute
	}
	for t := time.Duration(0); t < s.cfg.Duration && s.err == nil; t += time.Second {
		s.eng.RunUntil(min(t+time.Second, s.cfg.Duration))
		if now := time.Now(); s.cfg.Progress != nil && now.Sub(last) >= every {
			last = now
			fmt.Fprintln(s.cfg.Progress, progressLine(s.eng.Now(), s.cfg.Duration, now.Sub(start), s.queries))
		}
	}
	return s.err
}

// progressLine says how far a run is: simulated time, wall time, speed and
// the time left at that speed.
func progressLine(done, total, wall time.Duration, queries uint64) string {
	frac := done.Seconds() / total.Seconds()
	line := fmt.Sprintf("progress: %.0f of %.0f simulated s (%.1f%%) in %s, %.0f queries/s", done.Seconds(), total.Seconds(),
		100*frac, wall.Round(time.Second), float64(queries)/wall.Seconds())
	if frac > 0 {
		left := time.Duration(float64(wall) * (1 - frac) / frac)
		unit := time.Second
		if left >= 10*time.Minute {
			unit = time.Minute
		}
		line += fmt.Sprintf(", about %s left", left.Round(unit))
	}
	return line
}

// finish records a request's outcome: the SLO series, the status, its RBC
// record (handed to the RBC server with the app server's next report).
func (s *Sim) finish(r *request) {
	s.inFlight--
	lat := r.end - r.send
	if lat < 0 {
		lat = 0
	}
	us := uint32(min(lat.Microseconds(), math.MaxUint32))
	s.rec.Add(r.send, us)
	if r.failed {
		s.status["502"]++
	} else {
		s.status["200"]++
	}
	if r.blocking >= 0 {
		a := r.app
		s.pendingLat[a.idx] = append(s.pendingLat[a.idx], us)
		s.pendingBe[a.idx] = append(s.pendingBe[a.idx], uint32(r.blocking))
	}
}

// report1s is the app servers' one-second report: statistics to the store,
// RBC records to the ring; then a line of the RBC timeline.
func (s *Sim) report1s() {
	s.report()
	at := s.epoch.Add(s.eng.Now()).UnixNano()
	for i := range s.apps {
		if len(s.pendingLat[i]) > 0 {
			s.ring.Append(at, s.pendingLat[i], s.pendingBe[i])
			s.pendingLat[i], s.pendingBe[i] = s.pendingLat[i][:0], s.pendingBe[i][:0]
		}
	}
	res := s.rbcNow()
	line, _ := json.Marshal(map[string]any{"t": s.eng.Now().Seconds(), "unix": float64(at) / 1e9, "rbc": s.rbcCounts(res),
		"window_requests": res.N, "p99_latency_us": res.P99})
	s.rbcOut.Write(append(line, '\n'))
}

func (s *Sim) backendByID(id uint32) *backend { return s.byID[id] }

// rbcCounts is an RBC result by backend name, 0 for a backend that blocked
// nothing.
func (s *Sim) rbcCounts(res rbc.Result) map[string]uint64 {
	counts := make(map[string]uint64, len(s.backends))
	for _, b := range s.backends {
		counts[b.name] = 0
	}
	for _, c := range res.Backends {
		if b := s.backendByID(c.Backend); b != nil {
			counts[b.name] = c.Blocking
		}
	}
	return counts
}

// rbcNow is the RBC over the RBC server's window, now.
func (s *Sim) rbcNow() rbc.Result {
	at := s.epoch.Add(s.eng.Now()).UnixNano()
	since := at - int64(s.cfg.Topology.RBCServer.Window)
	s.scratchLat, s.scratchBe = s.ring.Window(since, s.scratchLat, s.scratchBe)
	res, err := s.calc.Compute(s.scratchLat, s.scratchBe, s.rbcP)
	if err != nil && s.err == nil {
		s.err = err
	}
	return res
}

// controllerTick asks the policy of every partitioned app server for its
// limits and applies them to the caches at once.
func (s *Sim) controllerTick() {
	if s.err != nil {
		return
	}
	s.ticks++
	now := s.epoch.Add(s.eng.Now())
	res := s.rbcNow()
	window := time.Duration(s.cfg.Topology.RBCServer.Window)
	total, perApp := s.store.Window(now, window)
	// One RBC snapshot and one statistics window for every app server, as
	// they read the same RBC server.
	snap := &pb.PolicyRBCSnapshot{Counts: s.rbcCounts(res), WindowRequests: uint64(res.N), BandRequests: res.Band, P99LatencyUs: res.P99}
	all := map[string]*pb.PolicyQueryStats{}
	for _, sum := range total {
		if b := s.backendByID(sum.Backend); b != nil {
			all[b.name] = s.queryStats(sum)
		}
	}
	for _, a := range s.apps {
		if !a.controlled {
			continue
		}
		req := &pb.PolicyTickRequest{AppServer: a.id, Now: float64(now.UnixNano()) / 1e9, Rbc: snap,
			Partitions: map[string]*pb.PolicyPartitionSample{}, Stats: all, Local: map[string]*pb.PolicyQueryStats{}}
		for _, p := range a.parts {
			if p == nil {
				continue
			}
			c := p.cache
			sample := &pb.PolicyPartitionSample{LimitBytes: uint64(s.unscale(c.Limit())), MallocedBytes: uint64(s.unscale(c.Malloced())),
				ItemBytes: uint64(s.unscale(c.ItemBytes())), Items: uint64(c.Len()), Evictions: c.Evictions, GetHits: c.Hits, GetMisses: c.Misses}
			last := s.lastHM[p]
			if dh, dm := c.Hits-last[0], c.Misses-last[1]; dh+dm > 0 {
				r := float64(dh) / float64(dh+dm)
				sample.HitRatio = &r
			}
			s.lastHM[p] = [2]uint64{c.Hits, c.Misses}
			req.Partitions[p.backend.name] = sample
		}
		for _, sum := range perApp[a.id] {
			if b := s.backendByID(sum.Backend); b != nil {
				req.Local[b.name] = s.queryStats(sum)
			}
		}
		ans, err := s.policy.Tick(req)
		if err != nil {
			s.err = err
			return
		}
		for name, mb := range ans.LimitsMb {
			b := s.byName[name]
			if b == nil || a.parts[b.id] == nil {
				s.err = fmt.Errorf("policy server: a limit for unknown partition %q of %s", name, a.id)
				return
			}
			a.parts[b.id].cache.SetLimit(s.scale(int64(mb) << 20))
		}
	}
}

// queryStats is GetStats' summary of one backend (sizes in the full
// system's bytes).
func (s *Sim) queryStats(sum stats.Summary) *pb.PolicyQueryStats {
	us := func(v float64) uint32 { return uint32(min(math.Round(v), math.MaxUint32)) }
	return &pb.PolicyQueryStats{Hits: sum.Hits, Misses: sum.Misses, ShadowHits: sum.ShadowHits,
		ShadowBytes: uint64(s.unscale(int64(sum.ShadowBytes))), Queries: sum.Queries(),
		P50QueryLatencyUs: us(sum.Latency.Quantile(0.5)), P99QueryLatencyUs: us(sum.Latency.Quantile(0.99)),
		LimitBytes: uint64(s.unscale(int64(sum.LimitBytes)))}
}

func (s *Sim) writeSummary(src *traceFeed) error {
	p := s.cfg.SLO
	end := s.cfg.Duration
	sum := &replay.Summary{
		Trace: s.cfg.TracePath, Mode: "trace", Seed: s.cfg.Seed, DurationS: end.Seconds(),
		ScheduleS: end.Seconds(), TraceEnded: src.ended, Sent: s.sent, Status: s.status,
		Errors:     map[string]int64{"http_4xx": 0, "http_5xx": s.status["502"], "timeout": 0, "transport": 0, "dropped": 0},
		OutOfOrder: src.timing.OutOfOrder, InFlight: replay.InFlight{Peak: s.peak},
		Lateness: replay.Lateness{ThresholdMs: float64(replay.LateThreshold) / 1e6,
			BehindThresholdMs: float64(replay.BehindThreshold) / 1e6},
	}
	if s.cfg.TopologyPath != "" {
		for _, a := range s.apps {
			sum.AppServers = append(sum.AppServers, a.id)
		}
	}
	for code, n := range s.status {
		sum.Answered += n
		if code == "200" {
			sum.OK += n
		}
	}
	sum.Latency = replay.LatencyOf(s.rec.All(0))
	sum.LatencyAfterWarmup = replay.LatencyOf(s.rec.All(p.Warmup))
	sec, err := replay.SLOResults(s.rec, p, end)
	if err != nil {
		return err
	}
	sum.SLO = sec
	if s.cfg.Scenario != nil {
		sum.Scenario = replay.ScenarioSection{File: s.cfg.Scenario.File}
	}
	return writeJSON(filepath.Join(s.cfg.OutDir, "replay", "summary.json"), sum)
}

func (s *Sim) result(wall time.Duration) *Result {
	r := &Result{SimulatedS: s.cfg.Duration.Seconds(), Sample: s.cfg.Sample, Engine: "exact", CacheAccesses: s.cacheAccesses, WallS: wall.Seconds(), Requests: s.sent, Queries: s.queries,
		BackendQueries: s.backendQueries, Events: s.eng.Fired(), Timeouts: s.timeouts, ControllerTicks: s.ticks,
		HitRatio: map[string]float64{}, Calibration: s.cal}
	if s.mini != nil {
		r.Engine, r.RequestSample, r.AppsSimulated = "miniature", s.cfg.RequestSample, s.cfg.Apps
	}
	if wall > 0 {
		r.QueriesPerSec = float64(s.queries) / wall.Seconds()
	}
	names := make([]string, 0, len(s.backends))
	for _, b := range s.backends {
		names = append(names, b.name)
	}
	sort.Strings(names)
	for _, n := range names {
		b := s.byName[n]
		h, m := b.hits, b.misses
		if h+m > 0 {
			r.HitRatio[n] = float64(h) / float64(h+m)
		}
	}
	if s.hits+s.misses > 0 {
		v := float64(s.hits) / float64(s.hits+s.misses)
		r.OverallHitRatio = &v
	}
	return r
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
