package load

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Measure before hedging (docs/hedging.md, "Measure before hedging"): run
// each of a sample of queries many times, one at a time, against an idle
// backend; a query's fastest run is its service time P, and what its other
// runs took beyond that is jitter J. The stalls - runs whose jitter exceeds
// a threshold - give the stall probability and duration, in multiples of
// the mean service time P̄: what the hedging bench takes as its jitter
// model (hiccup_prob, hiccup_ms).

// JitterModel is what a measurement found.
type JitterModel struct {
	Queries    int `json:"queries"`
	Executions int `json:"executions"`
	// MeanServiceMs is P̄: the mean over the queries of their fastest run.
	MeanServiceMs float64 `json:"mean_service_ms"`
	// ThresholdX: a run whose jitter exceeds ThresholdX · P̄ is a stall.
	ThresholdX float64 `json:"threshold_x"`
	// StallProb is the share of runs that stalled (each query's fastest
	// run excluded), and StallX their mean jitter in multiples of P̄.
	StallProb float64 `json:"stall_prob"`
	StallX    float64 `json:"stall_x"`
	// JitterP50X and JitterP99X are the jitter's percentiles over every
	// run, in multiples of P̄.
	JitterP50X float64 `json:"jitter_p50_x"`
	JitterP99X float64 `json:"jitter_p99_x"`
}

// AnalyzeJitter computes the model from runs[q][i], the latencies of query
// q's runs (at least two per query).
func AnalyzeJitter(runs [][]time.Duration, thresholdX float64) (JitterModel, error) {
	if len(runs) == 0 {
		return JitterModel{}, errors.New("no queries measured")
	}
	if !(thresholdX > 0) {
		return JitterModel{}, fmt.Errorf("threshold: %g must be positive", thresholdX)
	}
	m := JitterModel{Queries: len(runs), ThresholdX: thresholdX}
	mins := make([]time.Duration, len(runs))
	var sumP float64
	for q, rs := range runs {
		if len(rs) < 2 {
			return JitterModel{}, fmt.Errorf("query %d: %d runs, need at least 2", q, len(rs))
		}
		mins[q] = rs[0]
		for _, d := range rs {
			mins[q] = min(mins[q], d)
		}
		sumP += float64(mins[q])
	}
	pbar := sumP / float64(len(runs))
	if pbar <= 0 {
		return JitterModel{}, errors.New("every query's fastest run took no time: nothing to scale by")
	}
	m.MeanServiceMs = pbar / float64(time.Millisecond)
	var jit []float64
	var stalled, stallSum float64
	for q, rs := range runs {
		skipped := false
		for _, d := range rs {
			if d == mins[q] && !skipped { // the fastest run defines P
				skipped = true
				continue
			}
			j := float64(d-mins[q]) / pbar
			jit = append(jit, j)
			if j > thresholdX {
				stalled++
				stallSum += j
			}
		}
	}
	m.Executions = len(jit)
	m.StallProb = stalled / float64(len(jit))
	if stalled > 0 {
		m.StallX = stallSum / stalled
	}
	sort.Float64s(jit)
	m.JitterP50X = jit[len(jit)/2]
	m.JitterP99X = jit[min(len(jit)-1, int(float64(len(jit))*0.99))]
	return m, nil
}

// MeasureJitter runs each of queries keys (k0, k1, ...) repeats times, one
// call at a time in rounds (every query once per round), and returns the
// latencies by query.
func MeasureJitter(ctx context.Context, c robinhoodv1.BackendServiceClient, queries, repeats, size int, timeout time.Duration) ([][]time.Duration, error) {
	if queries < 1 || repeats < 2 || size < 0 {
		return nil, fmt.Errorf("need at least 1 query, 2 repeats and a size of at least 0 (got %d, %d, %d)", queries, repeats, size)
	}
	runs := make([][]time.Duration, queries)
	for r := 0; r < repeats; r++ {
		for q := range runs {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			t0 := time.Now()
			_, err := c.Get(cctx, &robinhoodv1.GetRequest{Keys: []string{"jitter-" + strconv.Itoa(q)}, Sizes: []uint32{uint32(size)}})
			d := time.Since(t0)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("query %d, run %d: %w", q, r, err)
			}
			runs[q] = append(runs[q], d)
		}
	}
	return runs, nil
}
