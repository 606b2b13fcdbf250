// Package testbackend runs a small real BackendService on loopback for the
// application server's unit tests: it answers with the documented value
// bytes (backends/value), counts what it served, and can be told to delay
// or fail calls. End-to-end tests use the real bin/backend instead.
package testbackend

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/backends/value"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Server is a BackendService listening on 127.0.0.1.
type Server struct {
	pb.UnimplementedBackendServiceServer
	// Name is the backend name values are derived from.
	Name string
	// Addr is the listening address.
	Addr string

	calls atomic.Int64
	keys  atomic.Int64
	delay atomic.Int64 // nanoseconds
	fail  atomic.Bool

	mu       sync.Mutex
	lastKeys []string
}

// Start serves a backend called name until the test ends.
func Start(t testing.TB, name string) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Name: name, Addr: l.Addr().String()}
	g := grpc.NewServer()
	pb.RegisterBackendServiceServer(g, s)
	hs := health.NewServer() // as bin/backend's
	hs.SetServingStatus(pb.BackendService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(l)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return s
}

// SetDelay makes every later call wait d (or until its deadline) first.
func (s *Server) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// SetFail makes later calls fail with codes.Internal.
func (s *Server) SetFail(fail bool) { s.fail.Store(fail) }

// Calls is the number of Get calls received.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Keys is the number of keys requested over all calls.
func (s *Server) Keys() int64 { return s.keys.Load() }

// LastKeys returns the keys of the most recent call.
func (s *Server) LastKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lastKeys...)
}

// Get implements BackendService.
func (s *Server) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	s.calls.Add(1)
	s.keys.Add(int64(len(req.Keys)))
	s.mu.Lock()
	s.lastKeys = append(s.lastKeys[:0], req.Keys...)
	s.mu.Unlock()
	if len(req.Keys) != len(req.Sizes) {
		return nil, status.Errorf(codes.InvalidArgument, "%d keys but %d sizes", len(req.Keys), len(req.Sizes))
	}
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if s.fail.Load() {
		return nil, status.Error(codes.Internal, "told to fail")
	}
	resp := &pb.GetResponse{Values: make([][]byte, len(req.Keys))}
	for i, k := range req.Keys {
		resp.Values[i] = value.Bytes(s.Name, k, int(req.Sizes[i]))
	}
	return resp, nil
}
