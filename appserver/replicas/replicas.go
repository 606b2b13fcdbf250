// Package replicas holds an app server's view of each backend's replicas —
// their connections and health — and drives the lib/dispatch policies over
// them (docs/dispatch.md). The decision logic is lib/dispatch's, a state
// machine per backend; this package is the mechanism that carries out its
// actions: a backend's replicas and their gRPC connections (Replicas), one call per
// copy a policy sends, contexts, timers, cancellation with Purge, and the
// passive and active health checks whose changes are the policy's rotation
// events (health.go).
//
// The topology chooses the policy per app server (`dispatch: {policy: NAME,
// <parameters>}`); lib/dispatch's registry decodes the parameters and
// `bin/appserver --list-dispatch-policies` prints it. A new policy is one file
// in lib/dispatch: nothing here lists them.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/dialopts"
	"github.com/robinhoodcache/robinhood/lib/dispatch"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// PurgeTimeout bounds the Purge call that follows a cancelled copy (best
// effort: its failures are only counted).
const PurgeTimeout = 200 * time.Millisecond

// Replica is one process serving a backend.
type Replica struct {
	// Addr is the replica's BackendService address.
	Addr     string
	conn     *grpc.ClientConn
	client   pb.BackendServiceClient
	inFlight atomic.Int64
	health   health
}

// InFlight is the number of calls to this replica not yet answered.
func (r *Replica) InFlight() int64 { return r.inFlight.Load() }

// Replicas is a backend's replica set with one gRPC connection per replica.
type Replicas struct {
	// Backend is the backend's name.
	Backend string
	list    []*Replica
	// now is the clock of the health checks (tests replace it).
	now          func() time.Time
	ejections    atomic.Uint64
	readmissions atomic.Uint64
	done         chan struct{} // closed by Close: stops the probes
	closeOnce    sync.Once
	// rotation is told when a replica leaves or rejoins rotation (the
	// Dispatcher's Rotation events); nil: nobody listens.
	rotation atomic.Pointer[func(i int, in bool)]

	// AttemptTimeout bounds one call to one replica (the app server's
	// backend_timeout); 0: only the caller's context bounds it. A batch may
	// take several calls (a retry, a policy's duplicates), within the
	// caller's context.
	AttemptTimeout time.Duration
}

// Dial creates one gRPC client connection per replica of b (connections are
// established on first use). Extra options are added to the defaults
// (plaintext).
func Dial(b config.Backend, opts ...grpc.DialOption) (*Replicas, error) {
	if len(b.Replicas) == 0 {
		return nil, fmt.Errorf("backend %q has no replicas: bin/appserver sends its queries to them (the topology gives a backend's type and replicas for every backend an app server of ours serves)", b.Name)
	}
	rs := &Replicas{Backend: b.Name, now: time.Now, done: make(chan struct{})}
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), dialopts.Reconnect()}, opts...)
	for i, r := range b.Replicas {
		conn, err := grpc.NewClient(r.GRPC, all...)
		if err != nil {
			_ = rs.Close()
			return nil, fmt.Errorf("dispatch: backend %q replica %d (%s): %w", b.Name, i, r.GRPC, err)
		}
		rs.list = append(rs.list, &Replica{Addr: r.GRPC, conn: conn, client: pb.NewBackendServiceClient(conn)})
	}
	return rs, nil
}

// Len is the number of replicas.
func (rs *Replicas) Len() int { return len(rs.list) }

// Replica returns replica i.
func (rs *Replicas) Replica(i int) *Replica { return rs.list[i] }

// Close closes every replica's connection.
func (rs *Replicas) Close() error {
	rs.closeOnce.Do(func() { close(rs.done) })
	var errs []error
	for _, r := range rs.list {
		errs = append(errs, r.conn.Close())
	}
	return errors.Join(errs...)
}

// Dispatcher sends the batches of one backend of one app server to its
// replicas as its policy (a lib/dispatch Machine) decides. Events reach the
// Machine one at a time under a mutex, never held during I/O.
type Dispatcher struct {
	rs     *Replicas
	policy string
	start  time.Time
	// single: the policy never has two copies of a batch open at once
	// (lib/dispatch Factory.Single): the caller's goroutine makes the calls
	// of its own batch, under the caller's context.
	single bool

	mu     sync.Mutex
	m      *dispatch.Machine
	nextID uint64
	// live is the number of batches not yet finished.
	live int

	purges, purgeErrors atomic.Uint64
}

