package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/lib/fanout"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// miniature is the miniature of a generated workload (docs/simulator.md,
// "Miniature simulation"): caches see a stratified sample of the keys
// (rate Sample) through per-app-server Poisson streams; a fraction
// RequestSample of the requests runs with its whole fan-out against the
// caches' state (Cache.Mass, Cache.Contains); backends are fluid queues at
// the full system's load; the first Apps app servers stand for all.
type miniature struct {
	s     *Sim
	gen   *synth.Generator
	keys  []*miniKeys // by generator backend index
	apps  []*app
	scale float64 // app servers of the topology per simulated one
	rng   *rand.Rand

	stream     synth.Alias // which backend a cache-stream access queries
	streamRate float64     // cache-stream accesses/s per simulated app server
	nextAccess []time.Duration
	fluids     []*fluid // by generator backend index
	lastStep   time.Duration

	// present[app][backend index][key index]: whether the app server's
	// cache holds the sampled key (Cache.OnRemove keeps it current).
	present [][][]bool
	byID    map[int32]int // backend id → generator backend index

	shape []synth.Batch
	feed  traceFeed
	// calls is scratch for one request's batches.
	calls []fanout.Call[time.Duration]
}

// miniKeys is one backend's sampled keys.
type miniKeys struct {
	be        *backend
	keys      []string // as a partition stores them (cacheKeyLen: the shared cache's prefix)
	sizes     []int64
	cacheable []bool
	// probs[i] is the probability that a query of the full system asks
	// for a key of sampled key i's stratum; mass is their sum (1 up to
	// rounding).
	probs  []float64
	table  synth.Alias
	mass   float64
	perApp float64 // queries/s to the backend per app server, full system
	// rate is the cache stream's accesses/s per app server: one stratum
	// in `every` is a sampled key's.
	rate float64
}

// fluid is one backend's queue at the full system's load.
type fluid struct {
	lim      capacity.Limits
	replicas int
	service  time.Duration // mean time a query holds a worker
	mu       float64       // queries/s served when busy
	lambda   float64       // queries/s arriving, at the last step
	backlog  float64       // queries waiting
	cap      float64       // most queries that can wait (queue limit, timeouts)
}

// miniStep is how often the cache streams and the fluid queues advance.
const miniStep = 10 * time.Millisecond

// DefaultRequestSample is the fraction of requests a miniature simulates.
const DefaultRequestSample = 0.1

func (s *Sim) newMiniature() (*miniature, error) {
	cfg := s.cfg
	q := cfg.RequestSample
	if q == 0 {
		q = DefaultRequestSample
	}
	if !(q > 0 && q <= 1) {
		return nil, fmt.Errorf("request-sample: %v is not in (0, 1]", q)
	}
	n := cfg.Apps
	if n == 0 {
		n = len(s.apps)
	}
	if n < 1 || n > len(s.apps) {
		return nil, fmt.Errorf("apps: %d is not between 1 and the topology's %d app servers", n, len(s.apps))
	}
	o := *cfg.Synth
	full := o.Rate
	o.Rate = full * q
	g, err := synth.New(o)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	m := &miniature{s: s, gen: g, apps: s.apps[:n], scale: float64(len(s.apps)) / float64(n),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x6d696e69))} // "mini"
	s.cfg.RequestSample, s.cfg.Apps = q, n
	every := max(int(math.Round(1/cfg.Sample)), 1)
	var streamW []float64
	for bi, name := range g.Names() {
		be := s.byName[name]
		if be == nil {
			return nil, fmt.Errorf("synth: backend %s is not in the topology", name)
		}
		k := &miniKeys{be: be, perApp: full / float64(len(s.apps)) * g.QueriesPerRequest(bi)}
		ranks, probs := g.SampleStrata(bi, every)
		if len(ranks) == 0 {
			return nil, fmt.Errorf("sample: %v keeps none of backend %s's %d keys; raise it", cfg.Sample, name, g.Keys(bi))
		}
		for i, r := range ranks {
			key := synth.KeyString(int(r))
			k.keys = append(k.keys, key)
			k.sizes = append(k.sizes, g.KeySize(bi, int(r)))
			k.cacheable = append(k.cacheable, g.Cacheable(bi, int(r)))
			k.mass += probs[i]
		}
		k.probs = probs
		k.table = synth.NewAlias(probs)
		m.keys = append(m.keys, k)
		k.rate = k.perApp * k.mass * float64(len(ranks)) / float64(g.Keys(bi))
		streamW = append(streamW, k.rate)
		m.streamRate += k.rate
		f := &fluid{lim: s.cfg.Topology.Backends[s.topoIndex(be)].Limits, replicas: len(be.fleet.reps)}
		m.fluids = append(m.fluids, f)
	}
	m.stream = synth.NewAlias(streamW)
	for bi, f := range m.fluids {
		m.setLimits(bi, f.lim)
	}
	m.byID = map[int32]int{}
	for bi, k := range m.keys {
		m.byID[int32(k.be.id)] = bi
	}
	for ai, a := range m.apps {
		m.nextAccess = append(m.nextAccess, m.expGap())
		pres := make([][]bool, len(m.keys))
		for bi, k := range m.keys {
			pres[bi] = make([]bool, len(k.keys))
		}
		m.present = append(m.present, pres)
		for _, c := range m.cachesOf(a) {
			c.OnRemove = func(tag, ref int32) { m.present[ai][m.byID[tag]][ref] = false }
		}
	}
	return m, nil
}

