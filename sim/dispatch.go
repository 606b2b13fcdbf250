package sim

import (
	"fmt"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/dispatch"
)

// This file drives the dispatch policies of lib/dispatch on the simulated
// clock: the same policy code the app server runs (docs/dispatch.md). A
// fleet is one backend's replicas (shared by every app server); a driver is
// one app server's policy over a fleet; a job is one batch of queries.

// fleet is one backend's replicas: their capacity models on the simulated
// clock and the queries each has taken.
type fleet struct {
	eng  *Engine
	reps []*replica
	// serve is the time a query takes besides its model delay (the data
	// path the simulator calibrates); nil: none.
	serve func(size int64) time.Duration
	// keepRunning: a cancelled copy's queries already in service run to
	// their end (a backend that cannot stop a running query); by default
	// they stop, as the backend server's do.
	keepRunning bool
}

// replica is one backend process: its capacity model and the queries
// waiting for admission, in queue order per priority class (the model
// admits in that order within a class).
type replica struct {
	model   *capacity.Model
	pending [2][]*op
	head    [2]int
}

// op is one query of a copy.
type op struct {
	ticket  *capacity.Ticket
	run     *copyRun
	size    int64
	release *Event
	end     time.Duration // when release fires
	gone    bool          // finished, purged or stopped
	// after is the time the answer takes once the service ends, its
	// worker already free (the hedging bench's hiccup_at: response);
	// responding while that runs.
	after      time.Duration
	responding bool
}

// addReplica adds a replica with limits lim to f, its capacity model on
// the simulated clock.
func (f *fleet) addReplica(lim capacity.Limits, seed uint64, epoch time.Time) error {
	r := &replica{}
	clk := &Clock{Engine: f.eng, Epoch: epoch}
	m, err := capacity.New(lim, seed, clk)
	if err != nil {
		return err
	}
	r.model = m
	clk.After = func() { f.drain(r) }
	f.reps = append(f.reps, r)
	return nil
}

func (r *replica) add(p capacity.Priority, ops []*op) {
	q, h := r.pending[p], r.head[p]
	if h > 0 && h*2 >= len(q) {
		n := copy(q, q[h:])
		clear(q[n:])
		q = q[:n]
		r.head[p] = 0
	}
	r.pending[p] = append(q, ops...)
}

// drain starts the service of every query the model admitted since the
// last look; it checks the head of each class's queue only.
func (f *fleet) drain(r *replica) {
	for p := range r.pending {
		for r.head[p] < len(r.pending[p]) {
			o := r.pending[p][r.head[p]]
			settled, admitted := o.ticket.Settled()
			if !settled {
				break
			}
			r.pending[p][r.head[p]] = nil
			r.head[p]++
			if !admitted || o.gone {
				continue
			}
			d := o.ticket.Delay()
			if f.serve != nil {
				d += f.serve(o.size)
			}
			o.end = f.eng.Now() + d
			o.release = f.eng.After(d, func() { f.finish(o, r) })
		}
	}
}

// finish ends a query's service (after any stall it owes).
func (f *fleet) finish(o *op, r *replica) {
	if ext := o.ticket.TakeStall(); ext > 0 {
		o.end = f.eng.Now() + ext
		o.release = f.eng.After(ext, func() { f.finish(o, r) })
		return
	}
	if o.after > 0 { // the worker is free; the answer comes later
		d := o.after
		o.after, o.responding = 0, true
		o.ticket.Release()
		o.end = f.eng.Now() + d
		o.release = f.eng.After(d, func() { f.respond(o) })
		f.drain(r)
		return
	}
	o.ticket.Release()
	f.respond(o)
	f.drain(r)
}

// respond ends a query whose service and answer are done.
func (f *fleet) respond(o *op) {
	o.gone = true
	run := o.run
	run.left--
	run.served++
	if run.left == 0 {
		if j := run.job; j.d != nil {
			j.d.ended(run)
		} else { // the idealized hedge's single copy (hedging.go)
			j.answer(j, run, true)
		}
	}
}

