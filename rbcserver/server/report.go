package server

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/loghist"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/stats"
)

// Reasons a batch is rejected, the values of the reason label of
// rbcserver_records_rejected_total and rbcserver_batches_rejected_total.
const (
	ReasonLengthMismatch = "length_mismatch"      // latency_us and blocking_backend differ in length
	ReasonBackendRange   = "backend_out_of_range" // a blocking_backend ≥ --max-backends
	ReasonTooLarge       = "too_large"            // message over MaxMessageBytes (batches only)
	ReasonBadStats       = "bad_stats"            // a backend_stats entry is invalid
	ReasonShare          = "share"                // one batch beyond its fraction of the ring (--max-batch-fraction)
	ReasonCaller         = "caller_mismatch"      // app_server_id is not the authenticated caller's name
	ReasonReporter       = "unknown_reporter"     // app_server_id is no app server of the topology (or OTLP's caller not allowed)
)

// Trailer keys of a Report stream that ends in an error: the records it
// stored and refused before the error (docs/protocol.md).
const (
	TrailerAccepted = "robinhood-accepted-records"
	TrailerRejected = "robinhood-rejected-records"
)

// BatchError says why a ReportRequest was rejected.
type BatchError struct {
	// Reason is one of the Reason constants.
	Reason string
	// Records is the number of records the batch carried (the longer array).
	Records int
	msg     string
}

func (e *BatchError) Error() string { return e.msg }

// ValidateBatch checks one batch's structure: the two arrays must be
// parallel (equal length). The error names the first offending index and
// its value. Records whose blocking backend is out of range are refused one
// by one (ValidRecords), not the batch.
func ValidateBatch(req *robinhoodv1.ReportRequest) *BatchError {
	lat, be := req.GetLatencyUs(), req.GetBlockingBackend()
	records := max(len(lat), len(be))
	switch {
	case len(lat) > len(be):
		i := len(be)
		return &BatchError{Reason: ReasonLengthMismatch, Records: records, msg: fmt.Sprintf(
			"latency_us has %d entries but blocking_backend has %d: latency_us[%d] = %d has no blocking backend (the arrays are parallel and must have equal length)",
			len(lat), len(be), i, lat[i])}
	case len(be) > len(lat):
		i := len(lat)
		return &BatchError{Reason: ReasonLengthMismatch, Records: records, msg: fmt.Sprintf(
			"blocking_backend has %d entries but latency_us has %d: blocking_backend[%d] = %d has no latency (the arrays are parallel and must have equal length)",
			len(be), len(lat), i, be[i])}
	}
	return nil
}

// ValidRecords returns a structurally valid batch's records whose blocking
// backend is below maxBackends (the arrays themselves when all are), the
// number refused, and a message naming the first refused one, e.g.
// "blocking_backend[17] = 5000 is not below --max-backends 1024".
func ValidRecords(lat, be []uint32, maxBackends int) (okLat, okBe []uint32, refused int, first string) {
	limit := uint32(maxBackends)
	for i, b := range be {
		if b < limit {
			if refused > 0 {
				okLat, okBe = append(okLat, lat[i]), append(okBe, b)
			}
			continue
		}
		if refused == 0 {
			first = fmt.Sprintf("blocking_backend[%d] = %d is not below --max-backends %d", i, b, maxBackends)
			okLat, okBe = append(make([]uint32, 0, len(lat)-1), lat[:i]...), append(make([]uint32, 0, len(be)-1), be[:i]...)
		}
		refused++
	}
	if refused == 0 {
		return lat, be, 0, ""
	}
	return okLat, okBe, refused, first
}

// errShuttingDown ends Report streams when the server drains.
var errShuttingDown = status.Error(codes.Unavailable, "rbcserver is shutting down; reconnect and resend")

// received is one result of stream.Recv.
type received struct {
	req *robinhoodv1.ReportRequest
	err error
}

