package sim

import (
	"fmt"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/shadow"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/fanout"
	"github.com/robinhoodcache/robinhood/lib/loghist"
	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
)

// DefaultShadowBytes is the app server's default shadow region
// (appserver/server: DefaultShadowBytes).
const DefaultShadowBytes = 4 << 20

// backend is one backend service: its replicas' capacity models.
type backend struct {
	id      uint32
	name    string
	typ     string
	fleet   *fleet
	service costmodel.Cost
	extra   time.Duration // compute's matrix product per query
	// hits and misses count the cache lookups of its queries (every app
	// server).
	hits, misses uint64
	// sent counts the queries sent to it since the last one-second report.
	sent uint64
	// keys interns the backend's keys for every app server's caches and
	// shadow models (keys.go).
	keys *keyIDs
}

// partition is one memcached instance of an app server and what the app
// server knows about it (its statistics since the last report, its shadow
// model).
type partition struct {
	backend *backend
	cache   *Cache
	shadow  *shadow.Model
	hits    uint64
	misses  uint64
	shadowH uint64
	latency loghist.Histogram
	// distances is the shadow model's stack-distance histogram (limit
	// bytes of the full system).
	distances loghist.Histogram
}

// app is one application server.
type app struct {
	id         string
	idx        int
	mode       string
	budget     int64
	parts      []*partition // by backend index; nil without a cache
	shared     *Cache
	stats      []*partition // per backend: the statistics (the partition's, or a stats-only record)
	reqTimeout time.Duration
	beTimeout  time.Duration
	controlled bool
	// drivers are the app server's dispatch policy, by backend id.
	drivers []*driver
}

// cacheOf is the memcached instance holding b's values: its partition, the
// shared cache, or nil without a cache.
func (a *app) cacheOf(b *backend) *Cache {
	if p := a.parts[b.id]; p != nil {
		return p.cache
	}
	return a.shared
}

// request is one trace request in flight.
type request struct {
	app      *app
	send     time.Duration
	req      *trace.Request
	layer    int
	calls    []*call
	pending  int
	end      time.Duration
	blocking int32
	failed   bool
}

// call is one backend's batch within a layer.
type call struct {
	r       *request
	b       *backend
	q       *trace.BackendQueries
	start   time.Duration
	hits    int
	lookup  time.Duration // the multi-get's round trip
	missed  []int         // query indexes fetched from the backend
	ids     []int32       // the queries' key ids (keys.go), by query index
	job     *job
	bytes   int64
	timeout *Event
	done    time.Duration
	failed  bool
	empty   bool
}

// startLayer looks every query of the layer up in the cache and sends the
// misses to their backends.
func (s *Sim) startLayer(r *request) {
	layer := r.req.Layers[r.layer]
	now := s.eng.Now()
	r.calls = r.calls[:0]
	r.pending = 0
	for i := range layer {
		q := &layer[i]
		b := s.byName[q.Backend]
		c := &call{r: r, b: b, q: q, start: now, empty: q.Len() == 0}
		r.calls = append(r.calls, c)
		if c.empty {
			c.done = now
			continue
		}
		s.queries += uint64(q.Len())
		s.lookupCall(c)
		if len(c.missed) == 0 {
			c.done = now + c.lookup
			continue
		}
		r.pending++
		s.sendCall(c)
	}
	if r.pending == 0 {
		s.layerEnd(r)
	}
}

// lookupCall is the multi-get: hits, misses, the shadow model, the lookup's
// time.
func (s *Sim) lookupCall(c *call) {
	a, q := c.r.app, c.q
	st := a.stats[c.b.id]
	cache := a.cacheOf(c.b)
	var hitBytes int64
	looked := 0
	for i := range q.Keys {
		if cache == nil || !q.Cacheable[i] {
			c.missed = append(c.missed, i)
			continue
		}
		looked++
		id := c.keyID(i)
		hit := cache.Get(cacheID(c.b.id, id), q.Sizes[i])
		if st.shadow != nil {
			s.observeShadow(st, id, q.Sizes[i], hit, cache.Limit())
		}
		if hit {
			c.hits++
			hitBytes += q.Sizes[i]
		} else {
			c.missed = append(c.missed, i)
		}
	}
	if looked > 0 {
		c.lookup = s.cal.CacheLookup.Of(hitBytes)
		st.hits += uint64(c.hits)
		st.misses += uint64(looked - c.hits)
		st.latency.ObserveN(float64(c.lookup)/float64(time.Microsecond), uint64(c.hits))
	}
	s.hits += uint64(c.hits)
	s.misses += uint64(looked - c.hits)
	c.b.hits += uint64(c.hits)
	c.b.misses += uint64(looked - c.hits)
}

