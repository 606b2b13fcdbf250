// Package dispatch decides which replica of a backend serves a batch of
// queries. The mechanism (a backend's replicas and their gRPC connections,
// Replicas) is apart from the policy (a Dispatcher): the application server
// hands every cache-miss batch to its backend's Dispatcher.
//
// Policies are plug-ins: each lives in its own file and registers itself
// from an init function with Register, under a name, with a parameter
// struct and a constructor. The topology chooses one per app server
// (`dispatch: {policy: NAME, <parameters>}`), and Build validates its
// parameters strictly. `bin/appserver --list-dispatch-policies` prints the
// registry. docs/architecture.md walks through adding one.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/dialopts"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Dispatcher sends one batch of queries for a backend to its replicas.
type Dispatcher interface {
	Get(ctx context.Context, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error)
}

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
	now                func() time.Time
	retries, ejections atomic.Uint64
	readmissions       atomic.Uint64
	done               chan struct{} // closed by Close: stops the probes
	closeOnce          sync.Once

	// AttemptTimeout bounds one call to one replica (the app server's
	// backend_timeout); 0: only the caller's context bounds it. A batch may
	// take two attempts, within the caller's context.
	AttemptTimeout time.Duration
}

// Dial creates one gRPC client connection per replica of b (connections are
// established on first use). Extra options are added to the defaults
// (plaintext).
func Dial(b config.Backend, opts ...grpc.DialOption) (*Replicas, error) {
	if len(b.Replicas) == 0 {
		return nil, fmt.Errorf("dispatch: backend %q has no replicas", b.Name)
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

// Call sends req to replica i, counting it in flight while it runs and
// recording the outcome in the replica's health. Each attempt is bounded by
// AttemptTimeout (when set) within ctx. When an attempt fails with
// Unavailable, or runs out of its AttemptTimeout, and ctx still leaves time,
// the batch is retried once on another replica in rotation (health.go).
func (rs *Replicas) Call(ctx context.Context, i int, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	resp, err := rs.attempt(ctx, i, req, opts...)
	if err == nil || ctx.Err() != nil {
		return resp, err
	}
	if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
		return resp, err
	}
	j := rs.other(i)
	if j < 0 {
		return resp, err
	}
	rs.retries.Add(1)
	return rs.attempt(ctx, j, req, opts...)
}

// attempt is one call to replica i, bounded by AttemptTimeout.
func (rs *Replicas) attempt(ctx context.Context, i int, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	if rs.AttemptTimeout <= 0 {
		return rs.call(ctx, i, req, opts...)
	}
	actx, cancel := context.WithTimeout(ctx, rs.AttemptTimeout)
	defer cancel()
	return rs.call(actx, i, req, opts...)
}

// Close closes every replica's connection.
func (rs *Replicas) Close() error {
	rs.closeOnce.Do(func() { close(rs.done) })
	var errs []error
	for _, r := range rs.list {
		errs = append(errs, r.conn.Close())
	}
	return errors.Join(errs...)
}
