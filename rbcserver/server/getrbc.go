package server

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// GetRBC computes the blocking counts over the records that arrived in the
// requested window (docs/algorithms.md). Zero parameters mean the server's defaults;
// invalid ones fail with InvalidArgument. An empty window is not an error:
// every count is zero.
func (s *Server) GetRBC(ctx context.Context, req *robinhoodv1.GetRBCRequest) (*robinhoodv1.GetRBCResponse, error) {
	q, err := s.resolve(req.GetWindowSeconds(), req.GetLowPct(), req.GetHighPct())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return s.snapshot(ctx, q)
}

// snapshot copies the window out of the ring (the only part done under the
// ring's lock), computes on the copy and builds the response. When q is
// the default query the per-backend gauges are updated too.
func (s *Server) snapshot(ctx context.Context, q query) (*robinhoodv1.GetRBCResponse, error) {
	select {
	case s.compute <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-s.compute }()

	now, at := s.now()
	since := at - int64(q.window)
	if since > at { // overflow: the window reaches back past any record
		since = math.MinInt64
	}
	start := time.Now()
	s.lat, s.be = s.ring.Window(since, s.lat, s.be)
	res, err := s.calc.Compute(s.lat, s.be, q.params)
	s.m.compute.Observe(time.Since(start).Seconds())
	if err != nil { // cannot happen: parameters and stored records are validated
		return nil, status.Errorf(codes.Internal, "RBC computation: %v", err)
	}
	if q == s.defaults {
		s.m.publish(res, s.published)
	}

	resp := &robinhoodv1.GetRBCResponse{
		Backends:          make([]*robinhoodv1.BackendRBC, len(res.Backends)),
		WindowRequests:    uint64(res.N),
		LowLatencyUs:      res.Low,
		HighLatencyUs:     res.High,
		ComputedUnixNanos: now.UnixNano(),
		BandRequests:      res.Band,
		WindowSeconds:     q.window.Seconds(),
		LowPct:            q.params.LowPct,
		HighPct:           q.params.HighPct,
		P50LatencyUs:      res.P50,
		P99LatencyUs:      res.P99,
	}
	for i, c := range res.Backends {
		resp.Backends[i] = &robinhoodv1.BackendRBC{Backend: c.Backend, BlockingCount: c.Blocking, WindowBlocking: c.Window}
	}
	return resp, nil
}
