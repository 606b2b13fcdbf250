// Package load offers a backend an open-loop stream of Get calls at a fixed
// query rate and measures what it serves: the served query rate, call
// latency percentiles (from each call's scheduled send time, so a slow
// backend cannot slow the offered load down), and the queue/service split
// the backend reports. backends/cmd/backendload is its command line; tests
// use it to show that queueing is real.
package load

import (
	"context"
	"errors"
	"fmt"
	"github.com/robinhoodcache/robinhood/lib/percentile"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/backends/value"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Config describes the offered load.
type Config struct {
	// Rate is the offered load in queries (keys) per second.
	Rate float64
	// Batch is the number of keys per Get call.
	Batch int
	// Warmup is sent before the measured period and not counted.
	Warmup time.Duration
	// Duration is the measured period.
	Duration time.Duration
	// Keys is the size of the key space "k0" … "k<Keys-1>", drawn uniformly.
	Keys int
	// Size is the requested value size per key, bytes.
	Size int
	// Timeout is the deadline of each call.
	Timeout time.Duration
	// Poisson spaces calls with exponential gaps (a Poisson process);
	// otherwise they are evenly spaced.
	Poisson bool
	// Seed drives keys and gaps.
	Seed uint64
	// MaxInFlight bounds outstanding calls; a call due while the bound is
	// reached is dropped and counted, so the generator cannot run away.
	MaxInFlight int
	// Verify, if set, is the backend name: every returned value is checked
	// against value.Bytes(Verify, key, Size).
	Verify string
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be > 0 queries/s, got %v", c.Rate)
	case c.Batch < 1:
		return fmt.Errorf("batch must be ≥ 1, got %d", c.Batch)
	case c.Duration <= 0:
		return fmt.Errorf("duration must be > 0, got %v", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("warmup must be ≥ 0, got %v", c.Warmup)
	case c.Keys < 1:
		return fmt.Errorf("keys must be ≥ 1, got %d", c.Keys)
	case c.Size < 0 || c.Size > 64<<20:
		return fmt.Errorf("size must be in [0, 64 MiB], got %d", c.Size)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout must be > 0, got %v", c.Timeout)
	case c.MaxInFlight < 1:
		return fmt.Errorf("max in-flight must be ≥ 1, got %d", c.MaxInFlight)
	}
	return nil
}

// Percentiles summarises a latency sample (nearest rank).
type Percentiles struct {
	N                        int
	Mean, P50, P90, P99, Max time.Duration
}

// Summarize computes the percentiles of d (which it sorts).
func Summarize(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	rank := func(q float64) time.Duration { return percentile.Of(d, q) }
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return Percentiles{N: len(d), Mean: sum / time.Duration(len(d)), P50: rank(0.5), P90: rank(0.9), P99: rank(0.99), Max: d[len(d)-1]}
}

// Result is what one run measured. Counts cover calls scheduled in the
// measured period, except Served, which counts completions in it.
type Result struct {
	// Offered is the query rate sent in the measured period.
	Offered float64
	// Served is the rate of queries in calls that completed successfully
	// during the measured period.
	Served float64
	// Calls is the number of calls scheduled; OK, Failed and Dropped
	// partition it.
	Calls, OK, Failed, Dropped int
	// Codes counts failed calls by gRPC code.
	Codes map[codes.Code]int
	// Latency is per successful call, from its scheduled send time.
	Latency Percentiles
	// QueueUsMean and ServiceUsMean are per query, from the responses'
	// queue_us and service_us.
	QueueUsMean, ServiceUsMean float64
	// Mismatches counts values that failed the Verify check.
	Mismatches int
}

type record struct {
	scheduled, done  time.Time
	err              error
	queueUs, svcUs   uint64
	mismatches, keys int
}

// Run offers the load to client until Warmup+Duration have passed, waits
// for outstanding calls (each bounded by Timeout), and returns the result.
func Run(ctx context.Context, client robinhoodv1.BackendServiceClient, c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5851f42d4c957f2d))
	gap := time.Duration(float64(c.Batch) / c.Rate * float64(time.Second))
	start := time.Now()
	mStart := start.Add(c.Warmup)
	mEnd := mStart.Add(c.Duration)

	var (
		mu      sync.Mutex
		records []record
		dropped int
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, c.MaxInFlight)
	next := start
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		g := gap
		if c.Poisson {
			g = time.Duration(rng.ExpFloat64() * float64(gap))
		}
		next = next.Add(g)
		if !next.Before(mEnd) {
			break
		}
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				wg.Wait()
				return Result{}, ctx.Err()
			}
		}
		req := &robinhoodv1.GetRequest{Keys: make([]string, c.Batch), Sizes: make([]uint32, c.Batch)}
		for i := range req.Keys {
			req.Keys[i] = "k" + strconv.Itoa(rng.IntN(c.Keys))
			req.Sizes[i] = uint32(c.Size)
		}
		select {
		case sem <- struct{}{}:
		default:
			if !next.Before(mStart) {
				dropped++
			}
			continue
		}
		wg.Add(1)
		go func(scheduled time.Time) {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, c.Timeout)
			defer cancel()
			resp, err := client.Get(cctx, req)
			r := record{scheduled: scheduled, done: time.Now(), err: err, keys: len(req.Keys)}
			if err == nil {
				r.queueUs, r.svcUs = resp.QueueUs, resp.ServiceUs
				if len(resp.Values) != len(req.Keys) {
					r.err = fmt.Errorf("%d values for %d keys", len(resp.Values), len(req.Keys))
				} else if c.Verify != "" {
					for i, v := range resp.Values {
						if len(v) != c.Size || !value.Check(v, c.Verify, req.Keys[i]) {
							r.mismatches++
						}
					}
				}
			}
			mu.Lock()
			records = append(records, r)
			mu.Unlock()
		}(next)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}

	res := Result{Codes: map[codes.Code]int{}, Dropped: dropped}
	var lat []time.Duration
	var served, queries int
	var queueUs, svcUs uint64
	for _, r := range records {
		if r.err == nil && !r.done.Before(mStart) && !r.done.After(mEnd) {
			served += r.keys
		}
		if r.scheduled.Before(mStart) {
			continue
		}
		res.Calls++
		res.Mismatches += r.mismatches
		if r.err != nil {
			res.Failed++
			res.Codes[status.Code(r.err)]++
			continue
		}
		res.OK++
		queries += r.keys
		queueUs += r.queueUs
		svcUs += r.svcUs
		lat = append(lat, r.done.Sub(r.scheduled))
	}
	res.Calls += dropped
	secs := c.Duration.Seconds()
	res.Offered = float64(res.Calls*c.Batch) / secs
	res.Served = float64(served) / secs
	res.Latency = Summarize(lat)
	if queries > 0 {
		res.QueueUsMean = float64(queueUs) / float64(queries)
		res.ServiceUsMean = float64(svcUs) / float64(queries)
	}
	if res.Mismatches > 0 {
		return res, errors.New("some values differ from value.Bytes")
	}
	return res, nil
}
