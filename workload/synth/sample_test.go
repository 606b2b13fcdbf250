package synth

import (
	"math"
	"strings"
	"testing"
)

func TestSampleStrataKeepOneKeyPerStratumWithItsMass(t *testing.T) {
	o := DefaultOptions()
	o.Keys = PerBackend[int]{Default: 10007}
	o.Zipf = PerBackend[float64]{Default: 1.0}
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, every := range []int{1, 10, 100} {
		ranks, mass := g.SampleStrata(0, every)
		if want := (10007 + every - 1) / every; len(ranks) != want {
			t.Fatalf("every %d: %d keys, want %d", every, len(ranks), want)
		}
		sum := 0.0
		for i, r := range ranks {
			if int(r)/every != i {
				t.Fatalf("every %d: key %d (rank %d) is not in stratum %d", every, i, r, i)
			}
			sum += mass[i]
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("every %d: the strata's masses sum to %v", every, sum)
		}
		// The head stays: the first stratum carries the most popular ranks'
		// mass, which under Zipf 1 is the largest.
		for i := 1; i < len(mass); i++ {
			if mass[i] > mass[0]+1e-12 {
				t.Fatalf("every %d: stratum %d has more mass (%v) than the first (%v)", every, i, mass[i], mass[0])
			}
		}
	}
	a, _ := g.SampleStrata(0, 10)
	b, _ := g.SampleStrata(0, 10)
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("the same sample twice gave other keys")
		}
	}
}

func TestNextShapeFollowsTheMix(t *testing.T) {
	o := DefaultOptions()
	o.Backends = 5
	o.QueriesPerRequest = 20
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]float64, 5)
	const n = 200000
	var last float64
	var shape []Batch
	for range n {
		var ts float64
		ts, shape = g.NextShape(shape)
		if ts < last {
			t.Fatal("arrival times go back")
		}
		last = ts
		for _, b := range shape {
			counts[b.Backend] += float64(b.N)
		}
	}
	total := 0.0
	for b := range counts {
		want := g.QueriesPerRequest(b)
		got := counts[b] / n
		total += got
		if math.Abs(got-want) > 0.02*want+0.01 {
			t.Errorf("backend %d: %.3f queries per request, the mix says %.3f", b, got, want)
		}
	}
	if math.Abs(total-20) > 0.2 {
		t.Errorf("%.2f queries per request, want 20", total)
	}
	if rate := n / (last / 1000); math.Abs(rate-o.Rate) > 0.02*o.Rate {
		t.Errorf("arrival rate %.1f/s, want %v", rate, o.Rate)
	}
}

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs(strings.Fields("--backends 3 --backend-names x,y,z --rate 50 --keys 100,y=7 --zipf 0.5"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Rate != 50 || o.Keys.For("y") != 7 || o.Keys.For("x") != 100 || o.Zipf.Default != 0.5 || len(o.Names) != 3 {
		t.Fatalf("parsed %+v", o)
	}
	for args, want := range map[string]string{
		"--keys 10,q=x":  `--keys: "q=x": not an integer`,
		"--rate fast":    "invalid value",
		"--out x.jsonl":  "flag provided but not defined: -out",
		"--rate 5 extra": `unexpected argument "extra"`,
	} {
		if _, err := ParseArgs(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