// Report ingests a stream of batches. Each batch is stored under one ring
// lock with the time the client cut it (its sent_unix_nano, clamped to the
// RBC window before the arrival) as its arrival time. A record whose
// blocking backend is out of range is refused alone (counted; its batch's
// other records are stored). A batch that is wrong as a whole (arrays of
// different length, invalid statistics, another caller's id, beyond the
// reporter's share) ends the stream, and none of its records are stored;
// batches accepted before it stay. When the client closes the stream the
// response counts what was accepted and refused; a stream that ends in an
// error carries the same counts in its trailers.
func (s *Server) Report(stream robinhoodv1.RBCService_ReportServer) error {
	s.m.streams.Inc()
	defer s.m.streams.Dec()

	// Recv blocks; a reader goroutine lets the handler also watch for a
	// drain. It ends when the stream does: the handler's return cancels the
	// stream, which fails the pending Recv.
	msgs := make(chan received)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case msgs <- received{req, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()

	var app string
	var records, batches, refused uint64
	defer func() {
		stream.SetTrailer(metadata.Pairs(TrailerAccepted, strconv.FormatUint(records, 10),
			TrailerRejected, strconv.FormatUint(refused, 10)))
	}()
	caller, authed := auth.Caller(stream.Context())
	for {
		var r received
		select {
		case <-s.draining:
			return errShuttingDown
		case r = <-msgs:
		}
		switch {
		case r.err == io.EOF:
			s.log.Debug("report stream closed", "app_server_id", app, "records", records, "batches", batches)
			return stream.SendAndClose(&robinhoodv1.ReportResponse{AcceptedRecords: records, AcceptedBatches: batches,
				RejectedRecords: refused})
		case status.Code(r.err) == codes.ResourceExhausted:
			s.m.batchesRejected.WithLabelValues(ReasonTooLarge).Inc()
			s.log.Warn("report batch rejected", "app_server_id", app, "reason", ReasonTooLarge, "err", r.err)
			return r.err
		case r.err != nil:
			s.log.Debug("report stream ended", "app_server_id", app, "records", records, "batches", batches, "err", r.err)
			return r.err
		}
		if batches == 0 && app == "" {
			app = r.req.GetAppServerId()
			s.log.Debug("report stream opened", "app_server_id", app)
		}
		if id := r.req.GetAppServerId(); s.cfg.Reporters != nil && !s.cfg.Reporters[id] {
			n := len(r.req.GetLatencyUs())
			s.m.batchesRejected.WithLabelValues(ReasonReporter).Inc()
			s.m.recordsRejected.WithLabelValues(ReasonReporter).Add(float64(n))
			s.log.Warn("report batch rejected", "app_server_id", id, "caller", caller, "reason", ReasonReporter)
			return status.Errorf(codes.PermissionDenied, "app_server_id %q is not an app server of the topology: only "+
				"its app servers' records are taken (--topology)", id)
		}
		if authed && r.req.GetAppServerId() != caller {
			// A token speaks for one app server: its records count
			// against that app server's share, under its name.
			n := len(r.req.GetLatencyUs())
			s.m.batchesRejected.WithLabelValues(ReasonCaller).Inc()
			s.m.recordsRejected.WithLabelValues(ReasonCaller).Add(float64(n))
			s.log.Warn("report batch rejected", "app_server_id", r.req.GetAppServerId(), "caller", caller, "reason", ReasonCaller)
			return status.Errorf(codes.PermissionDenied, "app_server_id %q is not the caller of this token (%q): a token reports for its own app server only",
				r.req.GetAppServerId(), caller)
		}
		if berr := ValidateBatch(r.req); berr != nil {
			s.m.batchesRejected.WithLabelValues(berr.Reason).Inc()
			s.m.recordsRejected.WithLabelValues(berr.Reason).Add(float64(berr.Records))
			s.log.Warn("report batch rejected", "app_server_id", r.req.GetAppServerId(), "reason", berr.Reason, "err", berr.Error())
			return status.Error(codes.InvalidArgument, berr.Error())
		}
		reports, serr := statsReports(r.req.GetBackendStats(), s.cfg.MaxBackends)
		if serr != nil {
			n := len(r.req.GetLatencyUs())
			s.m.batchesRejected.WithLabelValues(ReasonBadStats).Inc()
			s.m.recordsRejected.WithLabelValues(ReasonBadStats).Add(float64(n))
			s.log.Warn("report batch rejected", "app_server_id", r.req.GetAppServerId(), "reason", ReasonBadStats, "err", serr)
			return status.Error(codes.InvalidArgument, serr.Error())
		}
		lat, be, bad, first := ValidRecords(r.req.GetLatencyUs(), r.req.GetBlockingBackend(), s.cfg.MaxBackends)
		if bad > 0 {
			s.m.recordsRejected.WithLabelValues(ReasonBackendRange).Add(float64(bad))
			level := slog.LevelDebug
			if refused == 0 { // once a stream at warn: a client that always sends them would flood the log
				level = slog.LevelWarn
			}
			s.log.Log(stream.Context(), level, "report records refused", "app_server_id", r.req.GetAppServerId(),
				"reason", ReasonBackendRange, "records", bad, "of", len(r.req.GetLatencyUs()), "first", first)
			refused += uint64(bad)
		}
		now, at := s.now()
		if n := len(lat); n > 0 {
			if lim := int(s.cfg.MaxBatchFraction * float64(s.cfg.RingSize)); n > lim {
				return s.refuse(r.req.GetAppServerId(), n, ReasonShare, fmt.Errorf("a batch of %d records is more than %g of the ring (%d records; --max-batch-fraction)",
					n, s.cfg.MaxBatchFraction, lim))
			}
			lat, be = s.admit(r.req.GetAppServerId(), lat, be, at)
		}
		if late := s.lateness(now, r.req.GetSentUnixNano()); late > 0 {
			at -= int64(late)
			if late >= time.Second {
				s.m.lateBatches.Inc()
			}
		}
		offered := len(r.req.GetLatencyUs()) - bad // thinned records count as accepted: the kept ones stand for them
		s.ring.Append(at, lat, be)
		s.stats.Add(now, r.req.GetAppServerId(), reports)
		s.m.addStats(reports)
		records += uint64(offered)
		batches++
		s.m.addIngested(len(lat))
	}
}

// shareFloor is how many records an app server may always hold in the
// window, whatever the others hold: 1% of the ring.
func (s *Server) shareFloor() int { return s.cfg.RingSize / 100 }

// admit thins an app server's valid records to its share of the window
// (shares.admit), counting and, the first time, logging what it leaves out.
func (s *Server) admit(app string, lat, be []uint32, at int64) ([]uint32, []uint32) {
	keep, limit := s.shares.admit(app, len(lat), at, s.cfg.MaxAppShare, s.shareFloor())
	if keep < len(lat) {
		if s.m.appThinnedAdd(app, len(lat)-keep) {
			s.log.Warn("app server's records thinned to its share of the window (an app server with more traffic than "+
				"the others; weighed, not refused: docs/rbcserver.md, \"One reporter's share\")",
				"app_server_id", app, "kept", keep, "of", len(lat), "share_limit_records", int(limit), "max_app_share", s.cfg.MaxAppShare)
		}
	}
	return thin(lat, be, keep)
}

// refuse ends a stream whose batch would give one reporter too much of the
// ring: ResourceExhausted, counted per app server.
func (s *Server) refuse(app string, n int, reason string, err error) error {
	s.m.batchesRejected.WithLabelValues(reason).Inc()
	s.m.recordsRejected.WithLabelValues(reason).Add(float64(n))
	s.m.appRejected(app, n)
	s.log.Warn("report batch refused", "app_server_id", app, "reason", reason, "records", n, "err", err)
	return status.Error(codes.ResourceExhausted, err.Error())
}

// lateness is how long before its arrival a batch was cut, by its
// sent_unix_nano: 0 without one or when the client's clock is ahead, at most
// the RBC window (a batch older than that only counts at the window's edge).
func (s *Server) lateness(now time.Time, sent int64) time.Duration {
	if sent <= 0 {
		return 0
	}
	d := now.Sub(time.Unix(0, sent))
	return min(max(d, 0), s.cfg.Window)
}

// statsReports converts and validates a batch's backend_stats; the error
// names the entry.
func statsReports(in []*robinhoodv1.BackendStats, maxBackends int) ([]stats.Report, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]stats.Report, len(in))
	for i, b := range in {
		out[i] = stats.Report{
			Backend: b.GetBackend(), Hits: b.GetCacheHits(), Misses: b.GetCacheMisses(),
			ShadowHits: b.GetShadowHits(), ShadowBytes: b.GetShadowBytes(), LimitBytes: b.GetPartitionLimitBytes(),
			Latency:  loghist.Sparse{Index: b.GetLatencyBucket(), Count: b.GetLatencyCount()},
			Distance: loghist.Sparse{Index: b.GetDistanceBucket(), Count: b.GetDistanceCount()},
		}
		if err := out[i].Validate(maxBackends); err != nil {
			return nil, fmt.Errorf("backend_stats[%d]: %v", i, err)
		}
	}
	return out, nil
}
