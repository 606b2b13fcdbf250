package feasibility

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/lib/hashing"
	"github.com/robinhoodcache/robinhood/lib/model"
	"github.com/robinhoodcache/robinhood/lib/stackdist"
	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/mrc"
)

// Workload is what the oracle knows of a trace, measured in one pass over
// it (Scan): the requests' fan-out (Fanout), and, per time bucket, the
// requests sent, each backend's cacheable and uncacheable queries and the
// LRU stack distances of its cacheable queries.
//
// Each app server's cache sees a random 1/N of the requests, over all the
// keys (the replayer's and the simulator's draw): Scan splits them the same
// way (a hash of the request's index) and measures each app server's stack
// distances on its own share, so a curve is one app server's cache of m
// MiB (averaged over them) and a rate is every app server's. (The whole
// stream's curve read at N·m made N app servers look N times richer.)
type Workload struct {
	Fanout
	// AppServers is the number of app servers the requests are split over;
	// MaxMB the largest cache, per app server, the curves reach.
	AppServers, MaxMB int
	// Bucket is the width of a time bucket; the last one may be cut by the
	// run's end.
	Bucket time.Duration
	// Duration is the run's length; Covered the part of it the trace
	// covers (up to its last ts_ms), Duration for a trace without ts_ms.
	Duration, Covered time.Duration
	// Timed says whether the trace has arrival times (ts_ms). Without them
	// there is one bucket: the whole trace, spread evenly over the run.
	Timed bool
	// Requests[t] is the requests sent in bucket t, every app server.
	Requests []float64
	// Cacheable[t][b] and Uncacheable[t][b] are backend b's queries in
	// bucket t (by Fanout.Backends), every app server.
	Cacheable, Uncacheable [][]float64
	// Sub is how many sub-buckets a bucket has (SubBuckets when the trace
	// is timed and short enough, else 1): the transient model steps the
	// backends' queues through them, so that a burst of misses shorter
	// than a bucket builds the backlog it does.
	Sub int
	// subReq[s] and subU[s][b] are sub-bucket s's requests and backend
	// b's uncacheable queries; hist[s][b][k] counts its cacheable
	// accesses by the first MiB of one app server's cache at which they
	// hit (k = 1 … MaxMB; MaxMB+1: beyond it, or a first access).
	subReq []float64
	subU   [][]float64
	hist   [][][]float32
	// tail[s][b][k] is the sum of hist[s][b][k:] (exact: the counts are
	// whole numbers), so SubMisses, called for every candidate allocation
	// of every sub-bucket, is not a loop over the bins.
	tail [][][]float64
	// curves caches MissCurve's smoothed per-bucket curves.
	curves map[[2]int][]float64
	// heldGrid and worth[b] are the partition sizes probed and what each
	// is worth to backend b (held.go).
	heldGrid []int
	worth    [][]float64
}

// Smoothing is the span a per-bucket miss-ratio curve is measured over
// (MissCurveAt): about 2,000 accesses a backend at the zoo's rates, and
// short against a phase.
const Smoothing = 10 * time.Second

// maxHistCells bounds the stack-distance histograms' memory (float32
// cells): long runs lose their sub-buckets, then get wider buckets.
const maxHistCells = 24 << 20

// SubBuckets is the number of sub-buckets of a bucket (Workload.Sub).
const SubBuckets = 10

// Scan reads the requests of a trace file sent before duration, split over
// appServers app servers, with curves up to maxMB MiB per app server.
func Scan(path string, duration time.Duration, appServers, maxMB int) (*Workload, error) {
	if duration <= 0 {
		return nil, fmt.Errorf("the run's duration %v must be positive", duration)
	}
	if appServers < 1 {
		return nil, fmt.Errorf("%d app servers: need at least one", appServers)
	}
	if maxMB < 1 {
		return nil, fmt.Errorf("cache of %d MB per app server: need at least 1", maxMB)
	}
	sc := &scanner{w: &Workload{AppServers: appServers, MaxMB: maxMB, Duration: duration}, per: map[string]*backendAcc{},
		shapes: map[string]int{}, buckets: 1, bucket: duration, sub: 1, depth: int64(maxMB+1) * model.MiB,
		grid: heldGrid(maxMB), limit: float64(duration.Milliseconds()), cur: map[string]*pairAcc{}}
	if err := mrc.EachRequest(path, sc.add); err != nil {
		return nil, err
	}
	if sc.count == 0 {
		return nil, fmt.Errorf("%s: no request sent before %v", path, duration)
	}
	if sc.untimed > 0 {
		return nil, fmt.Errorf("%s: %d requests have no ts_ms while others have: a trace has arrival times on every line or on none", path, sc.untimed)
	}
	sc.fanout()
	sc.counts()
	return sc.w, nil
}