// cachesOf is an app server's memcached instances.
func (m *miniature) cachesOf(a *app) []*Cache {
	if a.shared != nil {
		return []*Cache{a.shared}
	}
	var out []*Cache
	for _, p := range a.parts {
		if p != nil && p.cache != nil {
			out = append(out, p.cache)
		}
	}
	return out
}

// topoIndex is b's position in the topology's backends.
func (s *Sim) topoIndex(b *backend) int {
	for i, tb := range s.cfg.Topology.Backends {
		if tb.ID == b.id {
			return i
		}
	}
	return -1
}

func (m *miniature) expGap() time.Duration {
	return time.Duration(m.rng.ExpFloat64() / (m.streamRate * m.rateFactor()) * float64(time.Second))
}

// rateFactor is the generator's rate schedule at the run's current time
// (synth --rate-schedule; 1 without one): the cache streams and the
// backends' fluid load follow the request rate as the sampled requests do.
func (m *miniature) rateFactor() float64 {
	return m.gen.RateFactor(float64(m.s.eng.Now()) / float64(time.Millisecond))
}

// setLimits is a backend's new limits: its service rate and how much can
// wait.
func (m *miniature) setLimits(bi int, l capacity.Limits) {
	f, k := m.fluids[bi], m.keys[bi]
	f.lim = l
	mean := meanSize(k)
	f.service = k.be.service.Of(int64(mean)) + k.be.extra +
		time.Duration((l.ExtraLatencyMs+l.HiccupProb*l.HiccupMs)*float64(time.Millisecond))
	mu := math.Inf(1)
	if l.Workers > 0 && f.service > 0 {
		mu = float64(l.Workers) / f.service.Seconds()
	}
	if l.Rate > 0 {
		mu = math.Min(mu, l.Rate)
	}
	f.mu = mu * float64(max(f.replicas, 1))
	f.cap = math.Inf(1)
	if t := m.apps[0].beTimeout; t > 0 {
		// A query that would wait longer than its deadline less its service
		// times out and leaves: the backlog of an overloaded queue stays at
		// what its service rate clears in that time.
		f.cap = f.mu * max(t.Seconds()-f.service.Seconds(), 0)
	}
	if l.QueueLimit > 0 {
		f.cap = math.Min(f.cap, float64(l.QueueLimit*max(f.replicas, 1)))
	}
	f.backlog = math.Min(f.backlog, f.cap)
}

// meanSize is the mean size of the values a backend's queries ask for.
func meanSize(k *miniKeys) float64 {
	s := 0.0
	for i, p := range k.probs {
		s += p * float64(k.sizes[i])
	}
	return s / k.mass
}

