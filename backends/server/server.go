// Package server is a backend service's front: the gRPC BackendService that
// runs every key of a Get through the capacity model and a data path, and
// the HTTP side (admin API, /healthz, /metrics). The data paths live in
// backends/kv, backends/sqldb and backends/compute; the queueing in
// backends/capacity.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/hashing"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Store is a backend's data path: it returns value.Bytes(name, key, size)
// after doing the backend's real work for the key. Implementations are safe
// for concurrent use; the returned slice is not modified by the caller.
type Store interface {
	Get(ctx context.Context, key string, size int) ([]byte, error)
	Close() error
}

// Resizer is implemented by stores whose connection pool should follow the
// worker limit.
type Resizer interface {
	SetConcurrency(n int)
}

// Request bounds. A Get that breaks one is rejected whole with
// InvalidArgument before any key is queued.
const (
	// MaxValueBytes bounds one requested size (64 MiB).
	MaxValueBytes = 64 << 20
	// MaxResponseBytes bounds the sum of a batch's sizes whatever the
	// server's MaxBatchBytes (the gRPC send limit is sized on it).
	MaxResponseBytes = 512 << 20
	// DefaultMaxBatchBytes is Options.MaxBatchBytes' default: what one batch
	// may ask for in all (--max-batch-bytes).
	DefaultMaxBatchBytes = 16 << 20
	// MaxBatchKeys bounds the keys of one Get.
	MaxBatchKeys = 100_000
	// MaxKeyBytes bounds one key.
	MaxKeyBytes = 64 << 10
)

// GRPCServerOptions are the message-size options a server of this service
// needs: responses up to MaxResponseBytes plus framing, requests up to
// MaxBatchKeys keys of typical length, a Purge up to MaxPurgeBytes. Clients must raise their receive
// limit likewise (grpc.MaxCallRecvMsgSize).
func GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxSendMsgSize(MaxResponseBytes + 16<<20),
		grpc.MaxRecvMsgSize(64 << 20),
		grpc.ForceServerCodecV2(serverCodec()), // Purge: its own, smaller limit (codec.go)
	}
}

// Options configures New.
type Options struct {
	// Name is the backend's name: the value derivation's first input and
	// the backend="…" label of every metric.
	Name string
	// Type is kv, sql or compute (informational: logs and /healthz).
	Type  string
	Store Store
	Model *capacity.Model
	// Registry receives the metrics; nil means a new registry.
	Registry *prometheus.Registry
	// Logger receives one line per limits change; give it the backend's
	// name as an attribute.
	Logger *slog.Logger
	// MaxBatchBytes bounds the sum of the sizes one Get asks for: a larger
	// batch is refused (InvalidArgument) before anything is allocated.
	// 0 means DefaultMaxBatchBytes; at most MaxResponseBytes.
	MaxBatchBytes int64
}

// Server implements robinhoodv1.BackendServiceServer and the HTTP side.
type Server struct {
	robinhoodv1.UnimplementedBackendServiceServer

	name, typ string
	store     Store
	model     *capacity.Model
	reg       *prometheus.Registry
	log       *slog.Logger
	m         *metrics
	draining  atomic.Bool
	updateMu  sync.Mutex // serialises limit updates with their side effects
	maxBatch  int64
	// freeing is set while a return of memory to the OS is pending.
	freeing atomic.Bool

	batchMu sync.Mutex
	batches map[uint64][]*batch // by batch_id, the Gets that may be purged
}

// batch is one Get in progress that named a batch_id.
type batch struct {
	// owner is the caller that sent it (its token's name; "" without
	// authentication): only the owner's Purge purges it.
	owner   string
	tickets []*capacity.Ticket
	done    []atomic.Bool // query i finished serving (or failed)
	cancel  context.CancelFunc
	purged  atomic.Bool
}

