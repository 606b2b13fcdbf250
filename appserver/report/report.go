// Package report sends every finished request's record (latency, blocking
// backend id) to the RBC server (paper §3.3, docs/appserver.md).
//
// Record appends to a bounded in-memory buffer and never blocks: when the
// buffer is full the record is dropped and counted. A Reporter goroutine
// (Run) sends the buffered records as one ReportRequest batch per interval
// over a long-lived RBCService.Report client stream. When the stream cannot
// be opened or a send fails, that batch is dropped and counted, and the
// stream is reopened with capped exponential back-off; batches due while
// waiting are dropped too, because late records would land in the wrong RBC
// window (the RBC server windows records by arrival time).
package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Defaults of Options.
const (
	DefaultBufferLen  = 1 << 17
	DefaultInterval   = time.Second
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 2 * time.Second
	DefaultRPCTimeout = 5 * time.Second
)

// Options configure a Reporter.
type Options struct {
	// AppServerID goes into every batch.
	AppServerID string
	// BufferLen bounds the records waiting for the next batch.
	BufferLen int
	// Interval between batches.
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the wait before reopening the stream;
	// the wait doubles after each failure.
	MinBackoff, MaxBackoff time.Duration
	// RPCTimeout bounds opening the stream and sending one batch.
	RPCTimeout time.Duration
	// Logger receives one line per connection state change.
	Logger *slog.Logger
	// Stats, when set, returns the per-backend statistics of the interval
	// since its previous call; they go into the next batch (and are lost
	// with it when it cannot be sent).
	Stats func() []*pb.BackendStats
}

// Reporter batches request records and streams them to the RBC server.
type Reporter struct {
	client pb.RBCServiceClient
	opt    Options

	mu        sync.Mutex
	lat, blk  []uint32 // records waiting for the next batch
	spareLat  []uint32
	spareBlk  []uint32
	sent      atomic.Uint64
	dropped   atomic.Uint64
	connected atomic.Bool

	// Owned by the Run goroutine.
	stream   pb.RBCService_ReportClient
	cancel   context.CancelFunc
	openedAt time.Time
	backoff  time.Duration
	retryAt  time.Time
}

