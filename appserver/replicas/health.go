package replicas

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Passive health checks and failover (docs/appserver.md, "Replica failures"),
// part of the mechanism every dispatch policy gets: a replica that fails
// EjectAfter calls in a row with Unavailable or a deadline is ejected for a
// back-off period (EjectBase, doubling with every ejection in a row up to
// EjectMax) and then probed back by ordinary traffic; a call that fails
// with Unavailable or runs out of its attempt timeout is retried once on
// another replica within its deadline (by the policy: lib/dispatch's
// Machine.Settle). Every change of rotation is told to the Dispatcher, whose
// policy sends only to replicas in rotation (to every one when none is).
const (
	EjectAfter = 3
	EjectBase  = time.Second
	EjectMax   = 30 * time.Second
	// ProbeEvery and ProbeTimeout pace the active probe of an ejected
	// replica: a gRPC health check of its BackendService. A replica that
	// passes it after at least EjectBase out is readmitted at once instead
	// of waiting out a doubled ejection (a process that was hung and
	// resumed, a restarted one).
	ProbeEvery   = 250 * time.Millisecond
	ProbeTimeout = 200 * time.Millisecond
)

// health is one replica's record of failures.
type health struct {
	mu           sync.Mutex
	fails        int       // retryable failures in a row
	ejections    int       // ejections in a row (no success since)
	ejectedUntil time.Time // zero when in rotation
	ejectedAt    time.Time // start of the current ejection
	probing      bool      // an active probe runs
}

// readmit ends the ejection at now when it has lasted at least EjectBase;
// it reports whether it did.
func (h *health) readmit(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !now.Before(h.ejectedUntil) || now.Sub(h.ejectedAt) < EjectBase {
		return false
	}
	h.ejectedUntil, h.fails = now, 0
	return true
}

// healthy reports whether the replica is in rotation at now.
func (h *health) healthy(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !now.Before(h.ejectedUntil)
}

// until is the end of the replica's ejection (zero when in rotation).
func (h *health) until() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ejectedUntil
}

// outcome records a call's result; it returns true when the replica was
// ejected by it.
func (h *health) outcome(failed bool, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !failed {
		h.fails, h.ejections = 0, 0
		return false
	}
	h.fails++
	// After an ejection the first failure (the probe) ejects again at once.
	if h.fails < EjectAfter && h.ejections == 0 {
		return false
	}
	d := EjectBase << min(h.ejections, 5)
	h.ejectedUntil = now.Add(min(d, EjectMax))
	h.ejectedAt = now
	h.ejections++
	h.fails = 0
	return true
}

// retryable is a failure of the replica, not of the request: the replica is
// unreachable or did not answer in time while the caller still waited.
func retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// Healthy reports whether replica i is in rotation (not ejected).
func (rs *Replicas) Healthy(i int) bool { return rs.list[i].health.healthy(rs.now()) }

// Ejections is the number of times a replica was taken out of rotation.
func (rs *Replicas) Ejections() uint64 { return rs.ejections.Load() }

// tell reports a rotation change of replica i to the dispatcher.
func (rs *Replicas) tell(i int, in bool) {
	if fn := rs.rotation.Load(); fn != nil {
		(*fn)(i, in)
	}
}

// ejected tells the dispatcher that replica i left rotation, and that it
// rejoins when its ejection ends (unless it was ejected again, or
// readmitted by the probe, meanwhile: then that is told).
func (rs *Replicas) ejected(i int) {
	rs.tell(i, false)
	until := rs.list[i].health.until()
	time.AfterFunc(until.Sub(rs.now()), func() {
		if h := &rs.list[i].health; h.until().Equal(until) && h.healthy(rs.now()) {
			rs.tell(i, true)
		}
	})
}

// call sends req to replica i and records the outcome in its health.
func (rs *Replicas) call(ctx context.Context, i int, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	r := rs.list[i]
	r.inFlight.Add(1)
	resp, err := r.client.Get(ctx, req, opts...)
	r.inFlight.Add(-1)
	failed := retryable(ctx, err)
	if err == nil || failed {
		if r.health.outcome(failed, rs.now()) {
			rs.ejections.Add(1)
			rs.ejected(i)
			rs.startProbe(i)
		}
	}
	return resp, err
}

// startProbe runs the active probe of an ejected replica, unless one runs.
func (rs *Replicas) startProbe(i int) {
	r := rs.list[i]
	r.health.mu.Lock()
	if r.health.probing {
		r.health.mu.Unlock()
		return
	}
	r.health.probing = true
	r.health.mu.Unlock()
	go rs.probe(i)
}

// probe health-checks an ejected replica every ProbeEvery until it is back
// in rotation (readmitted by the probe, or its ejection ran out), or the
// replica set is closed.
func (rs *Replicas) probe(i int) {
	r := rs.list[i]
	defer func() {
		r.health.mu.Lock()
		r.health.probing = false
		r.health.mu.Unlock()
	}()
	hc := healthpb.NewHealthClient(r.conn)
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-rs.done:
			return
		case <-t.C:
		}
		if r.health.healthy(rs.now()) {
			return // ordinary traffic probes it now
		}
		ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: pb.BackendService_ServiceDesc.ServiceName})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING && r.health.readmit(rs.now()) {
			rs.readmissions.Add(1)
			rs.tell(i, true)
			return
		}
	}
}

// Readmissions is the number of ejected replicas readmitted early by the
// active probe.
func (rs *Replicas) Readmissions() uint64 { return rs.readmissions.Load() }
