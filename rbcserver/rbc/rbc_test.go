package rbc

import (
	"fmt"
	"github.com/robinhoodcache/robinhood/lib/percentile"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/config"
)

func TestRankByHand(t *testing.T) {
	cases := []struct {
		pct  float64
		n    int
		want int
	}{
		{98.5, 0, 0},
		{98.5, 1, 1},
		{99.5, 1, 1},
		{98.5, 2, 2},      // ceil(1.97)
		{50, 2, 1},        // ceil(1.0)
		{50, 3, 2},        // ceil(1.5)
		{98.5, 1000, 985}, // 985.0000000000001 in float64: must not become 986
		{99.5, 1000, 995},
		{98.5, 200, 197},
		{99.5, 200, 199},
		{99.9, 1000, 999},    // 99.9 is not exact in binary
		{99.99, 10000, 9999}, // neither is 99.99
		{98.5, 1000000, 985000},
		{99.5, 1000000, 995000},
		{98.5, 1001, 986}, // ceil(985.985)
		{99.5, 1001, 996}, // ceil(995.995)
		{100, 7, 7},
		{1e-9, 7, 1}, // clamped to the first rank
		{0.1, 1000, 1},
		{0.1, 1001, 2}, // ceil(1.001)
		{33.3, 10, 4},  // ceil(3.33)
		{70, 10, 7},    // 0.7·10 is 7.000000000000001 in float64
	}
	for _, c := range cases {
		if got := percentile.Rank(c.n, (c.pct)/100); got != c.want {
			t.Errorf("percentile.Rank(%d, %v/100) = %d, want %d", c.n, c.pct, got, c.want)
		}
	}
}

func TestRankIsExactForDecimalPercentiles(t *testing.T) {
	// For every percentile with up to two decimals and every n, the rank is
	// ceil(p·n/10000) computed in integers (p in hundredths of a percent).
	for n := 1; n <= 2000; n += 7 {
		for hp := 1; hp <= 10000; hp += 13 {
			want := (hp*n + 9999) / 10000
			if got := percentile.Rank(n, (float64(hp)/100)/100); got != want {
				t.Fatalf("percentile.Rank(%d, %v/100) = %d, want %d", n, float64(hp)/100, got, want)
			}
		}
	}
}

