package main

import (
	"math"
	"math/rand/v2"
)

// Synthetic requests: each request fans out to a few distinct backends, each
// query takes a log-normal time, the request takes as long as its slowest
// query plus a little application overhead, and the slowest query's backend
// is the blocking backend. Two backends are made worse so that the RBC has
// something to show: backend 1 is twice as slow in the median, backend 3
// has a heavy tail (it is fast usually and very slow sometimes).
const (
	baseMedianUs = 1500.0 // median query latency of an ordinary backend
	baseSigma    = 0.45   // log-normal shape of an ordinary backend
	overheadUs   = 200    // application time around the queries
	maxFanout    = 6      // distinct backends per request, at most
)

// backendModel is one backend's query latency distribution.
type backendModel struct {
	mu, sigma float64 // of the underlying normal, in ln(µs)
}

func models(backends int) []backendModel {
	m := make([]backendModel, backends)
	for b := range m {
		median := baseMedianUs * (1 + 0.1*float64(b%4))
		sigma := baseSigma
		switch b {
		case 1:
			median *= 2
		case 3:
			sigma = 1.0
		}
		m[b] = backendModel{mu: math.Log(median), sigma: sigma}
	}
	return m
}

// synthesize returns n synthetic records over the given number of
// backends: latency_us and blocking_backend as parallel arrays.
func synthesize(r *rand.Rand, n, backends int) (lat, be []uint32) {
	m := models(backends)
	perm := make([]int, backends)
	for i := range perm {
		perm[i] = i
	}
	lat = make([]uint32, n)
	be = make([]uint32, n)
	for i := range lat {
		fanout := 1 + r.IntN(min(backends, maxFanout))
		slowest, slowestBackend := 0.0, 0
		for j := range fanout { // a partial Fisher–Yates shuffle picks distinct backends
			k := j + r.IntN(backends-j)
			perm[j], perm[k] = perm[k], perm[j]
			b := perm[j]
			q := math.Exp(m[b].mu + m[b].sigma*r.NormFloat64())
			if q > slowest {
				slowest, slowestBackend = q, b
			}
		}
		lat[i] = uint32(min(slowest+overheadUs, math.MaxUint32))
		be[i] = uint32(slowestBackend)
	}
	return lat, be
}