// stop takes a query out: out of the queue when it waits, out of service
// when it runs and stopping is allowed (or forced). It reports whether
// the query is gone.
func (f *fleet) stop(o *op, force bool) bool {
	if o.gone {
		return true
	}
	if o.release == nil {
		settled, admitted := o.ticket.Settled()
		if !settled {
			o.ticket.Purge()
			o.gone = true
			return true
		}
		if !admitted {
			o.gone = true
			return true
		}
		// Admitted but not yet started (drain comes after): it runs.
	}
	if f.keepRunning && !force {
		return false
	}
	if o.release != nil && !o.release.Cancel() {
		return false // finishing at this instant
	}
	o.gone = true
	if o.responding { // its worker is already free: the answer is dropped
		return true
	}
	if o.release != nil { // stopping a running query may cost its worker
		r := o.run.r
		if c := r.model.StopCost(o.end - f.eng.Now()); c > 0 {
			t := o.ticket
			f.eng.After(c, func() { t.Release(); f.drain(r) })
			return true
		}
	}
	o.ticket.Release()
	return true
}

// copyRun is one copy of a job on one replica.
type copyRun struct {
	job    *job
	idx    int // in the batch's Copies
	r      *replica
	ops    []*op
	left   int // queries not yet served or taken out
	served int
	ended  bool
}

// job is one batch of queries handed to a driver.
type job struct {
	d     *driver
	batch *dispatch.Batch
	// sizes are the queries' sizes: sizes[idx[q]] for query q, or
	// sizes[q] without idx (the caller's slices, not copied).
	sizes []int64
	idx   []int
	keys  []uint64 // by query: the inherent cost's key (nil or 0: drawn per execution)
	// owner is the caller's record (the simulator's call).
	owner any
	// cost, when set, draws query q's inherent cost for copy c (the
	// hedging bench's distributions); otherwise the model draws it.
	cost func(c, q int) time.Duration
	// hiccup, when set, says whether query q of copy c hiccups (the
	// idealized hedge knows ahead); otherwise the model draws it.
	hiccup  func(c, q int) bool
	runs    []*copyRun
	runsBuf [2]*copyRun
	first   copyRun // the first copy's record, inline
	answer  func(j *job, run *copyRun, ok bool)
	// refused: a copy could not be sent (queue full).
	refused bool
	// sent, when set, is told each copy sent and its replica (tests).
	sent func(c, replica int)
	// after, when set, is the time query q of copy c takes to answer once
	// its service ends, its worker free (hedging bench, hiccup_at:
	// response).
	after func(c, q int) time.Duration
}

// n is the number of queries.
func (j *job) n() int {
	if j.idx != nil {
		return len(j.idx)
	}
	return len(j.sizes)
}

func (j *job) size(q int) int64 {
	if j.idx != nil {
		return j.sizes[j.idx[q]]
	}
	return j.sizes[q]
}

// driver is one app server's dispatch policy for one backend.
type driver struct {
	f       *fleet
	m       *dispatch.Machine
	next    uint64
	scratch []capacity.Op
	todo    []dispatch.Action
	busy    bool
	abandon bool // Abandon in progress: cancels stop running queries too
}

func newDriver(f *fleet, policy string, params any, seed uint64) (*driver, error) {
	m, err := dispatch.New(policy, params, dispatch.Env{Replicas: len(f.reps), Seed: seed})
	if err != nil {
		return nil, err
	}
	return &driver{f: f, m: m}, nil
}

// start hands a job to the policy.
func (d *driver) start(j *job) {
	d.next++
	j.d = d
	j.batch = dispatch.NewBatch(d.next, d.f.eng.Now())
	j.batch.Driver = j
	d.run(d.m.Arrive(d.f.eng.Now(), j.batch))
}

// giveUp is the caller's deadline: the batch is abandoned and its copies
// cancelled (running queries stop: the caller hung up).
func (d *driver) giveUp(j *job) {
	d.abandon = true
	d.run(d.m.Abandon(d.f.eng.Now(), j.batch))
	d.abandon = false
}

// run carries out actions, and those their consequences emit, in order.
func (d *driver) run(acts []dispatch.Action) {
	d.todo = append(d.todo, acts...)
	if d.busy {
		return
	}
	d.busy = true
	for i := 0; i < len(d.todo); i++ {
		d.do(d.todo[i])
	}
	d.todo = d.todo[:0]
	d.busy = false
}

func (d *driver) do(a dispatch.Action) {
	j, ok := a.Batch.Driver.(*job)
	if !ok || j.d != d {
		panic(fmt.Sprintf("sim: dispatch %s acted on batch %d it does not hold", d.m.Name, a.Batch.ID))
	}
	switch a.Kind {
	case dispatch.Send:
		d.send(j, a.Copy)
	case dispatch.Cancel:
		d.cancel(j, a.Copy)
	case dispatch.Complete, dispatch.Fail:
		var run *copyRun
		for _, r := range j.runs {
			if r.idx == a.Copy {
				run = r
			}
		}
		j.answer(j, run, a.Kind == dispatch.Complete)
	case dispatch.After:
		d.f.eng.At(a.At, func() {
			if !j.batch.Finished() {
				d.run(d.m.Timer(d.f.eng.Now(), j.batch))
			}
		})
	}
}

