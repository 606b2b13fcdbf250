package feasibility

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/stackdist"
	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/mrc"
)

// Fanout is the shape of a trace's requests, as the latency model needs it
// (latency.go): how many queries of each backend a request has, cacheable
// or not, and how often each shape occurs.
type Fanout struct {
	// Backends are the names of the backends the trace queries, sorted (the
	// order of FromTrace).
	Backends []string
	// MeanSize is each backend's mean value size, bytes per query.
	MeanSize []float64
	// Pairs lists, per backend, the distinct (cacheable, uncacheable) query
	// counts of the requests that query it.
	Pairs [][]Pair
	// Shapes are the distinct request shapes with their share of the
	// requests (the shares sum to 1).
	Shapes []Shape
	// Rate is the trace's request rate over every app server, requests/s.
	Rate float64
	// PhaseRate is each phase's request rate: the phase's own when it
	// differs from Rate by more than Poisson noise (3σ), else Rate.
	PhaseRate []float64
	// Layers is the most layers a request has. The model folds a request's
	// layers into one (its latency is the slowest call, not a sum).
	Layers int
	// Slabs is, per backend, how memcached stores its values: a partition
	// of m MiB holds Slabs[b].HeldMB(m) MiB of them.
	Slabs []Slabs
	// PhaseMiss is, per phase and backend, the miss ratio of the phase's
	// cacheable queries with m = 0 … budget MiB of cache per app server
	// (read at appServers × m, as FromTrace): LRU stack distances over the
	// whole trace before them, counted within the phase, widened to at
	// least 10 s around its middle (neighbouring phases' queries added).
	// Early in a trace a cache is still filling and most misses are a key's
	// first access; later most are capacity misses, so the whole trace's
	// curve is wrong for both.
	PhaseMiss [][][]float64
}

// Pair is one backend's share of a request: its cacheable and
// uncacheable queries (summed over the request's layers).
type Pair struct {
	Cacheable, Uncacheable int
	// Weight is the share of all requests with this pair.
	Weight float64
}

// Shape is one request shape: per backend (Fanout.Backends), an index into
// that backend's Pairs, -1 when the request does not query it.
type Shape struct {
	Weight float64
	Pair   []int32
}

// pageCharge is the memory an item charged chunk bytes
// (costmodel.ItemCharge) takes in whole pages: a page holds
// ⌊1 MiB / chunk⌋ chunks, and the rest of it is lost; an item larger than
// the largest chunk spans several.
func pageCharge(chunk int64) float64 {
	if chunk >= costmodel.ChunkMax {
		return float64(chunk)
	}
	return float64(costmodel.PageBytes) / float64(costmodel.PageBytes/chunk)
}

// missCurve is the miss ratio at 0 … len(hist)−2 MiB from a histogram of
// the accesses by the first MiB they hit at (the last entry: never).
func missCurve(hist []float64) []float64 {
	out := make([]float64, len(hist)-1)
	total := 0.0
	for _, v := range hist {
		total += v
	}
	if total == 0 {
		for m := range out {
			out[m] = 1
		}
		return out
	}
	later := hist[len(hist)-1]
	for m := len(out) - 1; m >= 0; m-- {
		out[m] = later / total
		later += hist[m]
	}
	return out
}

// slabs accounts one backend's cacheable values as memcached stores them.
type slabs struct {
	value, charged float64
	// keys maps each distinct key to its chunk.
	keys map[string]int64
}

// add accounts one access and reports whether it was the key's first.
func (s *slabs) add(key string, size int64) bool {
	chunk := costmodel.ItemCharge(len(key), size)
	s.value += float64(size)
	s.charged += pageCharge(chunk)
	if s.keys == nil {
		s.keys = map[string]int64{}
	}
	if _, ok := s.keys[key]; ok {
		return false
	}
	s.keys[key] = chunk
	return true
}

// Slab is one slab class of a backend's values.
type Slab struct {
	// PerPage is how many chunks a page holds; Keys how many distinct keys
	// of the trace fall in the class; Share their share of the backend's
	// distinct keys.
	PerPage, Keys, Share float64
}

// Slabs is how memcached stores one backend's values: Charge is the memory
// per byte of value over the cacheable accesses (the slab chunk, and the
// part of a 1 MiB page its chunks cannot fill), Classes the slab classes
// of its keys.
type Slabs struct {
	Charge  float64
	Classes []Slab
}

