package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/shadow"
	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/slabcache"
	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/ring"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
)

// Sim is one simulated run.
type Sim struct {
	cfg   Config
	cal   costmodel.Calibration
	eng   *Engine
	epoch time.Time
	rng   *rand.Rand // replicas
	// answerCall is s.answered, bound once (a job's answer).
	answerCall func(*job, *copyRun, bool)
	appRng     *rand.Rand // which app server gets a request (the replayer's rule)

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
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	cfg = s.cfg
	if !cfg.InlineShadows && runtime.GOMAXPROCS(0) > 1 {
		s.shadows = newShadowPipe()
		defer s.shadows.close()
	}
	// Everything that can be wrong with the input fails here, before the
	// run's folder is written.
	if err := s.scheduleScenario(); err != nil {
		return nil, err
	}
	src, mini, err := s.openSource()
	if err != nil {
		return nil, err
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
	s.every(time.Second, time.Second, s.report1s)
	if s.policy != nil {
		s.every(0, s.interval, s.controllerTick)
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
	if err := replay.WriteJSON(filepath.Join(cfg.OutDir, "sim.json"), res); err != nil {
		return nil, err
	}
	return res, nil
}

// every runs f at start, then every d while the run lasts.
func (s *Sim) every(start, d time.Duration, f func()) {
	var tick func()
	tick = func() {
		f()
		if s.eng.Now()+d <= s.cfg.Duration {
			s.eng.After(d, tick)
		}
	}
	s.eng.At(start, tick)
}

// newSim checks cfg (its defaults set) and builds the simulation: the RBC
// server's parts, the backends and the app servers.
func newSim(cfg Config) (*Sim, error) {
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
		cal = costmodel.DefaultCalibration()
	}
	if err := cal.Validate(); err != nil {
		return nil, err
	}
	t := cfg.Topology
	s := &Sim{cfg: cfg, cal: cal, eng: &Engine{}, epoch: cfg.Epoch, byName: map[string]*backend{}, byID: map[uint32]*backend{},
		appRng: rand.New(rand.NewPCG(cfg.Seed, 0x61707073)), // "apps", as the replayer
		status: map[string]int64{}, lastHM: map[*partition][2]uint64{}}
	s.answerCall = s.answered
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
	return s, nil
}

// openSource opens the requests' source: the miniature's own, a
// synthesizer's (--synth) or the trace file's.
func (s *Sim) openSource() (src source, mini *miniature, err error) {
	switch {
	case s.miniature():
		if mini, err = s.newMiniature(); err != nil {
			return nil, nil, err
		}
		s.mini = mini
		for _, a := range s.apps[s.cfg.Apps:] {
			a.controlled = false // not simulated: no controller runs for it
		}
	case s.cfg.Synth != nil:
		if src, err = newSynthSource(*s.cfg.Synth, !s.cfg.InlineSource && runtime.GOMAXPROCS(0) > 1); err != nil {
			return nil, nil, err
		}
	default:
		if src, err = openTrace(s.cfg.TracePath, s.cfg.Sample); err != nil {
			return nil, nil, err
		}
	}
	return src, mini, nil
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
		if err := s.buildDrivers(a, i, as.Dispatch); err != nil {
			return err
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
				p.shadow.Distances = &p.distances
				p.shadow.Scale(s.cfg.Sample)
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
// (mini.go); --request-sample or --apps asks for it with every key
// (--sample 1), to measure the key sample's error alone.
func (s *Sim) miniature() bool {
	return s.cfg.Synth != nil && (s.cfg.Sample < 1 || s.cfg.RequestSample != 0 || s.cfg.Apps != 0)
}

// scale is a size of the full system in the miniature.
func (s *Sim) scale(b int64) int64 { return int64(math.Round(float64(b) * s.cfg.Sample)) }

// unscale is a size of the miniature in the full system.
func (s *Sim) unscale(b int64) int64 { return int64(math.Round(float64(b) / s.cfg.Sample)) }

// Cache is one memcached instance's contents (lib/slabcache, which the
// oracle's model shares).
type Cache = slabcache.Cache

// newCache is a memcached instance of limit bytes (scaled in a miniature).
func (s *Sim) newCache(limit int64) *Cache {
	if s.cfg.Sample == 1 {
		return slabcache.NewCache(limit)
	}
	return slabcache.NewScaledCache(s.scale(limit), s.scale(costmodel.PageBytes))
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
			if f.Field == capacity.FieldRate && !s.miniature() {
				v *= s.cfg.Sample // as newBackend scales the initial rate
			}
			if !p.Set(f.Field, v) {
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
			for _, r := range b.fleet.reps {
				if _, _, err := r.model.Update(p); err != nil && s.err == nil {
					s.err = fmt.Errorf("scenario: line %d on %s: %w", c.Line, b.name, err)
				}
				b.fleet.drain(r)
			}
		})
	}
	return nil
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
		r := s.send(s.apps[s.pickApp(len(s.apps))], at)
		r.req = req
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

// pickApp is the index of the app server, of n, that gets a request (the
// replayer's rule).
func (s *Sim) pickApp(n int) int {
	if n > 1 {
		return s.appRng.IntN(n)
	}
	return 0
}

// send is a request of app server a sent at at, counted in flight.
func (s *Sim) send(a *app, at time.Duration) *request {
	s.sent++
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
	return &request{app: a, send: at, blocking: -1}
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