// New returns a Reporter sending to client. Call Run to start sending.
func New(client pb.RBCServiceClient, opt Options) *Reporter {
	if opt.BufferLen <= 0 {
		opt.BufferLen = DefaultBufferLen
	}
	if opt.Interval <= 0 {
		opt.Interval = DefaultInterval
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = DefaultMinBackoff
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = max(DefaultMaxBackoff, opt.MinBackoff)
	}
	if opt.RPCTimeout <= 0 {
		opt.RPCTimeout = DefaultRPCTimeout
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{client: client, opt: opt}
}

// Record buffers one finished request: its latency in microseconds and the
// id of its blocking backend. It never blocks; when the buffer is full the
// record is dropped and counted.
func (r *Reporter) Record(latencyUs, backend uint32) {
	r.mu.Lock()
	if len(r.lat) >= r.opt.BufferLen {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	r.lat = append(r.lat, latencyUs)
	r.blk = append(r.blk, backend)
	r.mu.Unlock()
}

// Sent is the number of records handed to the stream.
func (r *Reporter) Sent() uint64 { return r.sent.Load() }

// Dropped is the number of records dropped: buffer full, or the RBC server
// unreachable when their batch was due.
func (r *Reporter) Dropped() uint64 { return r.dropped.Load() }

// Connected reports whether a Report stream is open.
func (r *Reporter) Connected() bool { return r.connected.Load() }

// Run sends a batch every interval until ctx is done, then sends what is
// buffered one last time and closes the stream. Run must be called once.
func (r *Reporter) Run(ctx context.Context) {
	t := time.NewTicker(r.opt.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.flush()
			r.close()
			return
		case <-t.C:
			r.flush()
		}
	}
}

// take swaps the buffer for the spare one and returns the records.
func (r *Reporter) take() (lat, blk []uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lat, blk = r.lat, r.blk
	r.lat, r.blk = r.spareLat[:0], r.spareBlk[:0]
	r.spareLat, r.spareBlk = nil, nil
	return lat, blk
}

// giveBack makes the slices of a sent batch the next spare buffer.
func (r *Reporter) giveBack(lat, blk []uint32) {
	r.mu.Lock()
	r.spareLat, r.spareBlk = lat[:0], blk[:0]
	r.mu.Unlock()
}

func (r *Reporter) flush() {
	lat, blk := r.take()
	defer r.giveBack(lat, blk)
	if len(lat) == 0 {
		return
	}
	if err := r.send(lat, blk); err != nil {
		r.dropped.Add(uint64(len(lat)))
		return
	}
	r.sent.Add(uint64(len(lat)))
}

func (r *Reporter) send(lat, blk []uint32) error {
	if r.stream != nil && r.stream.Context().Err() != nil {
		r.broken(r.stream.Context().Err())
	}
	if r.stream == nil {
		if time.Now().Before(r.retryAt) {
			return errors.New("waiting to reconnect")
		}
		if err := r.open(); err != nil {
			r.failed(err)
			return err
		}
	}
	req := &pb.ReportRequest{AppServerId: r.opt.AppServerID, LatencyUs: lat, BlockingBackend: blk,
		SentUnixNano: time.Now().UnixNano()}
	if r.opt.Stats != nil {
		req.BackendStats = r.opt.Stats()
	}
	timer := time.AfterFunc(r.opt.RPCTimeout, r.cancel)
	err := r.stream.Send(req)
	if !timer.Stop() {
		err = fmt.Errorf("sending a batch took longer than %v", r.opt.RPCTimeout)
	}
	if err != nil {
		r.broken(err)
		return err
	}
	if time.Since(r.openedAt) > r.opt.MaxBackoff {
		// The stream has proven itself; the next failure starts the
		// back-off afresh.
		r.backoff = 0
	}
	return nil
}

// open starts a Report stream, bounded by RPCTimeout.
func (r *Reporter) open() error {
	sctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(r.opt.RPCTimeout, cancel)
	s, err := r.client.Report(sctx)
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("opening the stream took longer than %v", r.opt.RPCTimeout)
	}
	if err != nil {
		cancel()
		return err
	}
	r.stream, r.cancel, r.openedAt = s, cancel, time.Now()
	r.connected.Store(true)
	r.opt.Logger.Info("RBC report stream open")
	return nil
}

// broken ends a stream that failed, logging why, and schedules a reconnect.
func (r *Reporter) broken(err error) {
	if errors.Is(err, io.EOF) {
		// The real reason comes with the stream's status.
		_, err = r.stream.CloseAndRecv()
	}
	r.cancel()
	r.stream, r.cancel = nil, nil
	r.connected.Store(false)
	r.schedule()
	r.opt.Logger.Warn("RBC report stream lost; dropping records until it is back", "err", err, "retry_in", r.backoff)
}

// failed records a failed attempt to open the stream. The first failure
// after a good period is a warning, the retries are debug lines.
func (r *Reporter) failed(err error) {
	lvl := slog.LevelDebug
	if r.backoff == 0 {
		lvl = slog.LevelWarn
	}
	r.schedule()
	r.opt.Logger.Log(context.Background(), lvl, "RBC server unreachable; dropping records", "err", err, "retry_in", r.backoff)
}

// schedule doubles the back-off (within [MinBackoff, MaxBackoff], with
// ±20% jitter) and sets the next reconnect time.
func (r *Reporter) schedule() {
	r.backoff = min(max(2*r.backoff, r.opt.MinBackoff), r.opt.MaxBackoff)
	jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(r.backoff))
	r.retryAt = time.Now().Add(r.backoff + jitter)
}

// close ends the stream cleanly, waiting at most RPCTimeout for the
// server's summary.
func (r *Reporter) close() {
	if r.stream == nil {
		return
	}
	timer := time.AfterFunc(r.opt.RPCTimeout, r.cancel)
	resp, err := r.stream.CloseAndRecv()
	timer.Stop()
	r.cancel()
	r.stream, r.cancel = nil, nil
	r.connected.Store(false)
	if err != nil {
		r.opt.Logger.Warn("RBC report stream closed with an error", "err", err)
		return
	}
	r.opt.Logger.Info("RBC report stream closed", "accepted_records", resp.GetAcceptedRecords(), "accepted_batches", resp.GetAcceptedBatches())
}
