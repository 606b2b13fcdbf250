// Package stats computes the structure of a request trace (ours or the
// original RobinHood release's): per backend, the columns of the paper's
// Table 1 — query %, request % (both readings: share of (request, backend)
// pairs and fraction of requests that touch the backend), mean batch size,
// mean fanout — and requests, queries, distinct keys and mean object size.
//
// Collector is the pure core (add requests, read the result); Read is the
// I/O shell that parses a trace file in parallel.
package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"
	"text/tabwriter"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

type backendAcc struct {
	requests    int64 // requests that query the backend
	queries     int64
	fanoutSum   int64 // Σ fanout of the requests that query it
	sizeSum     int64
	uncacheable int64
	keys        *distinct
}

// Collector accumulates trace statistics. The zero value is not usable; use
// NewCollector. It is not safe for concurrent use; Merge combines
// collectors filled in parallel.
type Collector struct {
	requests int64
	queries  int64
	pairs    int64
	backends map[string]*backendAcc
	minTs    float64
	maxTs    float64
	withTs   int64
	// scratch for one request: queries per backend, in first-seen order.
	seen map[string]int64
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{backends: map[string]*backendAcc{}, seen: map[string]int64{}}
}

// Add accounts one request. A backend named in several layers of a request
// counts once for fanout and its queries add up into one batch.
func (c *Collector) Add(r *trace.Request) {
	clear(c.seen)
	for _, l := range r.Layers {
		for i := range l {
			q := &l[i]
			c.seen[q.Backend] += int64(q.Len())
			acc := c.backends[q.Backend]
			if acc == nil {
				acc = &backendAcc{keys: newDistinct()}
				c.backends[q.Backend] = acc
			}
			for j, k := range q.Keys {
				acc.keys.add(k)
				acc.sizeSum += q.Sizes[j]
				if !q.Cacheable[j] {
					acc.uncacheable++
				}
			}
		}
	}
	fanout := int64(len(c.seen))
	for name, n := range c.seen {
		acc := c.backends[name]
		acc.requests++
		acc.queries += n
		acc.fanoutSum += fanout
		c.queries += n
	}
	c.requests++
	c.pairs += fanout
	if r.HasTs {
		if c.withTs == 0 || r.TsMs < c.minTs {
			c.minTs = r.TsMs
		}
		if c.withTs == 0 || r.TsMs > c.maxTs {
			c.maxTs = r.TsMs
		}
		c.withTs++
	}
}

// Merge adds o's counts to c.
func (c *Collector) Merge(o *Collector) {
	for name, oa := range o.backends {
		acc := c.backends[name]
		if acc == nil {
			c.backends[name] = oa
			continue
		}
		acc.requests += oa.requests
		acc.queries += oa.queries
		acc.fanoutSum += oa.fanoutSum
		acc.sizeSum += oa.sizeSum
		acc.uncacheable += oa.uncacheable
		acc.keys.merge(oa.keys)
	}
	c.requests += o.requests
	c.queries += o.queries
	c.pairs += o.pairs
	if o.withTs > 0 {
		if c.withTs == 0 || o.minTs < c.minTs {
			c.minTs = o.minTs
		}
		if c.withTs == 0 || o.maxTs > c.maxTs {
			c.maxTs = o.maxTs
		}
		c.withTs += o.withTs
	}
}

// Backend is one backend's row.
type Backend struct {
	Name string `json:"name"`
	// QueryPct is the backend's share of all queries.
	QueryPct float64 `json:"query_pct"`
	// RequestPctPairs is its share of (request, backend) pairs — the
	// reading of Table 1's request % column that sums to 100.
	RequestPctPairs float64 `json:"request_pct_pairs"`
	// RequestPctTouching is the percentage of requests that query it.
	RequestPctTouching float64 `json:"request_pct_touching"`
	// MeanBatchSize is the mean number of queries to it in the requests
	// that query it.
	MeanBatchSize float64 `json:"mean_batch_size"`
	// MeanFanout is the mean number of distinct backends in the requests
	// that query it.
	MeanFanout     float64 `json:"mean_fanout"`
	Requests       int64   `json:"requests"`
	Queries        int64   `json:"queries"`
	DistinctKeys   int64   `json:"distinct_keys"`
	MeanObjectSize float64 `json:"mean_object_size"`
	UncacheablePct float64 `json:"uncacheable_pct"`
}