// flight is one batch as the driver knows it, from Arrive until it is
// finished (answered and every copy Done).
type flight struct {
	b        *dispatch.Batch
	req      *pb.GetRequest
	opts     []grpc.CallOption
	parent   context.Context // of the copies' contexts: the caller's values, not its cancellation (but see single)
	deadline time.Time       // the caller's; zero: none
	copies   []copyCall
	timers   []*time.Timer
	answered bool
	finished bool // answered and every copy Done: forgotten
	// done is closed when the batch is answered (Complete or Fail); made
	// when the caller waits for it (nil until then).
	done   chan struct{}
	resp   *pb.GetResponse
	err    error
	inline [2]copyCall
}

// copyCall is one copy's call: its context and, once Done, its result.
type copyCall struct {
	ctx    context.Context
	cancel context.CancelFunc
	ownDL  bool // its deadline is the attempt timeout, not the caller's
	resp   *pb.GetResponse
	err    error
}

// work is an action to carry out after the mutex is released, with what it
// needs of the copy (read under the mutex).
type work struct {
	kind    dispatch.ActionKind
	f       *flight
	c       int
	replica int
	low     bool
	call    copyCall // its context (Send), its cancel function (Cancel)
}

// Build returns the Dispatcher of spec's policy over rs: its parameters are
// decoded by lib/dispatch (dispatch.Params), strictly.
func Build(spec config.Dispatch, rs *Replicas) (*Dispatcher, error) {
	params, err := dispatch.Params(spec)
	if err != nil {
		return nil, err
	}
	m, err := dispatch.New(spec.Policy, params, dispatch.Env{Replicas: rs.Len(), Seed: rand.Uint64()})
	if err != nil {
		return nil, err
	}
	f, _ := dispatch.Lookup(spec.Policy)
	d := &Dispatcher{rs: rs, policy: spec.Policy, start: time.Now(), m: m, single: f.Single,
		// Batch ids name a batch at the replicas (Purge), which other app
		// servers share: start at a random point of the 64-bit space.
		nextID: rand.Uint64() >> 1}
	for i := range rs.Len() {
		if !rs.Healthy(i) {
			m.Rotation(0, i, false)
		}
	}
	fn := d.rotation
	rs.rotation.Store(&fn)
	return d, nil
}

// Policy is the name of the dispatcher's policy.
func (d *Dispatcher) Policy() string { return d.policy }

// Replicas is the replica set the dispatcher sends to.
func (d *Dispatcher) Replicas() *Replicas { return d.rs }

func (d *Dispatcher) now() time.Duration { return time.Since(d.start) }

// Get sends one batch of queries as the policy decides and returns the
// answer of the copy that answered it (its winning copy's), or the error
// of the copy that failed it. The copies carry req's keys and sizes with
// their own priority and the batch's id (which Get may set in req itself).
// When ctx ends first the batch is abandoned: its open copies are cancelled
// and ctx's error returned.
func (d *Dispatcher) Get(ctx context.Context, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	f := &flight{req: req, opts: opts, parent: ctx}
	f.copies = f.inline[:0]
	if !d.single {
		// Copies may outlive the caller (a loser a policy does not
		// cancel): they are bounded by their deadline, and cancelled when
		// the caller gives up (Abandon).
		f.parent = context.WithoutCancel(ctx)
	}
	f.deadline, _ = ctx.Deadline()
	d.mu.Lock()
	d.nextID++
	if d.nextID == 0 {
		d.nextID++
	}
	now := d.now()
	f.b = dispatch.NewBatch(d.nextID, now)
	f.b.Driver = f
	d.live++
	w := d.apply(now, f, d.m.Arrive(now, f.b), nil)
	d.mu.Unlock()
	// A single-copy policy's calls of this batch are made here, one after
	// the other (a retry after a failure), as a blocking call would.
	for {
		var x work
		var mine bool
		if d.single {
			w, x, mine = own(w, f)
		}
		d.carryOut(w)
		if !mine {
			break
		}
		w = d.call(x)
	}

	d.mu.Lock()
	if f.answered {
		d.mu.Unlock()
		return f.resp, f.err
	}
	f.done = make(chan struct{})
	d.mu.Unlock()
	select {
	case <-f.done:
		return f.resp, f.err
	case <-ctx.Done():
	}
	d.mu.Lock()
	if f.answered { // the answer came at the same time
		d.mu.Unlock()
		return f.resp, f.err
	}
	now = d.now()
	f.answered = true
	w = d.apply(now, f, d.m.Abandon(now, f.b), nil)
	d.mu.Unlock()
	d.carryOut(w)
	return nil, status.FromContextError(ctx.Err()).Err()
}

