// Package compute is the data path of a "compute" backend (a recommender,
// say): every query does real CPU work, the product of two n×n matrices
// whose entries are derived from the key, and returns value.Bytes(name, key,
// size).
package compute

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// DefaultMatrixSize gives a query about 0.3–0.6 ms of CPU on the project's
// machine (n³ = 884,736 multiply-adds).
const DefaultMatrixSize = 96

// MaxMatrixSize bounds n (n = 1024 is about a second per query).
const MaxMatrixSize = 1024

// Store multiplies matrices. It is safe for concurrent use.
type Store struct {
	name string
	n    int
	bufs sync.Pool // of *[]float64 holding 3·n² entries
}

// New returns a store for backend name multiplying n×n matrices.
func New(name string, n int) (*Store, error) {
	if n < 1 || n > MaxMatrixSize {
		return nil, fmt.Errorf("compute: matrix size must be in [1, %d], got %d", MaxMatrixSize, n)
	}
	s := &Store{name: name, n: n}
	s.bufs.New = func() any { b := make([]float64, 3*n*n); return &b }
	return s, nil
}

// Get multiplies the key's matrices and returns value.Bytes(name, key,
// size). It stops early, with ctx's error, when ctx ends.
func (s *Store) Get(ctx context.Context, key string, size int) ([]byte, error) {
	bp := s.bufs.Get().(*[]float64)
	defer s.bufs.Put(bp)
	nn := s.n * s.n
	buf := *bp
	a, b, c := buf[:nn], buf[nn:2*nn], buf[2*nn:]
	Fill(a, b, key)
	sum, err := Multiply(ctx, c, a, b, s.n)
	if err != nil {
		return nil, err
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return nil, fmt.Errorf("compute: product of %q is not finite", key)
	}
	return value.Bytes(s.name, key, size), nil
}

// Close does nothing; it completes the data-path interface.
func (s *Store) Close() error { return nil }

// Fill seeds a and b from key: entries uniform in [-1, 1) from a SplitMix64
// stream seeded with FNV-1a 64 of the key.
func Fill(a, b []float64, key string) {
	state := hashing.FNV1a(key)
	next := func() float64 { return float64(hashing.SplitMix64(&state)>>11)/(1<<52) - 1 }
	for i := range a {
		a[i] = next()
	}
	for i := range b {
		b[i] = next()
	}
}

// Multiply sets c = a·b for row-major n×n matrices and returns the trace of
// c. It checks ctx between rows.
func Multiply(ctx context.Context, c, a, b []float64, n int) (float64, error) {
	trace := 0.0
	for i := 0; i < n; i++ {
		if i%16 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		ci := c[i*n : (i+1)*n]
		for j := range ci {
			ci[j] = 0
		}
		// i-k-j order walks b and c row by row.
		for k := 0; k < n; k++ {
			aik := a[i*n+k]
			bk := b[k*n : (k+1)*n]
			for j, bkj := range bk {
				ci[j] += aik * bkj
			}
		}
		trace += ci[i]
	}
	return trace, nil
}