// pairAcc counts one request's cacheable and uncacheable queries to a backend.
type pairAcc struct{ c, u int }

// backendAcc is what the scan gathers of one backend.
type backendAcc struct {
	idx     int
	bytes   float64
	queries float64
	pairs   map[pairAcc]int
	slabs   slabs
	stacks  []*stackdist.Stack // per app server
	held    *heldProbe         // on app server 0's share
}

// scanCell is one (sub-bucket, backend)'s counts and stack-distance histogram.
type scanCell struct {
	c, u float64
	hist []float32
}

// scanner is Scan's state while it reads the trace, one request at a time.
type scanner struct {
	w       *Workload
	per     map[string]*backendAcc
	order   []*backendAcc
	shapes  map[string]int
	buckets int
	bucket  time.Duration
	sub     int
	// Per sub-bucket, per backend (in order of first appearance): counts and
	// histograms, grown as backends appear.
	cells          [][]*scanCell
	requests       []float64
	depth          int64
	grid           []int
	limit, lastMs  float64
	count, untimed int
	layers         int
	cur            map[string]*pairAcc
	names          []string
	sb             strings.Builder
}

// start sizes the buckets once the first request says whether the trace is
// timed.
func (sc *scanner) start(timed bool) {
	sc.w.Timed = timed
	if timed {
		sc.bucket = time.Second
		for {
			n := int((sc.w.Duration + sc.bucket - 1) / sc.bucket)
			if n <= 3600 {
				sc.buckets = n
				break
			}
			sc.bucket *= 2
		}
		sc.sub = SubBuckets
	}
	sc.cells = make([][]*scanCell, sc.buckets*sc.sub)
	sc.requests = make([]float64, sc.buckets*sc.sub)
}

// add takes one request of the trace.
func (sc *scanner) add(r *trace.Request) {
	w, maxMB := sc.w, sc.w.MaxMB
	if sc.count == 0 && sc.untimed == 0 {
		sc.start(r.HasTs)
	}
	if r.HasTs != w.Timed {
		if !r.HasTs {
			sc.untimed++
		}
		return
	}
	if r.HasTs && r.TsMs >= sc.limit {
		return
	}
	t := 0 // the sub-bucket
	if r.HasTs {
		sc.lastMs = max(sc.lastMs, r.TsMs)
		t = min(int(time.Duration(r.TsMs*float64(time.Millisecond))*time.Duration(sc.sub)/sc.bucket), sc.buckets*sc.sub-1)
	}
	app := int(hashing.Mix64(uint64(sc.count)) % uint64(w.AppServers))
	sc.count++
	sc.requests[t]++
	sc.layers = max(sc.layers, len(r.Layers))
	clear(sc.cur)
	sc.names = sc.names[:0]
	for _, l := range r.Layers {
		for i := range l {
			q := &l[i]
			b := sc.backend(q.Backend)
			for len(sc.cells[t]) <= b.idx {
				sc.cells[t] = append(sc.cells[t], nil)
			}
			ce := sc.cells[t][b.idx]
			if ce == nil {
				ce = &scanCell{}
				sc.cells[t][b.idx] = ce
			}
			a := sc.cur[q.Backend]
			if a == nil {
				a = &pairAcc{}
				sc.cur[q.Backend] = a
				sc.names = append(sc.names, q.Backend)
			}
			for j, c := range q.Cacheable {
				if c {
					a.c++
					ce.c++
					b.slabs.add(q.Keys[j], q.Sizes[j])
					d, cold := b.stacks[app].Access(q.Keys[j], q.Sizes[j], q.Sizes[j])
					at := maxMB + 1
					if !cold {
						at = min(int((d+model.MiB-1)/model.MiB), maxMB+1)
					}
					if ce.hist == nil {
						ce.hist = make([]float32, maxMB+2)
					}
					ce.hist[at]++
					if app == 0 {
						b.held.access(q.Keys[j], q.Sizes[j], at)
					}
				} else {
					a.u++
					ce.u++
				}
				b.bytes += float64(q.Sizes[j])
				b.queries++
			}
		}
	}
	sort.Strings(sc.names)
	sc.sb.Reset()
	for _, n := range sc.names {
		a := sc.cur[n]
		if a.c+a.u == 0 {
			continue
		}
		sc.per[n].pairs[*a]++
		sc.sb.WriteString(n)
		sc.sb.WriteByte(0)
		sc.sb.WriteString(strconv.Itoa(a.c))
		sc.sb.WriteByte(':')
		sc.sb.WriteString(strconv.Itoa(a.u))
		sc.sb.WriteByte(0)
	}
	sc.shapes[sc.sb.String()]++
}