// hitProb is the probability that a query of app server a to backend bi
// hits its cache: the popularity mass of the sampled keys it holds.
func (m *miniature) hitProb(a *app, bi int) float64 {
	k := m.keys[bi]
	c := a.cacheOf(k.be)
	if c == nil {
		return 0
	}
	return math.Min(c.Mass(int(k.be.id))/k.mass, 1)
}

// step advances the cache streams and the queues to now.
func (m *miniature) step() {
	now := m.s.eng.Now()
	for ai, a := range m.apps {
		for m.nextAccess[ai] <= now {
			m.access(ai, a)
			m.nextAccess[ai] += m.expGap()
		}
	}
	dt := (now - m.lastStep).Seconds()
	m.lastStep = now
	factor := m.rateFactor()
	for bi, f := range m.fluids {
		lambda := 0.0
		for _, a := range m.apps {
			lambda += m.keys[bi].perApp * (1 - m.hitProb(a, bi))
		}
		f.lambda = lambda * m.scale * factor
		f.backlog = math.Min(math.Max(f.backlog+(f.lambda-f.mu)*dt, 0), f.cap)
	}
}

// access is one query of the cache stream: a sampled key of the full
// system's popularity, looked up and filled as the app server does.
func (m *miniature) access(ai int, a *app) {
	s := m.s
	bi := m.stream.Sample(m.rng.Uint64())
	k := m.keys[bi]
	i := k.table.Sample(m.rng.Uint64())
	cache := a.cacheOf(k.be)
	s.cacheAccesses++
	if cache == nil || !k.cacheable[i] {
		return
	}
	id := cacheID(k.be.id, int32(i))
	st := a.stats[k.be.id]
	hit := cache.Get(id, k.sizes[i])
	if st.shadow != nil {
		s.observeShadow(st, int32(i), k.sizes[i], hit, cache.Limit())
	}
	if hit {
		st.hits++
		s.hits++
		k.be.hits++
		return
	}
	st.misses++
	s.misses++
	k.be.misses++
	// The fill follows the backend's answer; a query that times out fills
	// nothing.
	if m.fluids[bi].served(m.rng) {
		cache.SetWeighted(id, cacheKeyLen(a, k.be, k.keys[i]), k.sizes[i], int(k.be.id), i, k.probs[i])
		m.present[ai][bi][i] = true
	}
}

// run schedules the streams, the scenario's limits and the requests, and
// runs the simulation to the end of the requests.
func (m *miniature) run() error {
	s := m.s
	s.every(0, miniStep, m.step)
	var arrive func(at time.Duration, batches []synth.Batch)
	schedule := func() {
		ts, batches := m.gen.NextShape(m.shape[:0])
		m.shape = batches
		at := m.feed.timing.Offset(ts)
		if at >= s.cfg.Duration {
			return // the generator never ends: the run does
		}
		own := append([]synth.Batch(nil), batches...)
		s.eng.At(at, func() { arrive(at, own) })
	}
	arrive = func(at time.Duration, batches []synth.Batch) {
		m.request(at, batches)
		schedule()
	}
	schedule()
	return s.runSlices()
}

// request runs one sampled request: every batch's lookups against the
// cache's state and its misses through the backend's queue, at once (the
// generator's requests have one layer).
func (m *miniature) request(at time.Duration, batches []synth.Batch) {
	s := m.s
	ai := s.pickApp(len(m.apps))
	a := m.apps[ai]
	r := s.send(a, at)
	m.calls = m.calls[:0]
	for _, bt := range batches {
		done, failed := m.batch(ai, a, bt.Backend, bt.N, at)
		m.calls = append(m.calls, fanout.Call[time.Duration]{Backend: int(m.keys[bt.Backend].be.id), Done: done, Failed: failed, Empty: bt.N == 0})
	}
	r.failed = r.block(m.calls)
	if r.end < at {
		r.end = at
	}
	s.eng.At(r.end, func() { s.finish(r) })
}

