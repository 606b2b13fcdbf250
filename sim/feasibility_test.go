package sim

// The oracle's models (experiment/feasibility) against the simulator's:
// its queue model against the capacity model on the simulator's clock, its
// memcached charge against the simulator's cache. They live here, as the
// simulator is the higher layer (tests/test_layers.py).

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/experiment/feasibility"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/model"
	"github.com/robinhoodcache/robinhood/lib/slabcache"
	"github.com/robinhoodcache/robinhood/lib/trace"
)

// simulateBatches drives one backend's capacity model on the simulator's
// clock with Poisson arrivals of batches (batch[k]: the probability of k
// queries) at rate per second; each query holds its worker for the model's
// delay plus dataMs. It returns, per batch size, the times (ms) from a
// batch's arrival to its last query's end.
func simulateBatches(t *testing.T, l config.Limits, dataMs float64, batch []float64, rate float64, n int, seed uint64) map[int][]float64 {
	t.Helper()
	eng := &Engine{}
	clk := &Clock{Engine: eng, Epoch: time.Unix(1_000_000_000, 0)}
	m, err := capacity.New(l, seed, clk)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	cum := make([]float64, len(batch))
	s := 0.0
	for k := range batch {
		s += batch[k]
		cum[k] = s
	}
	type pendingOp struct {
		tk   *capacity.Ticket
		done func(time.Duration)
	}
	var pending []pendingOp
	out := map[int][]float64{}
	var drain func()
	drain = func() {
		for len(pending) > 0 {
			o := pending[0]
			if settled, _ := o.tk.Settled(); !settled {
				return
			}
			pending = pending[1:]
			d := o.tk.Delay() + time.Duration(dataMs*float64(time.Millisecond))
			eng.After(d, func() {
				if ext := o.tk.TakeStall(); ext > 0 {
					eng.After(ext, func() { o.tk.Release(); o.done(eng.Now()); drain() })
					return
				}
				o.tk.Release()
				o.done(eng.Now())
				drain()
			})
		}
	}
	clk.After = drain
	at := time.Duration(0)
	for range n {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		k := 1
		u := rng.Float64() * s
		for k < len(cum)-1 && cum[k] < u {
			k++
		}
		arrive := at
		eng.At(arrive, func() {
			ts, err := m.Join(k)
			if err != nil {
				t.Fatal(err)
			}
			left, last := k, time.Duration(0)
			for _, tk := range ts {
				pending = append(pending, pendingOp{tk, func(end time.Duration) {
					left--
					last = max(last, end)
					if left == 0 {
						out[k] = append(out[k], float64(last-arrive)/float64(time.Millisecond))
					}
				}})
			}
			drain()
		})
	}
	eng.RunUntil(at + time.Hour)
	return out
}

func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)]
}

// quantileOf is the y (ms) with F(y) = p, for a CDF F; +Inf when F stays
// below p.
func quantileOf(F func(float64) float64, p float64) float64 {
	lo, hi := 1e-3, 1e6
	if F(hi) < p {
		return math.Inf(1)
	}
	for range 100 {
		mid := math.Sqrt(lo * hi)
		if F(mid) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// The oracle's queue model (feasibility.Queue) against the capacity model
// itself on the simulator's clock: a token bucket with Poisson batches (the
// demo's throttled backends) and workers with hiccups.
func TestFeasibilityQueueAgainstCapacityModel(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	for _, c := range []struct {
		l     config.Limits
		batch []float64
		rate  float64
		tol   float64 // relative, on the P99 of the mixture
	}{
		{config.Limits{Workers: 8, Rate: 160, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}, []float64{0, 0.6, 0.25, 0.1, 0.05}, 60, 0.15},
		{config.Limits{Workers: 8, Rate: 160, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}, []float64{0, 0.6, 0.25, 0.1, 0.05}, 90, 0.15},
		{config.Limits{Workers: 8, Rate: 75, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 25}, []float64{0, 0.5, 0.3, 0.2}, 30, 0.15},
		{config.Limits{Workers: 4, ExtraLatencyMs: 3, HiccupProb: 0.05, HiccupMs: 25}, []float64{0, 0.5, 0.3, 0.2}, 150, 0.2},
		{config.Limits{Workers: 2, CostMs: 2}, []float64{0, 1}, 700, 0.1},
	} {
		got := simulateBatches(t, c.l, 0.05, c.batch, c.rate, 200_000, 5)
		var all []float64
		for _, xs := range got {
			all = append(all, xs...)
		}
		q := feasibility.NewQueue(c.l, 0.05, c.batch, c.rate)
		tot := 0.0
		for _, w := range c.batch {
			tot += w
		}
		mix := func(y float64) float64 {
			F := 0.0
			for k := 1; k < len(c.batch); k++ {
				F += c.batch[k] / tot * q.CDF(k, y)
			}
			return F
		}
		for _, p := range []float64{0.9, 0.99} {
			want := pct(all, p)
			pred := quantileOf(mix, p)
			t.Logf("%+v, %v/s, ρ = %.2f: P%g simulated %.2f ms, predicted %.2f", c.l, c.rate, q.Rho, p*100, want, pred)
			if p == 0.99 && math.Abs(pred-want) > c.tol*want {
				t.Errorf("%+v, %v batches/s: P99 %.2f ms predicted, %.2f simulated", c.l, c.rate, pred, want)
			}
		}
	}
}

// memcached's overhead as the oracle measures it from a trace: what a
// partition holds (feasibility.Slabs.HeldMB), against the simulator's cache
// model filled with the demo's kind of values (log-normal around 16 KiB).
func TestFeasibilityChargeAgainstCacheModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const keys = 20000
	sizes := make([]int64, keys)
	var lines []byte
	for i := range sizes {
		sizes[i] = int64(16384 * math.Exp(0.4*r.NormFloat64()-0.08))
		req := trace.Request{Layers: []trace.Layer{{{Backend: "a", Keys: []string{strconv.Itoa(i)}, Sizes: sizes[i : i+1], Cacheable: []bool{true}}}}}
		lines = append(trace.AppendJSON(lines, &req), '\n')
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := feasibility.Scan(path, time.Hour, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	slabs := w.Slabs[0]
	const MiB = model.MiB
	for _, mb := range []int64{16, 40, 112} {
		c := slabcache.NewCache(mb * MiB)
		var held float64
		for range 400000 {
			k := r.IntN(keys)
			if !c.Get(uint64(k), sizes[k]) {
				c.Set(uint64(k), len(strconv.Itoa(k)), sizes[k])
			}
		}
		held = float64(c.ItemBytes())
		want := slabs.HeldMB(float64(mb)) * MiB * 1.004 // items count their header
		t.Logf("%d MiB: %.1f MiB of items held, the estimate %.1f (charge %.3f)", mb, held/MiB, want/MiB, slabs.Charge)
		if math.Abs(held-want) > 0.03*held {
			t.Errorf("%d MiB: %.1f MiB held, estimated %.1f", mb, held/MiB, want/MiB)
		}
	}
}