// backend is the accumulator of a backend, made on its first query.
func (sc *scanner) backend(name string) *backendAcc {
	b := sc.per[name]
	if b == nil {
		b = &backendAcc{idx: len(sc.order), pairs: map[pairAcc]int{}, stacks: make([]*stackdist.Stack, sc.w.AppServers),
			held: newHeldProbe(sc.grid, sc.w.MaxMB)}
		for a := range b.stacks {
			b.stacks[a] = stackdist.New(sc.depth)
		}
		sc.per[name] = b
		sc.order = append(sc.order, b)
	}
	return b
}

// fanout sets the workload's fan-out (backends sorted by name, their pairs
// and the requests' shapes), the backends' slabs and worth curves, the
// covered time and the request rate.
func (sc *scanner) fanout() {
	w, per, count := sc.w, sc.per, sc.count
	f := &w.Fanout
	f.Layers = sc.layers
	f.Backends = slices.Sorted(maps.Keys(per))
	index := map[string]int{}
	pairIndex := make([]map[pairAcc]int32, len(f.Backends))
	w.heldGrid = sc.grid
	for i, n := range f.Backends {
		index[n] = i
		b := per[n]
		mean := 0.0
		if b.queries > 0 {
			mean = b.bytes / b.queries
		}
		f.MeanSize = append(f.MeanSize, mean)
		f.Slabs = append(f.Slabs, b.slabs.summary())
		sl := f.Slabs[i]
		w.worth = append(w.worth, b.held.worth(sl.HeldMB))
		var ps []Pair
		for a, k := range b.pairs {
			ps = append(ps, Pair{Cacheable: a.c, Uncacheable: a.u, Weight: float64(k) / float64(count)})
		}
		sort.Slice(ps, func(x, y int) bool {
			if ps[x].Cacheable != ps[y].Cacheable {
				return ps[x].Cacheable < ps[y].Cacheable
			}
			return ps[x].Uncacheable < ps[y].Uncacheable
		})
		pairIndex[i] = map[pairAcc]int32{}
		for j, p := range ps {
			pairIndex[i][pairAcc{p.Cacheable, p.Uncacheable}] = int32(j)
		}
		f.Pairs = append(f.Pairs, ps)
	}
	for _, k := range slices.Sorted(maps.Keys(sc.shapes)) {
		s := Shape{Weight: float64(sc.shapes[k]) / float64(count), Pair: make([]int32, len(f.Backends))}
		for i := range s.Pair {
			s.Pair[i] = -1
		}
		parts := strings.Split(k, "\x00")
		for i := 0; i+1 < len(parts); i += 2 {
			cu := strings.SplitN(parts[i+1], ":", 2)
			c, _ := strconv.Atoi(cu[0])
			u, _ := strconv.Atoi(cu[1])
			b := index[parts[i]]
			s.Pair[b] = pairIndex[b][pairAcc{c, u}]
		}
		f.Shapes = append(f.Shapes, s)
	}
	w.Covered = w.Duration
	if w.Timed {
		w.Covered = min(w.Duration, time.Duration(sc.lastMs*float64(time.Millisecond)))
		if w.Covered <= 0 {
			w.Covered = min(w.Duration, sc.bucket)
		}
	}
	f.Rate = float64(count) / w.Covered.Seconds()
}