// keyID is query i's key id: the generator's key rank, else the id the
// backend's table interns the key to (remembered for the fill).
func (c *call) keyID(i int) int32 {
	if len(c.q.IDs) == len(c.q.Keys) {
		return c.q.IDs[i]
	}
	if c.ids == nil {
		c.ids = make([]int32, len(c.q.Keys))
		for j := range c.ids {
			c.ids[j] = -1
		}
	}
	if c.ids[i] < 0 {
		c.ids[i] = c.b.keys.id(c.q.Keys[i])
	}
	return c.ids[i]
}

// cacheKeyLen is the length of the key the app server stores a backend's
// key under: the shared cache prefixes the backend's name.
func cacheKeyLen(a *app, b *backend, key string) int {
	if a.shared != nil {
		return len(b.name) + 1 + len(key)
	}
	return len(key)
}

// sendCall hands the misses to the app server's dispatch policy for the
// backend, with the call's deadline (the backend timeout, within the
// request's).
func (s *Sim) sendCall(c *call) {
	b := c.b
	j := &job{sizes: c.q.Sizes, idx: c.missed, owner: c, answer: s.answerCall}
	keyed := b.fleet.reps[0].model.Limits().CostMs > 0
	if keyed {
		j.keys = make([]uint64, len(c.missed))
	}
	for q, i := range c.missed {
		c.bytes += c.q.Sizes[i]
		if keyed {
			j.keys[q] = uint64(b.id)<<32 | uint64(uint32(c.keyID(i))) + 1
		}
	}
	s.backendQueries += uint64(len(c.missed))
	b.sent += uint64(len(c.missed))
	c.job = j
	deadline := min(c.start+c.r.app.beTimeout, c.r.send+c.r.app.reqTimeout)
	c.timeout = s.eng.At(deadline, func() { s.expire(c) })
	c.r.app.drivers[b.id].start(j)
}

// answered is a call's batch answered by its dispatch policy: with a copy's
// result, or failed (every copy failed or was refused).
func (s *Sim) answered(j *job, _ *copyRun, ok bool) {
	c := j.owner.(*call)
	if c.failed { // expired already
		return
	}
	c.timeout.Cancel()
	if !ok {
		c.failed = true
		c.done = s.eng.Now() + c.lookup + s.cal.RPC.Of(0)
	} else {
		c.done = s.eng.Now() + c.lookup + s.cal.RPC.Of(c.bytes)
	}
	s.callDone(c)
}

// expire ends a call at its deadline: its copies' queued queries leave the
// queue and those in service give their worker back (the backend sees the
// caller cancel).
func (s *Sim) expire(c *call) {
	c.failed = true
	c.done = s.eng.Now()
	s.timeouts++
	c.r.app.drivers[c.b.id].giveUp(c.job)
	s.callDone(c)
}

// callDone records the call's statistics and fills, then ends the layer
// when it was the last call.
func (s *Sim) callDone(c *call) {
	a := c.r.app
	st := a.stats[c.b.id]
	st.latency.ObserveN(float64(c.done-c.start)/float64(time.Microsecond), uint64(len(c.missed)))
	if !c.failed {
		if cache := a.cacheOf(c.b); cache != nil {
			for _, i := range c.missed {
				if c.q.Cacheable[i] {
					cache.Set(cacheID(c.b.id, c.keyID(i)), cacheKeyLen(a, c.b, c.q.Keys[i]), c.q.Sizes[i])
				}
			}
		}
	}
	r := c.r
	r.pending--
	if r.pending > 0 {
		return
	}
	// The last call of the layer came back at c.done (maybe in the future:
	// its return trip); the layer ends when its slowest call does.
	s.eng.At(c.done, func() { s.layerEnd(r) })
}

