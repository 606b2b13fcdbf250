package load

import (
	"context"
	"errors"
	"fmt"
	"math"
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
//
// Two things keep the measurement honest on a busy machine. The times are
// the backend's own (GetResponse.service_us) when it reports them, so the
// client's scheduling (a descheduled measuring process, its garbage
// collector) adds nothing. And the threshold rises above the noise: a run
// is a stall only when its jitter exceeds both the given multiple of P̄ and
// the median jitter plus NoiseMADs robust deviations (the median absolute
// deviation, scaled to a normal's σ), so scheduling noise that spreads every
// run's jitter is not counted as stalls; above that, a clear gap in the
// jitters (gapAbove) separates a busy machine's few delayed runs from the
// stalls; a stall's size is its jitter less the median jitter.

// JitterModel is what a measurement found.
type JitterModel struct {
	Queries    int `json:"queries"`
	Executions int `json:"executions"`
	// Clock is whose times were analysed: "server" (the backend's
	// service_us) or "client" (the call's round trip).
	Clock string `json:"clock,omitempty"`
	// MeanServiceMs is P̄: the mean over the queries of their fastest run.
	MeanServiceMs float64 `json:"mean_service_ms"`
	// ThresholdX: a run whose jitter exceeds ThresholdX · P̄ is a stall
	// (the given multiple, or the noise's bound when that is higher).
	ThresholdX float64 `json:"threshold_x"`
	// NoiseX is the median jitter and NoiseSigmaX its robust deviation, in
	// multiples of P̄.
	NoiseX      float64 `json:"noise_x"`
	NoiseSigmaX float64 `json:"noise_sigma_x"`
	// StallProb is the share of runs that stalled (each query's fastest
	// run excluded), and StallX their mean jitter beyond the median jitter,
	// in multiples of P̄.
	StallProb float64 `json:"stall_prob"`
	StallX    float64 `json:"stall_x"`
	// JitterP50X and JitterP99X are the jitter's percentiles over every
	// run, in multiples of P̄.
	JitterP50X float64 `json:"jitter_p50_x"`
	JitterP99X float64 `json:"jitter_p99_x"`
}

// NoiseMADs is how many robust deviations above the median jitter a run's
// jitter must be to count as a stall.
const NoiseMADs = 12

// AnalyzeJitter computes the model from runs[q][i], the latencies of query
// q's runs (at least two per query), each query's service time its fastest
// run. (Its median run was tried on the backend's own times, whose waits are
// timed to average their length: it overstates short costs, which no timer
// serves exactly, far more than the fastest run understates long ones;
// docs/hedging.md, "Measure before hedging".)
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
	for q, rs := range runs {
		skipped := false
		for _, d := range rs {
			if d == mins[q] && !skipped { // the fastest run defines P
				skipped = true
				continue
			}
			jit = append(jit, float64(d-mins[q])/pbar)
		}
	}
	sort.Float64s(jit)
	m.Executions = len(jit)
	m.NoiseX = median(jit)
	dev := make([]float64, len(jit))
	for i, j := range jit {
		dev[i] = math.Abs(j - m.NoiseX)
	}
	sort.Float64s(dev)
	m.NoiseSigmaX = 1.4826 * median(dev)
	m.ThresholdX = gapAbove(jit, math.Max(thresholdX, m.NoiseX+NoiseMADs*m.NoiseSigmaX))
	var stalled, stallSum float64
	for _, j := range jit {
		if j > m.ThresholdX {
			stalled++
			stallSum += j - m.NoiseX
		}
	}
	m.StallProb = stalled / float64(len(jit))
	if stalled > 0 {
		m.StallX = stallSum / stalled
	}
	m.JitterP50X = jit[len(jit)/2]
	m.JitterP99X = jit[min(len(jit)-1, int(float64(len(jit))*0.99))]
	return m, nil
}

// gapAbove moves the threshold t up to a clear gap in the sorted jitters
// above it: where a value more than doubles the one below it, with at least
// GapMin values and a tenth of those above t beyond it. A busy machine
// delays a few runs by a few service times (the descheduled backend); the
// stalls a hedging policy answers are a separate cluster far above them.
// Without such a gap t stands.
func gapAbove(sorted []float64, t float64) float64 {
	i := sort.SearchFloat64s(sorted, t)
	for i < len(sorted) && sorted[i] <= t {
		i++
	}
	above := sorted[i:]
	need := max(GapMin, len(above)/10)
	best, at := 2.0, -1
	for k := 0; k+1 < len(above); k++ {
		if len(above)-(k+1) < need {
			break
		}
		if above[k] > 0 {
			if r := above[k+1] / above[k]; r > best {
				best, at = r, k
			}
		}
	}
	if at < 0 {
		return t
	}
	return above[at]
}

// GapMin is the fewest runs beyond a gap for gapAbove to take it.
const GapMin = 10

// median of sorted xs (the mean of the middle two of an even count).
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Measured is what MeasureJitter saw: each query's runs by the client's
// clock (the round trip) and by the backend's (its service_us).
type Measured struct {
	Client, Server [][]time.Duration
}

// Runs is the runs to analyse and whose clock they are: the backend's when
// it reported a service time for every run, else the client's.
func (m Measured) Runs() ([][]time.Duration, string) {
	for _, rs := range m.Server {
		for _, d := range rs {
			if d <= 0 {
				return m.Client, "client"
			}
		}
	}
	return m.Server, "server"
}

// MeasureJitter runs each of queries keys (k0, k1, ...) repeats times, one
// call at a time in rounds (every query once per round), and returns the
// latencies by query.
func MeasureJitter(ctx context.Context, c robinhoodv1.BackendServiceClient, queries, repeats, size int, timeout time.Duration) (Measured, error) {
	if queries < 1 || repeats < 2 || size < 0 {
		return Measured{}, fmt.Errorf("need at least 1 query, 2 repeats and a size of at least 0 (got %d, %d, %d)", queries, repeats, size)
	}
	m := Measured{Client: make([][]time.Duration, queries), Server: make([][]time.Duration, queries)}
	for r := 0; r < repeats; r++ {
		for q := range queries {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			t0 := time.Now()
			resp, err := c.Get(cctx, &robinhoodv1.GetRequest{Keys: []string{"jitter-" + strconv.Itoa(q)}, Sizes: []uint32{uint32(size)}})
			d := time.Since(t0)
			cancel()
			if err != nil {
				return Measured{}, fmt.Errorf("query %d, run %d: %w", q, r, err)
			}
			m.Client[q] = append(m.Client[q], d)
			m.Server[q] = append(m.Server[q], time.Duration(resp.GetServiceUs())*time.Microsecond)
		}
	}
	return m, nil
}