// apply records the actions of one event on f's batch (under mu) and
// returns the I/O to do once mu is released (appended to w): calls to
// start, copies to cancel. Contexts and timers are made here, so an action
// of a later event (a Cancel) always finds its copy's.
func (d *Dispatcher) apply(now time.Duration, f *flight, acts []dispatch.Action, w []work) []work {
	for _, a := range acts {
		g := flightOf(a.Batch)
		if g == nil {
			continue // a finished batch (a policy's late action): nothing to do
		}
		switch a.Kind {
		case dispatch.Send:
			cp := &a.Batch.Copies[a.Copy]
			for len(g.copies) <= a.Copy {
				g.copies = append(g.copies, copyCall{})
			}
			cc := &g.copies[a.Copy]
			dl, own := g.deadline, false
			if t := d.rs.AttemptTimeout; t > 0 {
				if a := time.Now().Add(t); dl.IsZero() || a.Before(dl) {
					dl, own = a, true
				}
			}
			if dl.IsZero() {
				cc.ctx, cc.cancel = context.WithCancel(g.parent)
			} else {
				cc.ctx, cc.cancel = context.WithDeadline(g.parent, dl)
			}
			cc.ownDL = own
			w = append(w, work{kind: dispatch.Send, f: g, c: a.Copy, replica: cp.Replica, low: cp.Priority == dispatch.Low, call: *cc})
		case dispatch.Cancel:
			w = append(w, work{kind: dispatch.Cancel, f: g, c: a.Copy, replica: a.Batch.Copies[a.Copy].Replica, call: g.copies[a.Copy]})
		case dispatch.Complete, dispatch.Fail:
			cc := &g.copies[a.Copy]
			g.resp, g.err = cc.resp, cc.err
			if a.Kind == dispatch.Fail && g.err == nil {
				g.resp, g.err = nil, status.Error(codes.Canceled, "every copy of the batch was cancelled")
			}
			if !g.answered {
				g.answered = true
				if g.done != nil {
					close(g.done)
				}
			}
		case dispatch.After:
			g.timers = append(g.timers, time.AfterFunc(a.At-now, func() { d.timer(g) }))
		}
	}
	// Forget the finished batches: f and those the actions touched.
	d.forget(f)
	for _, a := range acts {
		if g := flightOf(a.Batch); g != nil && g != f {
			d.forget(g)
		}
	}
	return w
}

// flightOf is the driver's record of b; nil once b is finished.
func flightOf(b *dispatch.Batch) *flight {
	if f, _ := b.Driver.(*flight); f != nil && !f.finished {
		return f
	}
	return nil
}

// forget drops a finished batch and its timers (under mu).
func (d *Dispatcher) forget(f *flight) {
	if f == nil || f.finished || !f.b.Finished() {
		return
	}
	f.finished = true
	d.live--
	for _, t := range f.timers {
		t.Stop()
	}
	f.timers = nil
}

// carryOut starts the calls and cancels the copies apply listed (without
// mu).
func (d *Dispatcher) carryOut(w []work) {
	for _, x := range w {
		switch x.kind {
		case dispatch.Send:
			go func() { d.carryOut(d.call(x)) }()
		case dispatch.Cancel:
			go d.purge(x.replica, x.f.b.ID, x.call.cancel)
		}
	}
}

// own takes the Send of f's batch out of w, when there is one.
func own(w []work, f *flight) ([]work, work, bool) {
	for i, x := range w {
		if x.kind == dispatch.Send && x.f == f {
			return append(w[:i:i], w[i+1:]...), x, true
		}
	}
	return w, work{}, false
}

