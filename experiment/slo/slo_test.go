package slo

import (
	"github.com/robinhoodcache/robinhood/lib/percentile"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
	"time"
)

func TestRank(t *testing.T) {
	cases := []struct {
		n    int
		p    float64
		want int
	}{
		{100, 0.99, 99}, {100, 0.985, 99}, {100, 0.995, 100}, {200, 0.985, 197},
		{1000, 0.999, 999}, {1, 0.5, 1}, {4, 0.5, 2}, {5, 0.5, 3}, {10, 0.9, 9},
		{3, 0.01, 1}, {7, 1, 7}, {0, 0.99, 0}, {1000, 0.985, 985}, {1000, 0.995, 995},
	}
	for _, c := range cases {
		if got := percentile.Rank(c.n, c.p); got != c.want {
			t.Errorf("percentile.Rank(%d, %v) = %d, want %d", c.n, c.p, got, c.want)
		}
	}
}

// Select and Percentiles agree with a full sort on arbitrary data, with
// many duplicates and without.
// Rank agrees with exact integer arithmetic for every percentile with up to
// three decimals.
func TestRankExact(t *testing.T) {
	for n := 1; n <= 1200; n += 7 {
		for milli := 1; milli <= 1000; milli++ {
			want := (milli*n + 999) / 1000 // ⌈milli·n/1000⌉
			if got := percentile.Rank(n, float64(milli)/1000); got != want {
				t.Fatalf("percentile.Rank(%d, %v) = %d, want %d", n, float64(milli)/1000, got, want)
			}
		}
	}
}

func TestSelectMatchesSort(t *testing.T) {
	f := func(xs []uint16, kRaw uint16, dupMod uint8) bool {
		if len(xs) == 0 {
			return true
		}
		if dupMod > 0 {
			for i := range xs {
				xs[i] %= uint16(dupMod%7) + 1
			}
		}
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		k := int(kRaw) % len(xs)
		work := slices.Clone(xs)
		if Select(work, k) != sorted[k] {
			return false
		}
		for i := 0; i < k; i++ {
			if work[i] > sorted[k] {
				return false
			}
		}
		for i := k + 1; i < len(work); i++ {
			if work[i] < sorted[k] {
				return false
			}
		}
		ps := []float64{0.5, 0.999, 0.9, 0.99, 0.5}
		got := Percentiles(slices.Clone(xs), ps...)
		for i, p := range ps {
			if got[i] != sorted[percentile.Rank(len(xs), p)-1] {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
	// Larger inputs than quick generates.
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		xs := make([]uint32, 1+rng.IntN(50000))
		for i := range xs {
			xs[i] = rng.Uint32N(uint32(1 + rng.IntN(100000)))
		}
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		got := Percentiles(xs, 0.5, 0.9, 0.99, 0.999)
		for i, p := range []float64{0.5, 0.9, 0.99, 0.999} {
			if want := sorted[percentile.Rank(len(sorted), p)-1]; got[i] != want {
				t.Fatalf("trial %d n=%d: P%v = %d, want %d", trial, len(sorted), p*100, got[i], want)
			}
		}
	}
}

func TestPercentilesEmpty(t *testing.T) {
	if Percentiles[uint32](nil, 0.99) != nil {
		t.Fatal("percentiles of nothing should be nil")
	}
}

// The worked example of docs/algorithms.md ("Percentiles and the SLO
// series"), computed by hand.
func TestSeriesHandExample(t *testing.T) {
	r, err := NewRecorder(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	add := func(sendMs int, latMs uint32) { r.Add(time.Duration(sendMs)*time.Millisecond, latMs*1000) }
	// [0 s, 1 s): 10, 20, 30, 200 ms
	add(0, 10)
	add(250, 200)
	add(500, 30)
	add(999, 20)
	// [1 s, 2 s): 50, 60 ms
	add(1000, 60)
	add(1500, 50)
	// [2 s, 3 s): nothing
	// [3 s, 4 s): 150, 5, 7 ms
	add(3000, 150)
	add(3100, 5)
	add(3999, 7)

	p := Params{SLO: 100 * time.Millisecond, Step: time.Second, Window: 2 * time.Second, Warmup: time.Second}
	pts, err := Series(r, p, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{
		{T: 1 * time.Second, N: 4, P50: 20, P90: 200, P99: 200},
		{T: 2 * time.Second, N: 6, P50: 30, P90: 200, P99: 200},
		{T: 3 * time.Second, N: 2, P50: 50, P90: 60, P99: 60},
		{T: 4 * time.Second, N: 3, P50: 7, P90: 150, P99: 150},
	}
	if !slices.Equal(pts, want) {
		t.Fatalf("series:\n got %+v\nwant %+v", pts, want)
	}
	// After the 1 s warm-up three points count; P99 and P90 exceed 100 ms
	// at 2 s and 4 s, P50 never.
	v := Violation(pts, p)
	if v.Points != 3 || !near(v.P99Pct, 200.0/3) || !near(v.P90Pct, 200.0/3) || v.P50Pct != 0 {
		t.Fatalf("violations = %+v, want 3 points, 66.67%%, 66.67%%, 0%%", v)
	}

	// With a one-step window the empty [2 s, 3 s) gives a point without
	// requests, which does not count.
	p1 := Params{SLO: 100 * time.Millisecond, Step: time.Second, Window: time.Second}
	pts, err = Series(r, p1, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if pts[2].N != 0 || pts[1].P99 != 60 || pts[3].P99 != 150 || pts[0].P99 != 200 {
		t.Fatalf("one-step series: %+v", pts)
	}
	v = Violation(pts, p1)
	if v.Points != 3 || !near(v.P99Pct, 200.0/3) {
		t.Fatalf("one-step violations = %+v, want 3 points and 66.67%%", v)
	}
	// A P99 equal to the SLO meets it.
	v = Violation(pts, Params{SLO: 200 * time.Millisecond, Step: time.Second, Window: time.Second})
	if v.P99Pct != 0 {
		t.Fatalf("P99 equal to the SLO counted as a violation: %+v", v)
	}

	// The online window over [2 s, 4 s) holds the last three requests.
	n, vals, _ := r.Window(4*time.Second, 2*time.Second, nil, 0.99)
	if n != 3 || vals[0] != 150000 {
		t.Fatalf("Window = %d, %v", n, vals)
	}
	if all := r.All(2 * time.Second); len(all) != 3 {
		t.Fatalf("All(2s) = %v, want the three requests of [3 s, 4 s)", all)
	}
}

func TestParamsValidate(t *testing.T) {
	bad := []Params{
		{SLO: 0, Step: time.Second, Window: time.Second},
		{SLO: time.Second, Step: 0, Window: time.Second},
		{SLO: time.Second, Step: 2 * time.Second, Window: time.Second},
		{SLO: time.Second, Step: 2 * time.Second, Window: 3 * time.Second},
		{SLO: time.Second, Step: time.Second, Window: time.Second, Warmup: -1},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Params{SLO: 150 * time.Millisecond, Step: 5 * time.Second, Window: time.Minute}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func BenchmarkWindowP99(b *testing.B) {
	// One 60 s window at 5,000 requests/s.
	r, _ := NewRecorder(5 * time.Second)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 300000; i++ {
		r.Add(time.Duration(i)*200*time.Microsecond, uint32(rng.ExpFloat64()*20000))
	}
	var buf []uint32
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, _, buf = r.Window(60*time.Second, 60*time.Second, buf, 0.99)
	}
}