func (s *slabs) summary() Slabs {
	if s.value <= 0 {
		return Slabs{Charge: 1}
	}
	out := Slabs{Charge: s.charged / s.value}
	count := map[int64]float64{}
	for _, c := range s.keys {
		if c < costmodel.ChunkMax { // items of whole pages leave no page part empty
			count[c]++
		}
	}
	chunks := make([]int64, 0, len(count))
	for c := range count {
		chunks = append(chunks, c)
	}
	sort.Slice(chunks, func(i, j int) bool { return chunks[i] < chunks[j] })
	for _, c := range chunks {
		out.Classes = append(out.Classes, Slab{PerPage: float64(costmodel.PageBytes / c), Keys: count[c], Share: count[c] / float64(len(s.keys))})
	}
	return out
}

// HeldMB is about how many MiB of values a memcached instance of m MiB
// holds once full (sim/cache.go): m less the pages its classes cannot
// fill, over the charge. memcached gives a class a page when an item of
// it arrives and the limit allows one more; once the pages run out, they
// stay with their classes. So a class whose keys cannot fill a page, and
// that got one while the cache filled, leaves the rest of it empty. The
// fill is taken as drawing distinct keys at random: after n of them, a
// class of share s has a page with probability 1 − e^(−n·s), and about
// n·s/perPage pages beyond.
func (s Slabs) HeldMB(m float64) float64 {
	if len(s.Classes) == 0 || m <= 0 {
		return math.Max(m, 0) / s.Charge
	}
	pages := func(n float64) float64 {
		p := 0.0
		for _, c := range s.Classes {
			p += -math.Expm1(-n*c.Share) + n*c.Share/c.PerPage
		}
		return p
	}
	lo, hi := 0.0, 1.0
	for pages(hi) < m && hi < 1e15 {
		lo, hi = hi, hi*2
	}
	for range 60 {
		if mid := (lo + hi) / 2; pages(mid) < m {
			lo = mid
		} else {
			hi = mid
		}
	}
	waste := 0.0
	for _, c := range s.Classes {
		if c.Keys < c.PerPage {
			waste += -math.Expm1(-hi*c.Share) * (1 - c.Keys/c.PerPage)
		}
	}
	return math.Max(0, m-waste) / s.Charge
}