// call makes copy c's call to its replica, reports it Done and returns the
// work the Machine's answer asks for.
func (d *Dispatcher) call(x work) []work {
	f, c, cc := x.f, x.c, x.call
	var req *pb.GetRequest
	if d.single {
		// One copy at a time: the caller's request itself carries them.
		req = f.req
		req.BatchId, req.Priority = f.b.ID, pb.Priority_PRIORITY_NORMAL
	} else {
		req = &pb.GetRequest{Keys: f.req.Keys, Sizes: f.req.Sizes, BatchId: f.b.ID}
	}
	if x.low {
		req.Priority = pb.Priority_PRIORITY_LOW
	}
	resp, err := d.rs.call(cc.ctx, x.replica, req, f.opts...)
	cc.cancel()

	d.mu.Lock()
	f.copies[c].resp, f.copies[c].err = resp, err
	var st dispatch.Status
	switch {
	case err == nil:
		st = dispatch.OK
	case f.b.Copies[c].Cancelling:
		st = dispatch.Cancelled
	case status.Code(err) == codes.Unavailable:
		st = dispatch.Retryable
	case status.Code(err) == codes.DeadlineExceeded && cc.ownDL:
		// The attempt's own timeout (its deadline is before the
		// caller's), while the caller still has time. The replica may
		// say so first: its copy of the deadline ends a moment earlier.
		st = dispatch.Retryable
	default:
		st = dispatch.Failed
	}
	now := d.now()
	w := d.apply(now, f, d.m.Done(now, f.b, c, st), nil)
	d.mu.Unlock()
	return w
}

// purge asks replica r to drop batch id's queries (best effort), then
// cancels the copy's call: the replica ends it as purged (queued queries
// dropped, running ones stopped) rather than as a caller that went away,
// and a replica that does not answer the Purge within PurgeTimeout has its
// call cancelled anyway.
func (d *Dispatcher) purge(r int, id uint64, cancelCall context.CancelFunc) {
	defer cancelCall()
	ctx, cancel := context.WithTimeout(context.Background(), PurgeTimeout)
	defer cancel()
	d.purges.Add(1)
	if _, err := d.rs.list[r].client.Purge(ctx, &pb.PurgeRequest{BatchIds: []uint64{id}}); err != nil {
		d.purgeErrors.Add(1)
	}
}

// timer delivers a policy's timer for f, unless the batch finished.
func (d *Dispatcher) timer(f *flight) {
	d.mu.Lock()
	if f.finished {
		d.mu.Unlock()
		return
	}
	now := d.now()
	w := d.apply(now, f, d.m.Timer(now, f.b), nil)
	d.mu.Unlock()
	d.carryOut(w)
}

// rotation tells the policy that replica i left or rejoined rotation.
func (d *Dispatcher) rotation(i int, in bool) {
	d.mu.Lock()
	now := d.now()
	acts := d.m.Rotation(now, i, in)
	var w []work
	if len(acts) > 0 {
		w = d.apply(now, flightOf(acts[0].Batch), acts, nil)
	}
	d.mu.Unlock()
	d.carryOut(w)
}

// Stats are a Dispatcher's counters since it started.
type Stats struct {
	dispatch.Counters
	// ExtraRatio is the duplicates per batch in the budget's current
	// window (0 for a policy without a budget).
	ExtraRatio float64
	// Purges are the Purge calls made for cancelled copies; PurgeErrors
	// those that failed.
	Purges, PurgeErrors uint64
	// InRotation is the replicas in rotation as the policy sees them.
	InRotation int
	// Live is the batches not finished yet (not answered, or with a copy
	// still open).
	Live int
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	s := Stats{Counters: d.m.Counters, InRotation: d.m.NumInRotation(), Live: d.live}
	if b := d.m.Budget(); b != nil {
		if orig, extra := b.Load(d.now()); orig > 0 {
			s.ExtraRatio = float64(extra) / float64(orig)
		}
	}
	d.mu.Unlock()
	s.Purges, s.PurgeErrors = d.purges.Load(), d.purgeErrors.Load()
	return s
}