// Result is the statistics of a whole trace.
type Result struct {
	Requests              int64   `json:"requests"`
	Queries               int64   `json:"queries"`
	MeanQueriesPerRequest float64 `json:"mean_queries_per_request"`
	// MeanFanout is the mean number of distinct backends per request.
	MeanFanout     float64 `json:"mean_fanout"`
	MeanObjectSize float64 `json:"mean_object_size"`
	// DistinctKeys counts (backend, key) pairs: the same key at two
	// backends is two objects.
	DistinctKeys int64 `json:"distinct_keys"`
	// DistinctKeysExact is false when some backend had more than 2^21
	// distinct keys and was estimated with HyperLogLog (≈0.8% error).
	DistinctKeysExact bool    `json:"distinct_keys_exact"`
	UncacheablePct    float64 `json:"uncacheable_pct"`
	// DurationS and RatePerS come from ts_ms; zero when the trace has none.
	DurationS    float64 `json:"duration_s"`
	RatePerS     float64 `json:"rate_per_s"`
	SkippedLines int64   `json:"skipped_lines"`
	// Backends are ordered by queries, most first (then by name).
	Backends []Backend `json:"backends"`
}

// Result computes the statistics.
func (c *Collector) Result() Result {
	res := Result{Requests: c.requests, Queries: c.queries, DistinctKeysExact: true}
	var sizes, uncached int64
	for name, a := range c.backends {
		b := Backend{
			Name:          name,
			QueryPct:      pct(a.queries, c.queries),
			Requests:      a.requests,
			Queries:       a.queries,
			MeanBatchSize: ratio(a.queries, a.requests),
			MeanFanout:    ratio(a.fanoutSum, a.requests),
			// Pair share: the backend's requests over all pairs.
			RequestPctPairs:    pct(a.requests, c.pairs),
			RequestPctTouching: pct(a.requests, c.requests),
			MeanObjectSize:     ratio(a.sizeSum, a.queries),
			UncacheablePct:     pct(a.uncacheable, a.queries),
		}
		n, exact := a.keys.count()
		b.DistinctKeys = n
		res.DistinctKeys += n
		res.DistinctKeysExact = res.DistinctKeysExact && exact
		sizes += a.sizeSum
		uncached += a.uncacheable
		res.Backends = append(res.Backends, b)
	}
	sort.Slice(res.Backends, func(i, j int) bool {
		a, b := res.Backends[i], res.Backends[j]
		if a.Queries != b.Queries {
			return a.Queries > b.Queries
		}
		return a.Name < b.Name
	})
	res.MeanQueriesPerRequest = ratio(c.queries, c.requests)
	res.MeanFanout = ratio(c.pairs, c.requests)
	res.MeanObjectSize = ratio(sizes, c.queries)
	res.UncacheablePct = pct(uncached, c.queries)
	if c.withTs > 1 && c.maxTs > c.minTs {
		res.DurationS = (c.maxTs - c.minTs) / 1000
		res.RatePerS = float64(c.withTs-1) / res.DurationS
	}
	return res
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func pct(a, b int64) float64 { return 100 * ratio(a, b) }

// LineError is a malformed trace line.
type LineError struct {
	Line int64
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// Options control Read.
type Options struct {
	// SkipBad counts and skips malformed lines instead of stopping at the
	// first one.
	SkipBad bool
	// OnBad, when set with SkipBad, is called for every skipped line (one
	// call at a time, in no particular order).
	OnBad func(*LineError)
	// Workers parse in parallel (default GOMAXPROCS).
	Workers int
}

// chunk is a run of whole lines; first is the number of its first line.
type chunk struct {
	first int64
	data  []byte
}

// partial is one worker's share of the work.
type partial struct {
	c       *Collector
	skipped int64
	err     *LineError // the first bad line this worker saw
}

// Read parses a trace from r and returns its statistics. Blank lines are
// ignored. A malformed line stops it with a *LineError naming the first bad
// line, unless o.SkipBad; a line longer than trace.MaxLineBytes (the input
// is not a trace) always stops it, with a *trace.LineTooLongError.
func Read(r io.Reader, o Options) (Result, error) {
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	chunks := make(chan chunk, 2*workers)
	stop := make(chan struct{})
	var stopOnce sync.Once
	var badMu sync.Mutex
	onBad := func(le *LineError) {
		if o.OnBad != nil {
			badMu.Lock()
			defer badMu.Unlock()
			o.OnBad(le)
		}
	}
	parts := make([]partial, workers)
	var wg sync.WaitGroup
	for w := range parts {
		p := &parts[w]
		p.c = NewCollector()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range chunks {
				if !p.parse(ch, o.SkipBad, onBad) {
					stopOnce.Do(func() { close(stop) })
				}
			}
		}()
	}
	readErr := feed(r, chunks, stop)
	close(chunks)
	wg.Wait()
	if readErr != nil {
		return Result{}, readErr
	}
	total := NewCollector()
	var skipped int64
	var first *LineError
	for _, p := range parts {
		total.Merge(p.c)
		skipped += p.skipped
		if p.err != nil && (first == nil || p.err.Line < first.Line) {
			first = p.err
		}
	}
	if first != nil {
		return Result{}, first
	}
	result := total.Result()
	result.SkippedLines = skipped
	return result, nil
}

// parse accounts the lines of a chunk. It returns false at a bad line when
// bad lines are not skipped.
func (p *partial) parse(ch chunk, skipBad bool, onBad func(*LineError)) bool {
	line, data := ch.first, ch.data
	for ; len(data) > 0; line++ {
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		req, err := trace.Parse(l)
		if err == nil {
			p.c.Add(req)
			continue
		}
		le := &LineError{Line: line, Err: err}
		if skipBad {
			p.skipped++
			onBad(le)
			continue
		}
		if p.err == nil || le.Line < p.err.Line {
			p.err = le
		}
		return false
	}
	return true
}

// chunkSize is the amount of trace handed to a worker at a time.
const chunkSize = 1 << 20

// feed splits r into chunks of whole lines until EOF or stop. Chunks are
// handed out in file order, so when a worker stops at a bad line every
// chunk before it has been handed out too, and Read reports the smallest bad
// line number. A line longer than trace.MaxLineBytes stops it with a
// *trace.LineTooLongError, even with SkipBad: a file that is not a trace,
// such as /dev/zero, costs at most that much memory, not all of it.
func feed(r io.Reader, chunks chan<- chunk, stop <-chan struct{}) error {
	br := bufio.NewReaderSize(r, chunkSize)
	line := int64(1)
	for {
		buf := make([]byte, 0, chunkSize+4096)
		var err error
		cur := 0 // bytes of the line being read
		for {
			var part []byte
			part, err = br.ReadSlice('\n')
			buf = append(buf, part...)
			cur += len(part)
			if err != bufio.ErrBufferFull { // the line ends: its "\r\n" is not the line's
				cur -= len(part) - len(bytes.TrimRight(part, "\r\n"))
			}
			if cur > trace.MaxLineBytes+1 || (err != bufio.ErrBufferFull && cur > trace.MaxLineBytes) { // +1: a "\r" still to come off
				n := line + int64(bytes.Count(buf[:len(buf)-len(part)], []byte{'\n'}))
				return &trace.LineTooLongError{Line: n}
			}
			if err == bufio.ErrBufferFull {
				continue // the middle of a long line
			}
			cur = 0
			if err != nil || len(buf) >= chunkSize {
				break
			}
		}
		if len(buf) > 0 {
			select {
			case chunks <- chunk{first: line, data: buf}:
			case <-stop:
				return nil
			}
			line += int64(bytes.Count(buf, []byte{'\n'}))
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the trace: %w", err)
		}
	}
}

// WriteTable prints the result as a header and one row per backend.
func WriteTable(w io.Writer, r Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "requests %d, queries %d (%.2f per request), mean fanout %.2f, mean object size %.0f B, uncacheable %.2f%%\n",
		r.Requests, r.Queries, r.MeanQueriesPerRequest, r.MeanFanout, r.MeanObjectSize, r.UncacheablePct)
	exact := "exact"
	if !r.DistinctKeysExact {
		exact = "estimated, HyperLogLog ±0.8%"
	}
	fmt.Fprintf(bw, "distinct keys %d (%s)", r.DistinctKeys, exact)
	if r.DurationS > 0 {
		fmt.Fprintf(bw, ", duration %.1f s (%.1f requests/s)", r.DurationS, r.RatePerS)
	}
	if r.SkippedLines > 0 {
		fmt.Fprintf(bw, ", %d malformed lines skipped", r.SkippedLines)
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tquery %\treq % (pairs)\treq % (touching)\tmean batch\tmean fanout\trequests\tqueries\tdistinct keys\tmean size B\tuncacheable %\t")
	for _, b := range r.Backends {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%d\t%.0f\t%.2f\t\n",
			b.Name, b.QueryPct, b.RequestPctPairs, b.RequestPctTouching, b.MeanBatchSize, b.MeanFanout,
			b.Requests, b.Queries, b.DistinctKeys, b.MeanObjectSize, b.UncacheablePct)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}
