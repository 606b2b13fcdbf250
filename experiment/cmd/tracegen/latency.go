package main

import (
	"math"
	"strconv"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/feasibility"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
)

// oracleLookahead is scenario check's --lookahead (feasibility.Lookahead).
var oracleLookahead bool

// latencyCheck is the latency model's part of scenario check --trace
// (experiment/feasibility, latency.go): per phase, the predicted request
// P99 of the oracle's and the configured allocation, against the SLO.
type latencyCheck struct {
	// sloMs is the topology's SLO latency (0: the topology has none).
	sloMs  float64
	phases []feasibility.PhaseLatency
}

// refineOracle replaces the oracle of every phase of c (the allocation
// minimizing the worst load/capacity) by the allocation minimizing the
// request P99 the latency model predicts, with the simulator's default
// calibration (costmodel.DefaultCalibration).
func refineOracle(c *checked, topo *config.Topology, tracePath string, duration time.Duration) (*latencyCheck, error) {
	phases := make([]feasibility.Phase, len(c.results))
	for i, r := range c.results {
		phases[i] = r.Phase
	}
	fan, err := feasibility.MeasureFanout(tracePath, duration, c.appServers, c.budget, phases)
	if err != nil {
		return nil, err
	}
	lm := feasibility.NewLatencyModel(c.backends, fan, topo.Backends, costmodel.DefaultCalibration())
	limits := feasibility.PhaseLimits(c.initial, c.changes, phases)
	inputs := make([]feasibility.PhaseInput, len(phases))
	for i := range phases {
		inputs[i] = feasibility.PhaseInput{Limits: limits[i], Rate: fan.PhaseRate[i], Miss: fan.PhaseMiss[i]}
	}
	out := &latencyCheck{phases: lm.Refine(c.results, inputs, c.floor, c.app.InitialAllocationMB())}
	if topo.SLO != nil {
		out.sloMs = float64(topo.SLO.Latency.D()) / float64(time.Millisecond)
	}
	if oracleLookahead {
		lm.Lookahead(c.results, out.phases, inputs, out.sloMs)
	}
	return out, nil
}

// slo is the SLO latency for the JSON report: null without one.
func (l *latencyCheck) slo() any {
	if l.sloMs <= 0 {
		return nil
	}
	return l.sloMs
}

// meets says whether a predicted P99 is within the SLO (nil without one).
func (l *latencyCheck) meets(p99 float64) any {
	if l.sloMs <= 0 {
		return nil
	}
	return p99 <= l.sloMs
}

// fmtMs prints a predicted latency: ∞ when overloaded.
func fmtMs(v float64) string {
	if math.IsInf(v, 1) {
		return "∞"
	}
	return formatMs(v)
}

func formatMs(v float64) string {
	prec := 2
	if v >= 100 {
		prec = 0
	} else if v >= 10 {
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}