// New returns a server for o.
func New(o Options) (*Server, error) {
	if o.Name == "" || o.Store == nil || o.Model == nil {
		return nil, errors.New("server: Name, Store and Model are required")
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxBatchBytes < 0 || o.MaxBatchBytes > MaxResponseBytes {
		return nil, fmt.Errorf("server: MaxBatchBytes %d is not in (0, %d]", o.MaxBatchBytes, MaxResponseBytes)
	}
	s := &Server{name: o.Name, typ: o.Type, store: o.Store, model: o.Model, reg: o.Registry, log: o.Logger,
		maxBatch: o.MaxBatchBytes, batches: map[uint64][]*batch{}}
	m, err := newMetrics(o.Registry, o.Name, o.Model)
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

// Registry returns the registry holding the server's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// SetDraining marks the server as shutting down: /healthz answers 503.
func (s *Server) SetDraining(v bool) { s.draining.Store(v) }

// Limits returns the current limits.
func (s *Server) Limits() capacity.Limits { return s.model.Limits() }

// UpdateLimits applies p atomically, resizes the store's pool when workers
// change, and logs the change in one line naming source (e.g. the admin
// client's address). An invalid patch changes nothing.
func (s *Server) UpdateLimits(p capacity.Patch, source string) (capacity.Limits, error) {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	old, cur, err := s.model.Update(p)
	if err != nil {
		return old, err
	}
	if r, ok := s.store.(Resizer); ok && cur.Workers != old.Workers {
		r.SetConcurrency(cur.Workers)
	}
	if diff := old.Diff(cur); len(diff) > 0 {
		s.log.Info("limits changed", append([]any{"source", source, "changes", strings.Join(diff, " ")}, cur.Attrs()...)...)
	}
	return cur, nil
}

// Get serves a batch: every key is one operation of the capacity model, in
// FIFO order, served in parallel as workers allow. values[i] is
// value.Bytes(name, keys[i], sizes[i]).
func (s *Server) Get(ctx context.Context, req *robinhoodv1.GetRequest) (*robinhoodv1.GetResponse, error) {
	total, err := validate(req, s.maxBatch)
	if err != nil {
		s.m.refused.Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if total >= largeAnswer {
		defer s.returnMemory()
	}
	n := len(req.Keys)
	if n == 0 {
		return &robinhoodv1.GetResponse{}, nil
	}
	prio := capacity.Normal
	if req.Priority == robinhoodv1.Priority_PRIORITY_LOW {
		prio = capacity.Low
	}
	ops := make([]capacity.Op, n)
	for i, k := range req.Keys {
		ops[i] = capacity.Op{Priority: prio, Key: KeyHash(k)}
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		tickets []*capacity.Ticket
		bt      *batch
	)
	if req.BatchId == 0 {
		tickets, err = s.model.JoinOps(ops)
	} else {
		// Admitted and registered in one step: a Purge that comes after a
		// query is admitted finds its batch.
		owner, _ := auth.Caller(parent)
		s.batchMu.Lock()
		if tickets, err = s.model.JoinOps(ops); err == nil {
			bt = &batch{owner: owner, tickets: tickets, done: make([]atomic.Bool, n), cancel: cancel}
			s.batches[req.BatchId] = append(s.batches[req.BatchId], bt)
		}
		s.batchMu.Unlock()
		if bt != nil {
			defer s.drop(req.BatchId, bt)
		}
	}
	if err != nil {
		s.m.rejected.Add(float64(n))
		if errors.Is(err, capacity.ErrQueueFull) {
			return nil, status.Errorf(codes.ResourceExhausted, "backend %s: %v", s.name, err)
		}
		return nil, status.Errorf(codes.Unavailable, "backend %s: %v", s.name, err)
	}

	values := make([][]byte, n)
	var (
		queued, service atomic.Int64
		errOnce         sync.Once
		firstErr        error
	)
	one := func(i int) {
		v, q, svc, err := s.serveOne(ctx, tickets[i], req.Keys[i], int(req.Sizes[i]), bt)
		if bt != nil {
			bt.done[i].Store(true)
		}
		queued.Add(int64(q))
		service.Add(int64(svc))
		if err != nil {
			// One failed key fails the batch: stop the others.
			errOnce.Do(func() { firstErr = fmt.Errorf("key %q: %w", req.Keys[i], err); cancel() })
			return
		}
		values[i] = v
	}
	if n == 1 {
		one(0)
	} else {
		var wg sync.WaitGroup
		wg.Add(n)
		for i := range tickets {
			go func(i int) { defer wg.Done(); one(i) }(i)
		}
		wg.Wait()
	}
	if firstErr != nil {
		if bt != nil && bt.purged.Load() {
			return nil, status.Errorf(codes.Canceled, "backend %s: batch %d purged", s.name, req.BatchId)
		}
		if perr := parent.Err(); perr != nil {
			return nil, status.FromContextError(perr).Err()
		}
		// Shutting down, or the data path failed (e.g. Redis unreachable):
		// another replica may serve the batch.
		return nil, status.Errorf(codes.Unavailable, "backend %s: %v", s.name, firstErr)
	}
	return &robinhoodv1.GetResponse{
		Values:    values,
		QueueUs:   uint64(queued.Load() / int64(time.Microsecond)),
		ServiceUs: uint64(service.Load() / int64(time.Microsecond)),
	}, nil
}

// Purge drops the named batches' queued queries and stops their running
// ones (a running query's injected delay ends at once, its data path when it
// next checks its context: docs/backends.md), purge_delay_ms after it
// arrives; a stopped query holds its worker purge_cost_ms longer. A batch
// belongs to the caller that sent it: another caller's Purge of its id
// purges nothing of it (counted in backend_purges_refused_total).
func (s *Server) Purge(ctx context.Context, req *robinhoodv1.PurgeRequest) (*robinhoodv1.PurgeResponse, error) {
	if len(req.BatchIds) > MaxBatchKeys {
		return nil, status.Errorf(codes.InvalidArgument, "purge of %d batches exceeds the limit of %d", len(req.BatchIds), MaxBatchKeys)
	}
	caller, _ := auth.Caller(ctx)
	if d := s.model.PurgeDelay(); d > 0 { // the purge's way to the replica (purge_delay_ms)
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	var (
		resp robinhoodv1.PurgeResponse
		mine []*batch
	)
	s.batchMu.Lock()
	for _, id := range req.BatchIds {
		for _, bt := range s.batches[id] {
			switch {
			case bt.owner != caller:
				s.m.purgeRefused.Inc()
			case !bt.purged.Swap(true):
				mine = append(mine, bt)
			}
		}
	}
	s.batchMu.Unlock()
	// Every queued query leaves the queue before any running one is
	// stopped: a worker a stopped query frees must not take a query of a
	// batch this purge names.
	stopped := make([][]bool, len(mine))
	for b, bt := range mine {
		stopped[b] = make([]bool, len(bt.tickets))
		for i, tk := range bt.tickets {
			if tk.Purge() {
				resp.Dequeued++
			} else {
				stopped[b][i] = true
			}
		}
	}
	for b, bt := range mine {
		for i, tk := range bt.tickets {
			if stopped[b][i] && !bt.done[i].Load() {
				if _, admitted := tk.Settled(); admitted {
					resp.Stopped++
				}
			}
		}
		bt.cancel()
	}
	s.m.purged.WithLabelValues("queued").Add(float64(resp.Dequeued))
	s.m.purged.WithLabelValues("running").Add(float64(resp.Stopped))
	return &resp, nil
}

func (s *Server) drop(id uint64, bt *batch) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	list := s.batches[id]
	for i, b := range list {
		if b == bt {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.batches, id)
	} else {
		s.batches[id] = list
	}
}

// KeyHash is the key of a query for the capacity model's inherent cost
// (capacity.Op.Key): FNV-1a of the key, never 0, so every replica draws the
// same cost for the same key.
func KeyHash(key string) uint64 {
	h := hashing.FNV1a(key)
	if h == 0 {
		h = 1
	}
	return h
}

// serveOne waits for t's admission, runs the data path and the injected
// delay, and records the query's metrics.
// A query of a purged batch (bt) counts as purged, not as cancelled.
func (s *Server) serveOne(ctx context.Context, t *capacity.Ticket, key string, size int, bt *batch) (v []byte, queued, service time.Duration, err error) {
	purged := func() bool { return bt != nil && bt.purged.Load() }
	if err := t.Wait(ctx); err != nil {
		if errors.Is(err, capacity.ErrClosed) {
			s.m.rejected.Inc() // still queued when shutdown gave up on it
		} else if !errors.Is(err, capacity.ErrPurged) && !purged() {
			s.m.cancelled.Inc()
		}
		return nil, 0, 0, err
	}
	queued = t.Queued()
	service, err = t.Serve(ctx, func(ctx context.Context) error {
		var gerr error
		v, gerr = s.store.Get(ctx, key, size)
		return gerr
	})
	if err != nil {
		if ctx.Err() != nil {
			if !purged() {
				s.m.cancelled.Inc()
			}
		} else {
			s.m.errors.Inc()
		}
		return nil, queued, service, err
	}
	if len(v) != size {
		s.m.errors.Inc()
		return nil, queued, service, fmt.Errorf("data path returned %d bytes, want %d", len(v), size)
	}
	s.m.served.Inc()
	s.m.servedBy[t.Priority()].Inc()
	if t.Hiccup() {
		s.m.hiccups.Inc()
	}
	s.m.queueSeconds.Observe(queued.Seconds())
	s.m.serviceSeconds.Observe(service.Seconds())
	s.m.querySeconds.Observe((queued + service).Seconds())
	return v, queued, service, nil
}

// largeAnswer is the batch size after which the server hands the memory of
// the answer back to the operating system once it is sent.
const largeAnswer = 4 << 20

// returnMemory gives freed heap back to the operating system (at most one
// return in flight): without it, the Go runtime keeps a burst of large
// answers' memory for minutes.
func (s *Server) returnMemory() {
	if !s.freeing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.freeing.Store(false)
		time.Sleep(100 * time.Millisecond) // after the answer is written out
		debug.FreeOSMemory()
	}()
}

// validate checks a batch against the bounds before anything is queued or
// allocated, and returns the bytes it asks for.
func validate(req *robinhoodv1.GetRequest, maxBatch int64) (uint64, error) {
	if len(req.Keys) != len(req.Sizes) {
		return 0, fmt.Errorf("keys and sizes must have the same length: %d keys, %d sizes", len(req.Keys), len(req.Sizes))
	}
	if len(req.Keys) > MaxBatchKeys {
		return 0, fmt.Errorf("batch of %d keys exceeds the limit of %d", len(req.Keys), MaxBatchKeys)
	}
	var total uint64
	for i, k := range req.Keys {
		if len(k) > MaxKeyBytes {
			return 0, fmt.Errorf("keys[%d] is %d bytes long, the limit is %d", i, len(k), MaxKeyBytes)
		}
		if sz := req.Sizes[i]; sz > MaxValueBytes {
			return 0, fmt.Errorf("sizes[%d] = %d (key %q) exceeds the value limit of %d bytes (64 MiB)", i, sz, truncate(k, 64), MaxValueBytes)
		}
		total += uint64(req.Sizes[i])
	}
	if total > uint64(maxBatch) {
		return 0, fmt.Errorf("sizes sum to %d bytes, more than the batch limit of %d bytes (--max-batch-bytes); split the batch", total, maxBatch)
	}
	return total, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