// layerEnd applies the blocking rule to a finished layer and starts the next
// one, or finishes the request.
func (s *Sim) layerEnd(r *request) {
	var small [16]fanout.Call[time.Duration]
	fc := small[:0]
	for _, c := range r.calls {
		fc = append(fc, fanout.Call[time.Duration]{Backend: int(c.b.id), Done: c.done, Failed: c.failed, Empty: c.empty})
	}
	failed := r.block(fc)
	if !failed && r.layer+1 < len(r.req.Layers) {
		r.layer++
		s.atOrNow(r.end, func() { s.startLayer(r) })
		return
	}
	r.failed = failed
	s.atOrNow(r.end, func() { s.finish(r) })
}

// atOrNow runs f at t, or now when t has passed.
func (s *Sim) atOrNow(t time.Duration, f func()) {
	if t > s.eng.Now() {
		s.eng.At(t, f)
	} else {
		f()
	}
}

// block applies the blocking rule to calls, a layer's: the request ends
// with its slowest non-empty call, blocked by the rule's backend (if any).
// It reports whether the calls failed.
func (r *request) block(calls []fanout.Call[time.Duration]) bool {
	for _, c := range calls {
		if !c.Empty && c.Done > r.end {
			r.end = c.Done
		}
	}
	blk, failed := fanout.Blocking(calls)
	if blk >= 0 {
		r.blocking = int32(calls[blk].Backend)
	}
	return failed
}

// validate checks a request's backends before it runs (the app server
// answers 400 to an unknown one).
func (s *Sim) validate(req *trace.Request) error {
	for li, layer := range req.Layers {
		for i := range layer {
			if _, ok := s.byName[layer[i].Backend]; !ok {
				return fmt.Errorf("d[%d].%s: unknown backend %q", li, layer[i].Backend, layer[i].Backend)
			}
		}
	}
	return nil
}

// newBackend builds a backend's replicas on the simulated clock.
func (s *Sim) newBackend(b config.Backend) (*backend, error) {
	be := &backend{id: b.ID, name: b.Name, typ: b.Type, service: s.cal.Service[b.Type], keys: newKeyIDs()}
	if b.Type == config.TypeCompute {
		n := 96
		if b.Compute != nil && b.Compute.MatrixSize > 0 {
			n = b.Compute.MatrixSize
		}
		be.extra = time.Duration(s.cal.ComputePerCellUs * float64(n*n*n) * float64(time.Microsecond))
	}
	be.fleet = &fleet{eng: s.eng, serve: func(size int64) time.Duration { return be.service.Of(size) + be.extra }}
	lim := b.Limits
	lim.Rate *= s.cfg.Sample // a miniature's backends see its share of the load
	for i := range b.Replicas {
		if err := be.fleet.addReplica(lim, b.Seed+uint64(i), s.epoch); err != nil {
			return nil, fmt.Errorf("backend %s: %w", b.Name, err)
		}
	}
	return be, nil
}

// simulated is the app servers the run simulates: all of them, or a
// miniature's first cfg.Apps.
func (s *Sim) simulated() []*app {
	if s.mini != nil {
		return s.mini.apps
	}
	return s.apps
}

// report hands every app server's statistics of the last interval to the
// statistics store (the app server's report batches).
func (s *Sim) report() {
	if s.shadows != nil {
		s.shadows.sync()
	}
	at := s.epoch.Add(s.eng.Now())
	for _, a := range s.simulated() {
		reps := make([]stats.Report, 0, len(a.stats))
		for id, st := range a.stats {
			if st == nil {
				continue
			}
			rep := stats.Report{Backend: uint32(id), Hits: st.hits, Misses: st.misses, ShadowHits: st.shadowH,
				Latency: st.latency.Drain()}
			if st.cache != nil {
				rep.LimitBytes = uint64(st.cache.Limit())
			}
			if st.shadow != nil {
				rep.ShadowBytes = uint64(st.shadow.Shadow())
				rep.Distance = st.distances.Drain()
			}
			st.hits, st.misses, st.shadowH = 0, 0, 0
			if rep.Hits+rep.Misses == 0 && len(rep.Latency.Index) == 0 {
				continue
			}
			reps = append(reps, rep)
		}
		s.store.Add(at, a.id, reps)
	}
}
