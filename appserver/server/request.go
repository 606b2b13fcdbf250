package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/appserver/cache"
	"github.com/robinhoodcache/robinhood/lib/fanout"
	"github.com/robinhoodcache/robinhood/lib/trace"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// call is one backend's batch of queries within one layer of a request.
type call struct {
	be   *backend
	q    *trace.BackendQueries
	vals [][]byte // vals[i] answers q.Keys[i]; nil when it failed

	hits, misses, errors int
	err                  error
	// done is when the batch's last value became available (or it failed).
	done time.Time
}

// outcome is what executing a request produced.
type outcome struct {
	calls [][]call // per executed layer
	// skipped is the number of layers not run because an earlier one failed.
	skipped  int
	latency  time.Duration
	blocking *backend // nil when the request has no queries
	failed   bool
}

func (s *Server) serveRequest(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.m.inFlight.Inc()
	defer s.m.inFlight.Dec()

	buf := s.getBuf()
	defer s.putBuf(buf)
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.maxBody)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.reject(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.maxBody))
			return
		}
		s.reject(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	req, err := trace.Parse(buf.Bytes())
	if err != nil {
		s.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.validate(req); err != nil {
		s.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	if n := req.ValueBytes(); n > s.maxRequest {
		s.reject(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the request asks for %d bytes of values, more than the %d-byte limit (--max-request-bytes)", n, s.maxRequest))
		return
	}
	withValues := r.URL.RawQuery != "" && r.URL.Query().Get("values") == "1"

	ctx, cancel := context.WithTimeout(r.Context(), s.requestTimeout)
	out := s.execute(ctx, req, start)
	cancel()
	s.record(&out)

	buf.Reset()
	buf.Write(appendResponse(buf.AvailableBuffer(), req, &out, withValues))
	w.Header().Set("Content-Type", "application/json")
	if out.failed {
		w.WriteHeader(http.StatusBadGateway)
	}
	_, _ = w.Write(buf.Bytes())
}

// maxPooledBuf bounds the buffers kept for reuse, so that one huge request
// does not pin its memory.
const maxPooledBuf = 1 << 20

func (s *Server) putBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuf {
		s.bufs.Put(b)
	}
}

func (s *Server) getBuf() *bytes.Buffer {
	if b, ok := s.bufs.Get().(*bytes.Buffer); ok {
		b.Reset()
		return b
	}
	return bytes.NewBuffer(make([]byte, 0, 4096))
}

// validate checks that every backend the request names exists, before
// anything is fetched or cached.
func (s *Server) validate(req *trace.Request) error {
	for li, layer := range req.Layers {
		for i := range layer {
			if _, ok := s.backends[layer[i].Backend]; !ok {
				return fmt.Errorf("d[%d].%s: unknown backend %q (the topology has: %s)", li, layer[i].Backend, layer[i].Backend, s.names)
			}
		}
	}
	return nil
}

func (s *Server) reject(w http.ResponseWriter, code int, msg string) {
	s.m.badRequests.Inc()
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// execute runs the layers in order, the backends of a layer in parallel. A
// layer with a failed backend call ends the request: later layers are not
// run.
func (s *Server) execute(ctx context.Context, req *trace.Request, start time.Time) outcome {
	var out outcome
	end := start
	for li, layer := range req.Layers {
		calls := make([]call, len(layer))
		for i := range layer {
			calls[i] = call{be: s.backends[layer[i].Backend], q: &layer[i]}
		}
		var wg sync.WaitGroup
		for i := 1; i < len(calls); i++ {
			wg.Add(1)
			go func(c *call) {
				defer wg.Done()
				s.runCall(ctx, c)
			}(&calls[i])
		}
		if len(calls) > 0 {
			s.runCall(ctx, &calls[0])
		}
		wg.Wait()
		out.calls = append(out.calls, calls)

		// The blocking backend (fanout.Blocking): the batch that finished
		// last or, when batches failed, the failed one that finished last.
		var small [16]fanout.Call[time.Duration]
		fc := small[:0]
		for i := range calls {
			c := &calls[i]
			fc = append(fc, fanout.Call[time.Duration]{Backend: int(c.be.id), Done: c.done.Sub(start), Failed: c.err != nil, Empty: c.q.Len() == 0})
			if !fc[i].Empty && c.done.After(end) {
				end = c.done
			}
		}
		blk, failed := fanout.Blocking(fc)
		if blk >= 0 {
			out.blocking = calls[blk].be
		}
		if failed {
			out.failed = true
			out.skipped = len(req.Layers) - li - 1
			break
		}
	}
	out.latency = end.Sub(start)
	return out
}

// runCall serves one backend's batch: cache multi-get, one backend call for
// the misses, fills queued for the cacheable values fetched.
func (s *Server) runCall(ctx context.Context, c *call) {
	q, be := c.q, c.be
	n := q.Len()
	t0 := time.Now()
	c.done = t0
	if n == 0 {
		return
	}
	c.vals = make([][]byte, n)

	var ckeys []string // cache key per query, "" when not looked up
	if be.cache != nil {
		ckeys = make([]string, n)
		look := make([]string, 0, n)
		pos := make([]int, 0, n)
		for i, k := range q.Keys {
			if q.Cacheable[i] {
				ckeys[i] = cache.Key(be.name, k)
				look = append(look, ckeys[i])
				pos = append(pos, i)
			}
		}
		if len(look) > 0 {
			got := make([][]byte, len(look))
			if err := be.cache.GetMulti(ctx, look, got); err != nil {
				be.m.cacheEr(cache.ErrorKind(err)).Inc()
			}
			for j, i := range pos {
				switch v := got[j]; {
				case v == nil:
				case int64(len(v)) == q.Sizes[i]:
					c.vals[i] = v
					c.hits++
				default:
					// Cached under another size: refetch and refill.
					be.m.cacheEr("size_mismatch").Inc()
				}
			}
			if c.hits > 0 {
				d := time.Since(t0).Seconds()
				for range c.hits {
					be.m.hitSec.Observe(d)
				}
				be.m.hits.Add(float64(c.hits))
				if s.stats != nil {
					us := d * 1e6
					for range c.hits {
						be.stats.latency.Observe(us)
					}
				}
			}
			if sc := s.stats; sc != nil {
				be.stats.hits.Add(uint64(c.hits))
				be.stats.misses.Add(uint64(len(look) - c.hits))
				if sc.events != nil {
					for _, i := range pos {
						sc.offer(shadowEvent{be: be, key: q.Keys[i], size: q.Sizes[i], hit: c.vals[i] != nil})
					}
				}
			}
		}
	}
	c.misses = n - c.hits
	if c.misses == 0 {
		c.done = time.Now()
		return
	}
	be.m.misses.Add(float64(c.misses))

	req := &pb.GetRequest{Keys: make([]string, 0, c.misses), Sizes: make([]uint32, 0, c.misses)}
	missed := make([]int, 0, c.misses)
	var bytes int64
	for i := range n {
		if c.vals[i] == nil {
			req.Keys = append(req.Keys, q.Keys[i])
			req.Sizes = append(req.Sizes, uint32(q.Sizes[i]))
			missed = append(missed, i)
			bytes += q.Sizes[i]
		}
	}
	// The backend's dispatch policy sends the batch to its replicas (one
	// copy or more); each call is bounded by backend_timeout
	// (Replicas.AttemptTimeout), and a batch whose replica fails or does not
	// answer in time is retried once on another replica within the
	// request's deadline. Get returns when the batch is answered: c.done is
	// the answer time of its winning copy, which the blocking backend and
	// the reported latency are taken from.
	resp, err := be.dispatcher.Get(ctx, req, grpc.MaxCallRecvMsgSize(recvLimit(bytes, len(missed))))
	if err == nil {
		err = checkResponse(resp, req)
	}
	c.done = time.Now()
	if err != nil {
		c.err = fmt.Errorf("backend %s: %w", be.name, err)
		if s.stats != nil { // a failed query took its time too (up to the timeout)
			us := c.done.Sub(t0).Seconds() * 1e6
			for range missed {
				be.stats.latency.Observe(us)
			}
		}
		c.errors = len(missed)
		be.m.backendErr(backendErrorKind(err)).Inc()
		s.log.Debug("backend call failed", "backend", be.name, "queries", len(missed), "err", err)
		return
	}
	d := c.done.Sub(t0).Seconds()
	if s.stats != nil {
		us := d * 1e6
		for range missed {
			be.stats.latency.Observe(us)
		}
	}
	for j, i := range missed {
		v := resp.Values[j]
		c.vals[i] = v
		be.m.missSec.Observe(d)
		if ckeys == nil || !q.Cacheable[i] {
			continue
		}
		if !cache.Fits(ckeys[i], len(v), s.itemMax) {
			be.m.fillTooLarge.Inc()
			continue
		}
		if !be.filler.Enqueue(ckeys[i], v) {
			be.m.fillDropped.Inc()
		}
	}
}

// recvLimit is the largest response a batch of n values totalling bytes may
// produce, with room for protobuf framing.
func recvLimit(bytes int64, n int) int {
	l := bytes + int64(n)*16 + 64<<10
	if l > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(l)
}

// errBadResponse marks a backend answer that does not match its request.
var errBadResponse = errors.New("bad response")

func checkResponse(resp *pb.GetResponse, req *pb.GetRequest) error {
	if len(resp.Values) != len(req.Keys) {
		return fmt.Errorf("%w: %d values for %d keys", errBadResponse, len(resp.Values), len(req.Keys))
	}
	for i, v := range resp.Values {
		if len(v) != int(req.Sizes[i]) {
			return fmt.Errorf("%w: value of key %q has %d bytes, want %d", errBadResponse, req.Keys[i], len(v), req.Sizes[i])
		}
	}
	return nil
}

// backendErrorKind classifies a failed backend call for metric labels.
func backendErrorKind(err error) string {
	if errors.Is(err, errBadResponse) {
		return "bad_response"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return "timeout"
	case codes.Unavailable:
		return "unavailable"
	case codes.Canceled:
		return "canceled"
	default:
		return "error"
	}
}

// record counts a finished request in the metrics and hands its record to
// the RBC reporter. Requests without queries have no blocking backend and
// are not reported.
func (s *Server) record(out *outcome) {
	if out.failed {
		s.m.partial.Inc()
	} else {
		s.m.okRequests.Inc()
	}
	s.m.requestSec.Observe(out.latency.Seconds())
	if out.blocking == nil {
		return
	}
	out.blocking.m.blocking.Inc()
	if s.reporter != nil {
		us := out.latency.Microseconds()
		if us > math.MaxUint32 {
			us = math.MaxUint32
		}
		s.reporter.Record(uint32(max(us, 0)), out.blocking.id)
	}
}
