// Package planner is the online feed of the backend-load model (lib/model):
// the planner allocation policy's estimates — each backend's query rates,
// its partitions' stack-distance histogram, its capacity — turned into the
// model's inputs, and the model's answers for one app server's budget (the
// utilization now, each backend's need, the min-max allocation). The
// oracle feeds the same model the truth (experiment/feasibility). It is
// pure; cmd/planner serves it over JSON lines (proto/robinhood/v1/planner.proto).
package planner

import (
	"fmt"
	"math"

	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/loghist"
	"github.com/robinhoodcache/robinhood/lib/model"
)

// MaxBackends bounds a request (the topology's ids are below 1024).
const MaxBackends = 1024

// MaxBudgetMB bounds a budget (1 TiB of cache per app server).
const MaxBudgetMB = 1 << 20

// MaxHorizonS bounds a projection (an hour, second by second).
const MaxHorizonS = 3600

// Capacities answers a capacity request: lib/model.Capacity of each
// declared limits block.
func Capacities(req *pb.PlannerCapacityRequest) (*pb.PlannerCapacityAnswer, error) {
	if len(req.GetLimits()) > MaxBackends {
		return nil, fmt.Errorf("limits: %d entries, at most %d", len(req.GetLimits()), MaxBackends)
	}
	ans := &pb.PlannerCapacityAnswer{Ok: true}
	for i, l := range req.GetLimits() {
		for _, v := range []struct {
			name string
			v    float64
		}{{"rate", l.GetRate()}, {"extra_latency_ms", l.GetExtraLatencyMs()}, {"hiccup_prob", l.GetHiccupProb()},
			{"hiccup_ms", l.GetHiccupMs()}} {
			if !finite(v.v) || v.v < 0 {
				return nil, fmt.Errorf("limits[%d].%s: %v is not a finite number ≥ 0", i, v.name, v.v)
			}
		}
		ans.Capacity = append(ans.Capacity, model.Capacity(config.Limits{Workers: int(l.GetWorkers()), Rate: l.GetRate(),
			ExtraLatencyMs: l.GetExtraLatencyMs(), HiccupProb: l.GetHiccupProb(), HiccupMs: l.GetHiccupMs()}))
	}
	return ans, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// validate checks a plan request before anything is computed; the error
// names the field.
func validate(req *pb.PlanRequest) error {
	n := len(req.GetBackends())
	switch {
	case n == 0:
		return fmt.Errorf("backends: none")
	case n > MaxBackends:
		return fmt.Errorf("backends: %d, at most %d", n, MaxBackends)
	case req.GetBudgetMb() == 0 || req.GetBudgetMb() > MaxBudgetMB:
		return fmt.Errorf("budget_mb: %d is not in 1 … %d", req.GetBudgetMb(), MaxBudgetMB)
	case uint64(req.GetFloorMb())*uint64(n) > uint64(req.GetBudgetMb()):
		return fmt.Errorf("floor_mb: %d partitions × %d MiB exceed budget_mb %d", n, req.GetFloorMb(), req.GetBudgetMb())
	case !(req.GetTarget() > 0 && req.GetTarget() <= 1):
		return fmt.Errorf("target: %v is not in (0, 1]", req.GetTarget())
	case req.GetAppServers() == 0:
		return fmt.Errorf("app_servers: 0, at least 1")
	case req.GetHorizonS() > MaxHorizonS:
		return fmt.Errorf("horizon_s: %d, at most %d", req.GetHorizonS(), MaxHorizonS)
	}
	names := map[string]bool{}
	for i, b := range req.GetBackends() {
		at := fmt.Sprintf("backends[%d]", i)
		if b.GetName() == "" || names[b.GetName()] {
			return fmt.Errorf("%s.name: %q is empty or repeated", at, b.GetName())
		}
		names[b.GetName()] = true
		if v := b.GetCapacitySlope(); !finite(v) || v > 0 {
			return fmt.Errorf("%s.capacity_slope: %v is not a finite number ≤ 0", at, v)
		}
		for _, v := range []struct {
			name string
			v    float64
		}{{"cacheable_rate", b.GetCacheableRate()}, {"uncacheable_rate", b.GetUncacheableRate()},
			{"alloc_mb", b.GetAllocMb()}, {"mean_value_bytes", b.GetMeanValueBytes()},
			{"answered_miss_rate", b.GetAnsweredMissRate()}, {"held_mb", b.GetHeldMb()}, {"queue", b.GetQueue()},
			{"timeout_s", b.GetTimeoutS()}, {"limit_mb", b.GetLimitMb()}, {"overhead_mb", b.GetOverheadMb()}} {
			if !finite(v.v) || v.v < 0 {
				return fmt.Errorf("%s.%s: %v is not a finite number ≥ 0", at, v.name, v.v)
			}
		}
		if c := b.GetCapacity(); math.IsNaN(c) || c <= 0 {
			return fmt.Errorf("%s.capacity: %v is not above 0 (\"Infinity\": no bound)", at, c)
		}
		if c := b.GetSafeCapacity(); math.IsNaN(c) || c < 0 || c > b.GetCapacity() {
			return fmt.Errorf("%s.safe_capacity: %v is not in [0, capacity %v]", at, c, b.GetCapacity())
		}
		h := loghist.Sparse{Index: b.GetDistanceBucket(), Count: b.GetDistanceCount()}
		if err := h.Validate("distance"); err != nil {
			return fmt.Errorf("%s.%v", at, err)
		}
	}
	for i, a := range req.GetEvaluate() {
		if len(a.GetMb()) != n {
			return fmt.Errorf("evaluate[%d].mb: %d entries for %d backends", i, len(a.GetMb()), n)
		}
		for j, v := range a.GetMb() {
			if !finite(v) || v < 0 {
				return fmt.Errorf("evaluate[%d].mb[%d]: %v is not a finite number ≥ 0", i, j, v)
			}
		}
	}
	return nil
}

// Plan evaluates the model on a plan request.
func Plan(req *pb.PlanRequest) (*pb.PlanAnswer, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	budget, floor := int(req.GetBudgetMb()), int(req.GetFloorMb())
	backends := make([]model.Backend, len(req.GetBackends()))
	capacity := map[string]float64{}
	for i, b := range req.GetBackends() {
		h := loghist.Counts{}
		h.Add(loghist.Sparse{Index: b.GetDistanceBucket(), Count: b.GetDistanceCount()})
		curve := model.CurveFromDistances(h, budget)
		if l, k := b.GetLimitMb(), b.GetOverheadMb(); k > 0 && l > k {
			curve = model.WithOverhead(curve, l, k)
		}
		backends[i] = model.Backend{Name: b.GetName(), CacheableRate: b.GetCacheableRate(),
			UncacheableRate: b.GetUncacheableRate(), MissRatio: curve}
		capacity[b.GetName()] = b.GetCapacity()
	}
	minmax, minmaxWorst := model.MinMax(backends, capacity, budget, floor)
	util := func(i int, mb float64) float64 {
		c := capacity[backends[i].Name]
		if math.IsInf(c, 1) {
			return 0
		}
		return backends[i].LoadAt(mb) / c
	}
	ans := &pb.PlanAnswer{Ok: true, MinmaxWorst: minmaxWorst}
	apps := float64(req.GetAppServers())
	for i, b := range req.GetBackends() {
		mb := b.GetAllocMb()
		out := &pb.PlannedBackend{Name: b.GetName(), MissRatio: model.MissAt(backends[i].MissRatio, mb),
			Load: backends[i].LoadAt(mb), Util: util(i, mb),
			NeedMb:   int32(model.NeedAt(backends[i], capacity[b.GetName()], req.GetTarget(), budget, floor)),
			MinmaxMb: uint32(minmax[b.GetName()]), MinmaxUtil: util(i, float64(minmax[b.GetName()]))}
		out.SafeNeedMb = out.NeedMb
		if c := b.GetSafeCapacity(); c > 0 {
			out.SafeNeedMb = int32(model.NeedAt(backends[i], c, req.GetTarget(), budget, floor))
		}
		out.FillS = model.FillSeconds(float64(out.MinmaxMb)-mb, b.GetAnsweredMissRate(), b.GetMeanValueBytes(), apps)
		if b.GetMeanValueBytes() == 0 && out.FillS > 0 {
			out.FillS = math.Inf(1)
		}
		ans.Worst = math.Max(ans.Worst, out.Util)
		ans.Backends = append(ans.Backends, out)
	}
	proj := make([]model.Projected, len(backends))
	for i, b := range req.GetBackends() {
		proj[i] = model.Projected{Backend: backends[i], Capacity: capacity[b.GetName()],
			CapacitySlope: b.GetCapacitySlope(), HeldMB: b.GetHeldMb(), Queue: b.GetQueue(),
			TimeoutS: b.GetTimeoutS(), MeanValueBytes: b.GetMeanValueBytes()}
	}
	for _, a := range req.GetEvaluate() {
		ev := &pb.PlannerEvaluation{}
		for i, mb := range a.GetMb() {
			u := util(i, mb)
			ev.Util = append(ev.Util, u)
			ev.Worst = math.Max(ev.Worst, u)
		}
		if h := int(req.GetHorizonS()); h > 0 {
			o := model.Project(proj, a.GetMb(), apps, h, req.GetTarget())
			ev.Overload, ev.Pressure, ev.Final = o.Overload, o.Pressure, o.Final
		}
		ans.Evaluated = append(ans.Evaluated, ev)
	}
	return ans, nil
}