// counts sets the buckets' counts, histograms and their tails, the cells
// reordered by the sorted backends; the histograms beyond the budget of
// memory lose their sub-buckets, then get wider buckets.
func (sc *scanner) counts() {
	w, f, cells, maxMB := sc.w, &sc.w.Fanout, sc.cells, sc.w.MaxMB
	w.Bucket, w.Sub = sc.bucket, sc.sub
	w.subReq = sc.requests
	nb := len(f.Backends)
	w.subU = make([][]float64, len(cells))
	w.hist = make([][][]float32, len(cells))
	cacheable := make([][]float64, len(cells))
	for t := range cells {
		w.subU[t] = make([]float64, nb)
		w.hist[t] = make([][]float32, nb)
		cacheable[t] = make([]float64, nb)
		for i, n := range f.Backends {
			b := sc.per[n]
			if b.idx < len(cells[t]) && cells[t][b.idx] != nil {
				ce := cells[t][b.idx]
				cacheable[t][i], w.subU[t][i], w.hist[t][i] = ce.c, ce.u, ce.hist
			}
		}
	}
	if used := len(cells) * nb * (maxMB + 2); used > maxHistCells && w.Sub > 1 {
		cacheable = w.merge(w.Sub, cacheable)
		w.Sub = 1
	}
	if used := len(w.subReq) * nb * (maxMB + 2); used > maxHistCells {
		k := int(math.Ceil(float64(used) / maxHistCells))
		cacheable = w.merge(k, cacheable)
		w.Bucket *= time.Duration(k)
	}
	nbk := len(w.subReq) / w.Sub
	w.Requests = make([]float64, nbk)
	w.Cacheable = make([][]float64, nbk)
	w.Uncacheable = make([][]float64, nbk)
	for t := range nbk {
		w.Cacheable[t], w.Uncacheable[t] = make([]float64, nb), make([]float64, nb)
		for s := t * w.Sub; s < (t+1)*w.Sub; s++ {
			w.Requests[t] += w.subReq[s]
			for b := range nb {
				w.Cacheable[t][b] += cacheable[s][b]
				w.Uncacheable[t][b] += w.subU[s][b]
			}
		}
	}
	w.tail = make([][][]float64, len(w.hist))
	for t := range w.hist {
		w.tail[t] = make([][]float64, nb)
		for b, h := range w.hist[t] {
			if h == nil {
				continue
			}
			tl := make([]float64, len(h)+1)
			for j := len(h) - 1; j >= 0; j-- {
				tl[j] = tl[j+1] + float64(h[j])
			}
			w.tail[t][b] = tl
		}
	}
	w.curves = map[[2]int][]float64{}
}

// merge merges every k sub-buckets into one and returns the merged
// cacheable counts.
func (w *Workload) merge(k int, cacheable [][]float64) [][]float64 {
	n := (len(w.subReq) + k - 1) / k
	nb := len(w.Backends)
	req := make([]float64, n)
	c := make([][]float64, n)
	u := make([][]float64, n)
	h := make([][][]float32, n)
	for t := range w.subReq {
		i := t / k
		if c[i] == nil {
			c[i], u[i], h[i] = make([]float64, nb), make([]float64, nb), make([][]float32, nb)
		}
		req[i] += w.subReq[t]
		for b := range nb {
			c[i][b] += cacheable[t][b]
			u[i][b] += w.subU[t][b]
			if src := w.hist[t][b]; src != nil {
				if h[i][b] == nil {
					h[i][b] = make([]float32, w.MaxMB+2)
				}
				for j, v := range src {
					h[i][b][j] += v
				}
			}
		}
	}
	w.subReq, w.subU, w.hist = req, u, h
	return c
}

// Buckets is the number of time buckets.
func (w *Workload) Buckets() int { return len(w.Requests) }

// BucketOf is the bucket holding time t (the last one beyond the run).
func (w *Workload) BucketOf(t time.Duration) int {
	if !w.Timed || t <= 0 {
		return 0
	}
	return min(int(t/w.Bucket), len(w.Requests)-1)
}

// bucketSpan is the part of bucket t within the trace's coverage, seconds.
func (w *Workload) bucketSpan(t int) float64 { return w.span(t, w.Bucket) }

// subSpan is the part of sub-bucket s within the trace's coverage, seconds.
func (w *Workload) subSpan(s int) float64 { return w.span(s, w.Bucket/time.Duration(w.Sub)) }

// span is the part of the i-th interval of width step within the trace's
// coverage, seconds.
func (w *Workload) span(i int, step time.Duration) float64 {
	if !w.Timed {
		return w.Covered.Seconds()
	}
	from := time.Duration(i) * step
	to := min(from+step, w.Covered)
	return max(0, (to - from).Seconds())
}

