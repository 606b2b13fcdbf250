package compute

import (
	"bytes"
	"context"
	"errors"
	"math"
	"testing"

	"github.com/robinhoodcache/robinhood/backends/value"
)

func TestReturnsDerivedValues(t *testing.T) {
	s, err := New("recommender", 16)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		size int
	}{{"k1", 12}, {"user:9", 23 << 10}, {"", 0}} {
		got, err := s.Get(context.Background(), c.key, c.size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, value.Bytes("recommender", c.key, c.size)) {
			t.Fatalf("Get(%q, %d) is not value.Bytes", c.key, c.size)
		}
	}
}

func TestMultiplyMatchesNaiveProduct(t *testing.T) {
	for _, n := range []int{1, 3, 17} {
		a, b, c := make([]float64, n*n), make([]float64, n*n), make([]float64, n*n)
		Fill(a, b, "seed")
		for i := range c {
			c[i] = 99 // stale contents must be overwritten
		}
		tr, err := Multiply(context.Background(), c, a, b, n)
		if err != nil {
			t.Fatal(err)
		}
		wantTrace := 0.0
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				s := 0.0
				for k := 0; k < n; k++ {
					s += a[i*n+k] * b[k*n+j]
				}
				if math.Abs(s-c[i*n+j]) > 1e-9 {
					t.Fatalf("n=%d c[%d][%d] = %v, want %v", n, i, j, c[i*n+j], s)
				}
				if i == j {
					wantTrace += s
				}
			}
		}
		if math.Abs(tr-wantTrace) > 1e-9 {
			t.Fatalf("n=%d trace %v, want %v", n, tr, wantTrace)
		}
	}
}

func TestFillDependsOnKeyAndIsBounded(t *testing.T) {
	a1, b1 := make([]float64, 64), make([]float64, 64)
	a2, b2 := make([]float64, 64), make([]float64, 64)
	Fill(a1, b1, "x")
	Fill(a2, b2, "x")
	for i := range a1 {
		if a1[i] != a2[i] || b1[i] != b2[i] {
			t.Fatal("Fill is not deterministic")
		}
		if a1[i] < -1 || a1[i] >= 1 {
			t.Fatalf("entry %v outside [-1, 1)", a1[i])
		}
	}
	Fill(a2, b2, "y")
	if a1[0] == a2[0] && a1[1] == a2[1] {
		t.Fatal("different keys give the same matrices")
	}
}

func TestCancelledContextStopsWork(t *testing.T) {
	s, _ := New("r", 64)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Get(ctx, "k", 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled context = %v", err)
	}
}

func TestRejectsBadSize(t *testing.T) {
	for _, n := range []int{0, -1, MaxMatrixSize + 1} {
		if _, err := New("r", n); err == nil {
			t.Errorf("matrix size %d accepted", n)
		}
	}
}

func BenchmarkGetDefault(b *testing.B) {
	s, _ := New("recommender", DefaultMatrixSize)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if _, err := s.Get(ctx, "key", 1024); err != nil {
			b.Fatal(err)
		}
	}
}