// batch is one backend's queries of a request: it returns when the batch's
// answer is back and whether it failed.
func (m *miniature) batch(ai int, a *app, bi, n int, now time.Duration) (time.Duration, bool) {
	s := m.s
	k, f := m.keys[bi], m.fluids[bi]
	st := a.stats[k.be.id]
	cache := a.cacheOf(k.be)
	s.queries += uint64(n)
	var hitBytes, missBytes int64
	var hits int
	var worst time.Duration
	misses := 0
	wait := m.wait(f)
	l := f.lim
	present := m.present[ai][bi]
	for j := 0; j < n; j++ {
		i := k.table.Sample(m.rng.Uint64())
		if cache != nil && present[i] {
			hits++
			hitBytes += k.sizes[i]
			continue
		}
		// The misses join the queue one after another.
		d := wait + time.Duration(float64(misses)/f.mu*float64(time.Second)) +
			k.be.service.Of(k.sizes[i]) + k.be.extra + time.Duration(l.ExtraLatencyMs*float64(time.Millisecond))
		if l.HiccupProb > 0 && m.rng.Float64() < l.HiccupProb {
			d += time.Duration(l.HiccupMs * float64(time.Millisecond))
		}
		worst = max(worst, d)
		missBytes += k.sizes[i]
		misses++
	}
	var lookup time.Duration
	if cache != nil && n > 0 {
		lookup = s.cal.CacheLookup.Of(hitBytes)
		st.latency.ObserveN(float64(lookup)/float64(time.Microsecond), uint64(hits))
	}
	if misses == 0 {
		return now + lookup, false
	}
	s.backendQueries += uint64(misses)
	deadline := a.beTimeout
	if a.reqTimeout > 0 && (deadline == 0 || a.reqTimeout < deadline) {
		deadline = a.reqTimeout
	}
	var done time.Duration
	failed := false
	switch {
	case l.QueueLimit > 0 && f.backlog+float64(misses) > float64(l.QueueLimit*max(f.replicas, 1)):
		failed, done = true, now+lookup+s.cal.RPC.Of(0) // refused: the queue is full
	case deadline > 0 && (worst > deadline || !f.served(m.rng)):
		failed, done = true, now+deadline
		s.timeouts++
	default:
		done = now + lookup + worst + s.cal.RPC.Of(missBytes)
	}
	st.latency.ObserveN(float64(done-now)/float64(time.Microsecond), uint64(misses))
	return done, failed
}

// saturated reports whether the queue is overloaded and at its cap: every
// arrival beyond the service rate times out.
func (f *fluid) saturated() bool {
	return f.lambda > f.mu && !math.IsInf(f.cap, 1) && f.backlog >= f.cap*0.999
}

// served draws whether a query arriving now is answered in time: always,
// unless the queue is saturated, where a fraction µ/λ is (an overloaded
// queue with impatient callers serves at its rate; the rest time out).
func (f *fluid) served(rng *rand.Rand) bool {
	return !f.saturated() || rng.Float64() < f.mu/f.lambda
}

// wait is how long a query joining the queue now waits before service: the
// backlog ahead of it, and the M/D/1 wait at the current utilization (an
// exponential draw with its mean).
func (m *miniature) wait(f *fluid) time.Duration {
	if math.IsInf(f.mu, 1) {
		return 0
	}
	w := f.backlog / f.mu
	if rho := f.lambda / f.mu; rho > 0 && rho < 1 {
		w += m.rng.ExpFloat64() * rho / (2 * f.mu * (1 - rho))
	}
	return time.Duration(w * float64(time.Second))
}

// applyLimits is a scenario change in a miniature: the fluid queue's limits.
func (m *miniature) applyLimits(b *backend, p capacity.Patch) error {
	for bi, k := range m.keys {
		if k.be != b {
			continue
		}
		next := p.Apply(m.fluids[bi].lim)
		if err := next.Validate(); err != nil {
			return err
		}
		m.step()
		m.setLimits(bi, next)
		return nil
	}
	return errors.New("backend not in the workload")
}