// Rates is the request rate and each backend's cacheable and uncacheable
// query rates (per second, every app server) over [from, to), from the
// part of it the trace covers; ok is false when it covers none of it.
func (w *Workload) Rates(from, to time.Duration) (req float64, c, u []float64, ok bool) {
	nb := len(w.Backends)
	c, u = make([]float64, nb), make([]float64, nb)
	lo, hi := w.BucketOf(from), w.BucketOf(to-1)
	if !w.Timed {
		lo, hi = 0, 0
	}
	secs := 0.0
	for t := lo; t <= hi; t++ {
		span := w.bucketSpan(t)
		if span <= 0 {
			continue
		}
		secs += span
		req += w.Requests[t]
		for b := range nb {
			c[b] += w.Cacheable[t][b]
			u[b] += w.Uncacheable[t][b]
		}
	}
	if secs <= 0 {
		return 0, c, u, false
	}
	req /= secs
	for b := range nb {
		c[b] /= secs
		u[b] /= secs
	}
	return req, c, u, true
}

// MissCurve is backend b's miss ratio at 0 … MaxMB MiB of one app server's
// cache over the cacheable accesses in [from, to), widened to at least
// Smoothing around its middle. Early in a trace a cache is still filling
// and most misses are a key's first access; later most are capacity
// misses: the curve is of its own time, not the whole trace's.
func (w *Workload) MissCurve(b int, from, to time.Duration) []float64 {
	lo, hi := w.BucketOf(from), w.BucketOf(to-1)
	if !w.Timed {
		lo, hi = 0, 0
	}
	for w.Timed && time.Duration(hi-lo+1)*w.Bucket < Smoothing && (lo > 0 || hi < len(w.Requests)-1) {
		if lo > 0 && (hi == len(w.Requests)-1 || (from-time.Duration(lo)*w.Bucket) <= (time.Duration(hi+1)*w.Bucket-to)) {
			lo--
		} else {
			hi++
		}
	}
	key := [2]int{b<<20 | lo, hi}
	if c := w.curves[key]; c != nil {
		return c
	}
	hist := make([]float64, w.MaxMB+2)
	for t := lo * w.Sub; t < (hi+1)*w.Sub; t++ {
		for k, v := range w.hist[t][b] {
			hist[k] += float64(v)
		}
	}
	c := model.MissCurve(hist)
	w.curves[key] = c
	return c
}

// SubMisses is how many of backend b's cacheable accesses in sub-bucket s
// miss one app server's LRU of held MiB (on average over the app servers),
// from the sub-bucket's own stack distances: no smoothing, so that a burst
// of misses (a scan of new keys) shows where it is. ok is false when the
// sub-bucket has no cacheable access.
func (w *Workload) SubMisses(b, s int, held float64) (misses float64, ok bool) {
	h := w.hist[s][b]
	if h == nil {
		return 0, false
	}
	// bin k counts the accesses that first hit at k MiB: they miss an LRU
	// of held < k MiB; the bin held straddles is split evenly.
	last := len(h) - 1
	k := int(math.Ceil(held))
	if j := max(k, 1); j <= last {
		misses = w.tail[s][b][j]
	}
	if k >= 1 && k < last {
		misses -= float64(h[k]) * (held - float64(k-1))
	}
	if k == 0 {
		misses += float64(h[0])
	}
	return math.Max(misses, 0), true
}

// MissCurveAt is backend b's curve around bucket t (MissCurve over the
// bucket, widened to Smoothing).
func (w *Workload) MissCurveAt(b, t int) []float64 {
	from := time.Duration(t) * w.Bucket
	return w.MissCurve(b, from, from+w.Bucket)
}

// LoadModel is the backends' demand over [from, to) for the load model
// (analysePhases): their query rates and miss-ratio curves then. ok is false when
// the trace covers none of the interval.
func (w *Workload) LoadModel(from, to time.Duration) ([]model.Backend, bool) {
	_, c, u, ok := w.Rates(from, to)
	out := make([]model.Backend, len(w.Backends))
	for i, n := range w.Backends {
		out[i] = model.Backend{Name: n, CacheableRate: c[i], UncacheableRate: u[i], MissRatio: w.MissCurve(i, from, to)}
	}
	return out, ok
}