// send joins a copy's queries to its replica's queue.
func (d *driver) send(j *job, c int) {
	cp := j.batch.Copies[c]
	r := d.f.reps[cp.Replica]
	if j.sent != nil {
		j.sent(c, cp.Replica)
	}
	prio := capacity.Normal
	if cp.Priority == dispatch.Low {
		prio = capacity.Low
	}
	ops := d.scratch[:0]
	for q := 0; q < j.n(); q++ {
		o := capacity.Op{Priority: prio}
		if j.keys != nil {
			o.Key = j.keys[q]
		}
		ops = append(ops, o)
		if j.cost != nil {
			ops[q].CostGiven, ops[q].Cost = true, j.cost(c, q)
		}
		if j.hiccup != nil {
			ops[q].HiccupGiven, ops[q].Hiccup = true, j.hiccup(c, q)
		}
	}
	tickets, err := r.model.JoinOps(ops)
	d.scratch = ops[:0]
	run := j.newRun(c, r)
	if err != nil { // queue full: the replica refuses the copy at once
		j.refused = true
		run.ended = true
		d.run(d.m.Done(d.f.eng.Now(), j.batch, c, dispatch.Failed))
		return
	}
	run.ops = make([]*op, len(tickets))
	vals := make([]op, len(tickets))
	for q, t := range tickets {
		vals[q] = op{ticket: t, run: run, size: j.size(q)}
		if j.after != nil {
			vals[q].after = j.after(c, q)
		}
		run.ops[q] = &vals[q]
	}
	run.left = len(run.ops)
	r.add(prio, run.ops)
	d.f.drain(r)
}

// newRun records copy c of j on replica r (the first inline).
func (j *job) newRun(c int, r *replica) *copyRun {
	var run *copyRun
	if len(j.runs) == 0 {
		run = &j.first
	} else {
		run = &copyRun{}
	}
	*run = copyRun{job: j, idx: c, r: r}
	if j.runs == nil {
		j.runs = j.runsBuf[:0]
	}
	j.runs = append(j.runs, run)
	return run
}

// cancel purges a copy's queued queries and stops its running ones (unless
// the fleet keeps them running), when the purge reaches the replica (its
// purge_delay_ms later); the copy ends when none is left.
func (d *driver) cancel(j *job, c int) {
	for _, run := range j.runs {
		if run.idx != c || run.ended {
			continue
		}
		if delay := run.r.model.PurgeDelay(); delay > 0 {
			force := d.abandon
			d.f.eng.After(delay, func() { d.purge(run, force) })
			continue
		}
		d.purge(run, d.abandon)
	}
}

// purge takes a copy's queries out (force: running ones too, even where
// the fleet keeps them running).
func (d *driver) purge(run *copyRun, force bool) {
	if run.ended {
		return
	}
	for _, o := range run.ops {
		if !o.gone && d.f.stop(o, force) {
			run.left--
		}
	}
	if run.left == 0 {
		d.ended(run)
	}
	d.f.drain(run.r)
}

// ended reports a copy whose queries are all served or taken out.
func (d *driver) ended(run *copyRun) {
	if run.ended {
		return
	}
	run.ended = true
	st := dispatch.OK
	if run.served < len(run.ops) {
		st = dispatch.Cancelled
	}
	j := run.job
	d.run(d.m.Done(d.f.eng.Now(), j.batch, run.idx, st))
}

// buildDrivers gives app server a (app_servers[i]) its dispatch policy for
// every backend: one Machine per backend, as the app server has.
func (s *Sim) buildDrivers(a *app, i int, spec config.Dispatch) error {
	if spec.Policy == "" {
		spec.Policy = "random"
	}
	n := 0
	for _, b := range s.backends {
		n = max(n, int(b.id)+1)
	}
	a.drivers = make([]*driver, n)
	for _, b := range s.backends {
		params, err := dispatch.Params(spec)
		if err != nil {
			return fmt.Errorf("app_servers[%d].dispatch: %w", i, err)
		}
		seed := s.cfg.Seed ^ uint64(i+1)<<32 ^ uint64(b.id)*0x9e3779b97f4a7c15
		d, err := newDriver(b.fleet, spec.Policy, params, seed)
		if err != nil {
			return fmt.Errorf("app_servers[%d].dispatch: %w", i, err)
		}
		a.drivers[b.id] = d
	}
	return nil
}
