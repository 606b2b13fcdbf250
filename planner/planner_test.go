package planner

import (
	"math"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/loghist"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// hist puts hits at mb MiB (a bucket holding it) and the rest never.
func hist(hits, never uint64, mb float64) ([]uint32, []uint64) {
	return []uint32{uint32(loghist.Index(mb * 1024)), loghist.Buckets - 1}, []uint64{hits, never}
}

func twoBackends() *pb.PlanRequest {
	ab, ac := hist(80, 20, 100)
	bb, bc := hist(50, 50, 20)
	return &pb.PlanRequest{Op: "plan", BudgetMb: 160, FloorMb: 16, Target: 0.8, AppServers: 2,
		Backends: []*pb.PlannerBackend{
			{Name: "a", CacheableRate: 500, UncacheableRate: 10, Capacity: 300, DistanceBucket: ab, DistanceCount: ac,
				AllocMb: 80, MeanValueBytes: 16384, AnsweredMissRate: 200},
			{Name: "b", CacheableRate: 500, Capacity: 1000, DistanceBucket: bb, DistanceCount: bc, AllocMb: 80},
		},
		Evaluate: []*pb.PlannerAllocation{{Mb: []float64{144, 16}}}}
}

// The answer is the load model's: the load at the current allocation, the
// need at the target, the min-max allocation, an evaluated allocation.
func TestPlanIsTheLoadModel(t *testing.T) {
	ans, err := Plan(twoBackends())
	if err != nil {
		t.Fatal(err)
	}
	a, b := ans.Backends[0], ans.Backends[1]
	// a hits 80% of its queries at about 100 MiB: at 80 MiB it misses all.
	if math.Abs(a.Load-510) > 1e-6 || math.Abs(a.Util-1.7) > 1e-6 {
		t.Fatalf("a: load %v util %v, want 510 and 1.7", a.Load, a.Util)
	}
	if b.MissRatio > 0.5+1e-9 || b.Util > 0.25+1e-9 {
		t.Fatalf("b: miss ratio %v util %v at 80 MiB, want 0.5 and 0.25 (its hits are within 20 MiB)", b.MissRatio, b.Util)
	}
	// a needs load ≤ 240: miss ratio ≤ 0.46, so the 100 MiB bucket's span.
	if a.NeedMb < 100 || a.NeedMb > 110 || b.NeedMb < 16 || b.NeedMb > 21 {
		t.Fatalf("needs %d, %d", a.NeedMb, b.NeedMb)
	}
	if a.MinmaxMb+b.MinmaxMb != 160 || a.MinmaxMb < uint32(a.NeedMb) || ans.MinmaxWorst >= ans.Worst ||
		math.Max(a.MinmaxUtil, b.MinmaxUtil) != ans.MinmaxWorst {
		t.Fatalf("min-max %d + %d (worst %v, now %v)", a.MinmaxMb, b.MinmaxMb, ans.MinmaxWorst, ans.Worst)
	}
	// a fills its growth at 200 misses/s × 16 KiB over two app servers.
	want := (float64(a.MinmaxMb) - 80) / (200 * 16384.0 / (1 << 20) / 2)
	if math.Abs(a.FillS-want) > 1e-9 || b.FillS != 0 {
		t.Fatalf("fill %v s (want %v), b %v", a.FillS, want, b.FillS)
	}
	if ev := ans.Evaluated[0]; len(ev.Util) != 2 || ev.Worst != math.Max(ev.Util[0], ev.Util[1]) || ev.Util[0] >= a.Util {
		t.Fatalf("evaluated %v", ev)
	}
}

func TestUnboundedAndUnknown(t *testing.T) {
	req := twoBackends()
	req.Backends[1].Capacity = math.Inf(1)
	req.Backends[1].DistanceBucket, req.Backends[1].DistanceCount = nil, nil
	req.Backends[0].MeanValueBytes = 0
	ans, err := Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := ans.Backends[1]; b.Util != 0 || b.MissRatio != 1 || b.NeedMb != 16 || b.MinmaxMb != 16 {
		t.Fatalf("an unbounded backend without a curve: %v", b)
	}
	if !math.IsInf(ans.Backends[0].FillS, 1) {
		t.Fatalf("no value size: fill %v, want +Inf", ans.Backends[0].FillS)
	}
}

func TestPlanRefusesBadRequests(t *testing.T) {
	for _, c := range []struct {
		edit func(*pb.PlanRequest)
		want string
	}{
		{func(r *pb.PlanRequest) { r.Backends = nil }, "backends: none"},
		{func(r *pb.PlanRequest) { r.FloorMb = 100 }, "floor_mb: 2 partitions × 100 MiB exceed budget_mb 160"},
		{func(r *pb.PlanRequest) { r.Target = 0 }, "target: 0 is not in (0, 1]"},
		{func(r *pb.PlanRequest) { r.AppServers = 0 }, "app_servers: 0"},
		{func(r *pb.PlanRequest) { r.Backends[1].Name = "a" }, `backends[1].name: "a" is empty or repeated`},
		{func(r *pb.PlanRequest) { r.Backends[0].CacheableRate = math.NaN() }, "backends[0].cacheable_rate: NaN"},
		{func(r *pb.PlanRequest) { r.Backends[0].AllocMb = -1 }, "backends[0].alloc_mb: -1"},
		{func(r *pb.PlanRequest) { r.Backends[0].Capacity = 0 }, "backends[0].capacity: 0 is not above 0"},
		{func(r *pb.PlanRequest) { r.Backends[0].DistanceCount = nil }, "backends[0].distance_bucket has 2 entries but distance_count has 0"},
		{func(r *pb.PlanRequest) { r.Backends[0].DistanceBucket[0] = 470 }, "backends[0].distance_bucket[0] = 470 is not below 470"},
		{func(r *pb.PlanRequest) { r.Evaluate[0].Mb = []float64{1} }, "evaluate[0].mb: 1 entries for 2 backends"},
		{func(r *pb.PlanRequest) { r.Evaluate[0].Mb[1] = math.Inf(1) }, "evaluate[0].mb[1]: +Inf"},
	} {
		req := twoBackends()
		c.edit(req)
		if _, err := Plan(req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v", c.want, err)
		}
	}
}

func TestCapacities(t *testing.T) {
	ans, err := Capacities(&pb.PlannerCapacityRequest{Limits: []*pb.PlannerLimits{
		{Workers: 8, ExtraLatencyMs: 4}, {Workers: 8, Rate: 150}, {Workers: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if c := ans.Capacity; c[0] != 2000 || c[1] != 150 || !math.IsInf(c[2], 1) {
		t.Fatalf("%v", c)
	}
	if _, err := Capacities(&pb.PlannerCapacityRequest{Limits: []*pb.PlannerLimits{{Rate: -1}}}); err == nil ||
		!strings.Contains(err.Error(), "limits[0].rate: -1") {
		t.Fatalf("%v", err)
	}
}

// The projection: keeping a saturated backend's allocation leaves a
// backlog; the min-max grant less of it. Overhead reads a limit's curve at
// what it is worth.
func TestPlanProjectsAndReadsWithOverhead(t *testing.T) {
	req := twoBackends()
	req.HorizonS = 30
	req.Backends[0].HeldMb, req.Backends[1].HeldMb = 80, 80
	req.Backends[0].TimeoutS, req.Backends[1].TimeoutS = 4, 4
	req.Evaluate = []*pb.PlannerAllocation{{Mb: []float64{80, 80}}, {Mb: []float64{136, 24}}}
	ans, err := Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	keep, grant := ans.Evaluated[0], ans.Evaluated[1]
	if keep.Overload <= 0 || grant.Overload >= keep.Overload || keep.Final != ans.Worst {
		t.Fatalf("keep %v, grant %v (worst now %v)", keep, grant, ans.Worst)
	}
	// b's hits lie at about 20 MiB of its 80 MiB limit; with 10 MiB of
	// overhead a 24 MiB limit is worth 16 MiB measured: it misses them.
	plain := ans.Backends[1].MinmaxUtil
	req.Backends[1].LimitMb, req.Backends[1].OverheadMb = 80, 10
	ans2, err := Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	if m := ans2.Backends[1].MissRatio; math.Abs(m-0.5) > 1e-9 {
		t.Fatalf("at its measured limit the curve is as measured: %v", m)
	}
	if u := ans2.Evaluated[1].Util[1]; u <= ans.Evaluated[1].Util[1] {
		t.Fatalf("b at 24 MiB with overhead: %v, without %v (min-max %v)", u, ans.Evaluated[1].Util[1], plain)
	}
}