func TestComputeByHand(t *testing.T) {
	var c Calculator
	// Ten records; P50 is rank 5, P98.5 and P99.5 are both rank 10.
	lat := []uint32{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	be := []uint32{0, 1, 2, 0, 1, 2, 0, 1, 2, 3}
	res, err := c.Compute(lat, be, DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	want := Result{N: 10, Low: 100, High: 100, P50: 50, P99: 100, Band: 1, Backends: []Count{
		{Backend: 0, Blocking: 0, Window: 3},
		{Backend: 1, Blocking: 0, Window: 3},
		{Backend: 2, Blocking: 0, Window: 3},
		{Backend: 3, Blocking: 1, Window: 1},
	}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got %+v\nwant %+v", res, want)
	}

	// A wider band, P70 (rank 7) to P90 (rank 9), with ties: every record
	// with latency in [70, 90] counts, including the tie below rank 7.
	lat = []uint32{5, 70, 5, 70, 90, 90, 70, 5, 100, 70}
	be = []uint32{9, 1, 9, 2, 3, 3, 1, 9, 4, 1}
	res, err = c.Compute(lat, be, Params{LowPct: 70, HighPct: 90})
	if err != nil {
		t.Fatal(err)
	}
	// sorted: 5 5 5 70 70 70 70 90 90 100 → rank 7 = 70, rank 9 = 90.
	want = Result{N: 10, Low: 70, High: 90, P50: 70, P99: 100, Band: 6, Backends: []Count{
		{Backend: 1, Blocking: 3, Window: 3},
		{Backend: 2, Blocking: 1, Window: 1},
		{Backend: 3, Blocking: 2, Window: 2},
		{Backend: 4, Blocking: 0, Window: 1},
		{Backend: 9, Blocking: 0, Window: 3},
	}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got %+v\nwant %+v", res, want)
	}
}

func TestComputeTinyWindows(t *testing.T) {
	var c Calculator
	res, err := c.Compute(nil, nil, DefaultParams())
	if err != nil || !reflect.DeepEqual(res, Result{}) {
		t.Fatalf("empty window: %+v, %v; want zero result", res, err)
	}
	res, err = c.Compute([]uint32{42}, []uint32{7}, DefaultParams())
	want := Result{N: 1, Low: 42, High: 42, P50: 42, P99: 42, Band: 1, Backends: []Count{{7, 1, 1}}}
	if err != nil || !reflect.DeepEqual(res, want) {
		t.Fatalf("one record: %+v, %v; want %+v", res, err, want)
	}
	// Two records: ranks 2 and 2 → the slower one alone.
	res, err = c.Compute([]uint32{300, 100}, []uint32{1, 0}, DefaultParams())
	want = Result{N: 2, Low: 300, High: 300, P50: 100, P99: 300, Band: 1, Backends: []Count{{0, 0, 1}, {1, 1, 1}}}
	if err != nil || !reflect.DeepEqual(res, want) {
		t.Fatalf("two records: %+v, %v; want %+v", res, err, want)
	}
}

func TestComputeRejectsBadInput(t *testing.T) {
	var c Calculator
	cases := []struct {
		lat, be []uint32
		p       Params
		want    string
	}{
		{[]uint32{1, 2}, []uint32{0}, DefaultParams(), "latency array has 2 entries but backend array has 1"},
		{[]uint32{1}, []uint32{0}, Params{0, 99}, "low_pct = 0 is outside (0, 100]"},
		{[]uint32{1}, []uint32{0}, Params{-1, 99}, "low_pct = -1 is outside (0, 100]"},
		{[]uint32{1}, []uint32{0}, Params{98, 100.5}, "high_pct = 100.5 is outside (0, 100]"},
		{[]uint32{1}, []uint32{0}, Params{math.NaN(), 99}, "low_pct = NaN is outside (0, 100]"},
		{[]uint32{1}, []uint32{0}, Params{99.6, 99.5}, "low_pct = 99.6 is above high_pct = 99.5"},
		{[]uint32{1}, []uint32{MaxBackends}, DefaultParams(), "backend id 65536 is not below 65536"},
	}
	for _, tc := range cases {
		_, err := c.Compute(tc.lat, tc.be, tc.p)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Compute(%v, %v, %+v) error = %v, want %q", tc.lat, tc.be, tc.p, err, tc.want)
		}
	}
}

// window describes one random test window.
type window struct {
	name    string
	lat, be []uint32
	p       Params
}

// randomWindow draws a window of a random shape: sizes from 0 to a few
// thousand, latency distributions with and without heavy ties, one to 1024
// backends, and random valid percentile bands.
func randomWindow(r *rand.Rand) window {
	var n int
	switch r.IntN(4) {
	case 0:
		n = r.IntN(4) // 0…3
	case 1:
		n = r.IntN(40)
	case 2:
		n = r.IntN(1000)
	default:
		n = 1000 + r.IntN(5000)
	}
	backends := []int{1, 2, 3, 8, 64, 1024}[r.IntN(6)]
	dist := r.IntN(5)
	lat := make([]uint32, n)
	be := make([]uint32, n)
	for i := range lat {
		switch dist {
		case 0: // wide uniform, few ties
			lat[i] = r.Uint32()
		case 1: // many equal latencies
			lat[i] = uint32(r.IntN(5)) * 1000
		case 2: // all equal
			lat[i] = 777
		case 3: // log-normal around 2 ms
			lat[i] = uint32(math.Exp(7.6 + 0.8*r.NormFloat64()))
		default: // sorted runs: the pivot's worst friend
			lat[i] = uint32(i / 3)
		}
		be[i] = uint32(r.IntN(backends))
	}
	if dist == 4 && r.IntN(2) == 0 {
		slices.Reverse(lat)
	}
	var p Params
	switch r.IntN(3) {
	case 0:
		p = DefaultParams()
	case 1:
		p = Params{LowPct: 50, HighPct: 100}
	default:
		a, b := 100*r.Float64(), 100*r.Float64()
		p = Params{LowPct: max(min(a, b), 1e-6), HighPct: max(a, b, 1e-6)}
	}
	return window{
		name: fmt.Sprintf("n=%d backends=%d dist=%d p=%+v", n, backends, dist, p),
		lat:  lat, be: be, p: p,
	}
}

func TestComputeMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var c Calculator // reused across windows, as the server does
	for range 2000 {
		w := randomWindow(r)
		latCopy, beCopy := slices.Clone(w.lat), slices.Clone(w.be)
		got, err := c.Compute(w.lat, w.be, w.p)
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		want := BruteForce(w.lat, w.be, w.p)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", w.name, summary(got), summary(want))
		}
		if !slices.Equal(w.lat, latCopy) || !slices.Equal(w.be, beCopy) {
			t.Fatalf("%s: Compute modified its input", w.name)
		}
	}
}

func TestComputeMillionRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("large window")
	}
	r := rand.New(rand.NewPCG(3, 4))
	lat, be := syntheticWindow(r, 1_000_000, 1024)
	var c Calculator
	got, err := c.Compute(lat, be, DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	if want := BruteForce(lat, be, DefaultParams()); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", summary(got), summary(want))
	}
}