// MeasureFanout reads the requests of a trace file sent before duration
// (as FromTrace does) and returns their fan-out, the request rate, and
// every phase's request rate and miss-ratio curves, for appServers app
// servers with up to budget MiB each.
func MeasureFanout(path string, duration time.Duration, appServers, budget int, phases []Phase) (*Fanout, error) {
	perMiB := int64(appServers) * MiB
	type acc struct{ c, u int }
	type backendAcc struct {
		bytes   float64
		queries float64
		pairs   map[acc]int
		slabs   slabs
		stack   *stackdist.Stack
		// per phase: accesses by the first MiB they hit at (budget+1:
		// beyond the budget, or a key's first access)
		hist [][]float64
	}
	per := map[string]*backendAcc{}
	shapes := map[string]int{} // key: per request, "name:c:u;" sorted
	var count int
	phaseCount := make([]int, len(phases))
	limit := float64(duration.Milliseconds())
	var lastMs float64
	layers := 0
	cur := map[string]*acc{}
	var names []string
	var sb strings.Builder
	err := mrc.EachRequest(path, func(r *trace.Request) {
		if r.HasTs && r.TsMs >= limit {
			return
		}
		phase := -1
		if r.HasTs {
			lastMs = r.TsMs
			at := time.Duration(r.TsMs * float64(time.Millisecond))
			i := sort.Search(len(phases), func(i int) bool { return phases[i].End > at })
			if i < len(phases) && at >= phases[i].Start {
				phaseCount[i]++
				phase = i
			}
		} else if len(phases) == 1 {
			phase = 0
		}
		count++
		layers = max(layers, len(r.Layers))
		clear(cur)
		names = names[:0]
		for _, l := range r.Layers {
			for i := range l {
				q := &l[i]
				b := per[q.Backend]
				if b == nil {
					b = &backendAcc{pairs: map[acc]int{}, stack: stackdist.New(0), hist: make([][]float64, len(phases))}
					for p := range b.hist {
						b.hist[p] = make([]float64, budget+2)
					}
					per[q.Backend] = b
				}
				a := cur[q.Backend]
				if a == nil {
					a = &acc{}
					cur[q.Backend] = a
					names = append(names, q.Backend)
				}
				for j, c := range q.Cacheable {
					if c {
						a.c++
						b.slabs.add(q.Keys[j], q.Sizes[j])
						d, cold := b.stack.Access(q.Keys[j], q.Sizes[j], q.Sizes[j])
						if phase < 0 {
							continue
						}
						at := budget + 1
						if !cold {
							at = min(int((d+perMiB-1)/perMiB), budget+1)
						}
						b.hist[phase][at]++
					} else {
						a.u++
					}
					b.bytes += float64(q.Sizes[j])
					b.queries++
				}
			}
		}
		sort.Strings(names)
		sb.Reset()
		for _, n := range names {
			a := cur[n]
			if a.c+a.u == 0 {
				continue
			}
			per[n].pairs[*a]++
			sb.WriteString(n)
			sb.WriteByte(0)
			sb.WriteString(strconv.Itoa(a.c))
			sb.WriteByte(':')
			sb.WriteString(strconv.Itoa(a.u))
			sb.WriteByte(0)
		}
		shapes[sb.String()]++
	})
	if err != nil {
		return nil, err
	}
	f := &Fanout{Layers: layers}
	for n := range per {
		f.Backends = append(f.Backends, n)
	}
	sort.Strings(f.Backends)
	index := map[string]int{}
	pairIndex := make([]map[acc]int32, len(f.Backends))
	for i, n := range f.Backends {
		index[n] = i
		b := per[n]
		mean := 0.0
		if b.queries > 0 {
			mean = b.bytes / b.queries
		}
		f.MeanSize = append(f.MeanSize, mean)
		f.Slabs = append(f.Slabs, b.slabs.summary())
		var ps []Pair
		for a, k := range b.pairs {
			ps = append(ps, Pair{Cacheable: a.c, Uncacheable: a.u, Weight: float64(k) / float64(max(count, 1))})
		}
		sort.Slice(ps, func(x, y int) bool {
			if ps[x].Cacheable != ps[y].Cacheable {
				return ps[x].Cacheable < ps[y].Cacheable
			}
			return ps[x].Uncacheable < ps[y].Uncacheable
		})
		pairIndex[i] = map[acc]int32{}
		for j, p := range ps {
			pairIndex[i][acc{p.Cacheable, p.Uncacheable}] = int32(j)
		}
		f.Pairs = append(f.Pairs, ps)
	}
	keys := make([]string, 0, len(shapes))
	for k := range shapes {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic order
	for _, k := range keys {
		s := Shape{Weight: float64(shapes[k]) / float64(max(count, 1)), Pair: make([]int32, len(f.Backends))}
		for i := range s.Pair {
			s.Pair[i] = -1
		}
		parts := strings.Split(k, "\x00")
		for i := 0; i+1 < len(parts); i += 2 {
			cu := strings.SplitN(parts[i+1], ":", 2)
			c, _ := strconv.Atoi(cu[0])
			u, _ := strconv.Atoi(cu[1])
			b := index[parts[i]]
			s.Pair[b] = pairIndex[b][acc{c, u}]
		}
		f.Shapes = append(f.Shapes, s)
	}
	secs := duration.Seconds()
	if lastMs > 0 && lastMs/1000 < secs {
		secs = lastMs / 1000 // a trace shorter than the run
	}
	if secs > 0 {
		f.Rate = float64(count) / secs
	}
	for p := range phases {
		// widen to 10 s: add the neighbours, the shorter side first
		lo, hi := p, p
		for phases[hi].End-phases[lo].Start < 10*time.Second && (lo > 0 || hi < len(phases)-1) {
			if lo > 0 && (hi == len(phases)-1 || phases[p].Start-phases[lo].Start <= phases[hi].End-phases[p].End) {
				lo--
			} else {
				hi++
			}
		}
		row := make([][]float64, len(f.Backends))
		for i, n := range f.Backends {
			hist := make([]float64, budget+2)
			for q := lo; q <= hi; q++ {
				for k, v := range per[n].hist[q] {
					hist[k] += v
				}
			}
			row[i] = missCurve(hist)
		}
		f.PhaseMiss = append(f.PhaseMiss, row)
	}
	for i, ph := range phases {
		f.PhaseRate = append(f.PhaseRate, f.Rate)
		length := math.Min(ph.End.Seconds(), secs) - ph.Start.Seconds()
		if length <= 0 {
			continue
		}
		want := f.Rate * length
		if math.Abs(float64(phaseCount[i])-want) > 3*math.Sqrt(want) {
			f.PhaseRate[i] = float64(phaseCount[i]) / length
		}
	}
	return f, nil
}