func summary(r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "N=%d Low=%d High=%d P50=%d P99=%d Band=%d backends:", r.N, r.Low, r.High, r.P50, r.P99, r.Band)
	for i, c := range r.Backends {
		if i == 8 {
			fmt.Fprintf(&b, " … (%d)", len(r.Backends))
			break
		}
		fmt.Fprintf(&b, " %d:%d/%d", c.Backend, c.Blocking, c.Window)
	}
	return b.String()
}

// syntheticWindow is a log-normal window in which backend 1 is twice as slow.
func syntheticWindow(r *rand.Rand, n, backends int) (lat, be []uint32) {
	lat = make([]uint32, n)
	be = make([]uint32, n)
	for i := range lat {
		b := r.IntN(backends)
		mu := 7.6
		if b == 1 {
			mu += math.Ln2
		}
		lat[i] = uint32(math.Exp(mu + 0.6*r.NormFloat64()))
		be[i] = uint32(b)
	}
	return lat, be
}

func TestSelectKth(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := map[string]func(i, n int) uint32{
		"random":   func(i, n int) uint32 { return r.Uint32() },
		"ties":     func(i, n int) uint32 { return uint32(r.IntN(3)) },
		"equal":    func(i, n int) uint32 { return 9 },
		"sorted":   func(i, n int) uint32 { return uint32(i) },
		"reversed": func(i, n int) uint32 { return uint32(n - i) },
		"organ":    func(i, n int) uint32 { return uint32(min(i, n-i)) },
		"sawtooth": func(i, n int) uint32 { return uint32(i % 17) },
	}
	for name, gen := range shapes {
		for _, n := range []int{1, 2, 3, 15, 16, 17, 100, 1000, 10007} {
			a := make([]uint32, n)
			for i := range a {
				a[i] = gen(i, n)
			}
			sorted := slices.Sorted(slices.Values(a))
			for _, k := range []int{0, n / 2, n - 1, r.IntN(n)} {
				b := slices.Clone(a)
				if got := selectKth(b, k); got != sorted[k] {
					t.Fatalf("%s n=%d: selectKth(k=%d) = %d, want %d", name, n, k, got, sorted[k])
				}
				for i := range b {
					if (i < k && b[i] > b[k]) || (i > k && b[i] < b[k]) {
						t.Fatalf("%s n=%d k=%d: not partitioned around k at %d", name, n, k, i)
					}
				}
				if !slices.Equal(slices.Sorted(slices.Values(b)), sorted) {
					t.Fatalf("%s n=%d k=%d: selectKth lost or invented elements", name, n, k)
				}
			}
		}
	}
}

func TestSelectKthSortingFallback(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, rounds := range []int{0, 1, 2} {
		for range 50 {
			a := make([]uint32, 20+r.IntN(2000))
			for i := range a {
				a[i] = uint32(r.IntN(50))
			}
			sorted := slices.Sorted(slices.Values(a))
			k := r.IntN(len(a))
			b := slices.Clone(a)
			if got := selectKthRounds(b, k, rounds); got != sorted[k] {
				t.Fatalf("rounds=%d n=%d k=%d: got %d, want %d", rounds, len(a), k, got, sorted[k])
			}
			for i := range b {
				if (i < k && b[i] > b[k]) || (i > k && b[i] < b[k]) {
					t.Fatalf("rounds=%d n=%d k=%d: not partitioned around k at %d", rounds, len(a), k, i)
				}
			}
		}
	}
}

func TestSelectRanksAnyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		n := 1 + r.IntN(3000)
		a := make([]uint32, n)
		for i := range a {
			a[i] = uint32(r.IntN(100))
		}
		sorted := slices.Sorted(slices.Values(a))
		ranks := make([]int, 1+r.IntN(6))
		for i := range ranks {
			ranks[i] = 1 + r.IntN(n)
		}
		out := make([]uint32, len(ranks))
		selectRanks(slices.Clone(a), ranks, out)
		for i, k := range ranks {
			if out[i] != sorted[k-1] {
				t.Fatalf("n=%d ranks=%v: out[%d] = %d, want %d", n, ranks, i, out[i], sorted[k-1])
			}
		}
	}
}

func BenchmarkCompute1M(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	lat, be := syntheticWindow(r, 1_000_000, 16)
	var c Calculator
	b.ReportAllocs()
	b.SetBytes(int64(len(lat)) * 8)
	for b.Loop() {
		if _, err := c.Compute(lat, be, DefaultParams()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBruteForce1M(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	lat, be := syntheticWindow(r, 1_000_000, 16)
	for b.Loop() {
		BruteForce(lat, be, DefaultParams())
	}
}

// DefaultParams is the topology schema's band (rbc_server.low_pct,
// high_pct: the paper's P98.5 to P99.5), the RBC server's default.
func DefaultParams() Params {
	d, err := config.ReadRBCSettings(map[string]any{}, "")
	if err != nil {
		panic(err)
	}
	return Params{LowPct: d.LowPct, HighPct: d.HighPct}
}
