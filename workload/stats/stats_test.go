package stats

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/testutil"
	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

func traceFile(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(testutil.RepoRoot(t), "tests", "traces", name)
}

func readFile(t *testing.T, path string, o Options) (Result, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Read(f, o)
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

// tests/traces/original.jsonl, worked out by hand:
//
//	39f00c48: in requests 0, 1, 3 with 2, 2, 1 queries; fanouts 2, 2, 3;
//	          keys 8d42…, 9914…, 48ef… (3); sizes sum 114768
//	b4fbebd8: in requests 0, 1, 3 with 1, 1, 2 queries; fanouts 2, 2, 3;
//	          keys 9914…, 3430…, ff01, ff02 (4); sizes sum 47290
//	7a1e0c22: in requests 2, 3 with 3, 1 queries; fanouts 1, 3;
//	          keys a1, a2, a3 (3); sizes sum 2560; one uncacheable
//
// 4 requests, 13 queries, 8 (request, backend) pairs.
func TestOriginalFormatHandComputed(t *testing.T) {
	res, err := readFile(t, traceFile(t, "original.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 4 || res.Queries != 13 || res.DistinctKeys != 10 || !res.DistinctKeysExact || res.DurationS != 0 {
		t.Fatalf("totals: %+v", res)
	}
	if !approx(res.MeanFanout, 2) || !approx(res.MeanQueriesPerRequest, 13.0/4) || !approx(res.MeanObjectSize, 164618.0/13) || !approx(res.UncacheablePct, 100.0/13) {
		t.Fatalf("means: %+v", res)
	}
	want := []Backend{
		{Name: "39f00c48", QueryPct: 500.0 / 13, RequestPctPairs: 37.5, RequestPctTouching: 75, MeanBatchSize: 5.0 / 3, MeanFanout: 7.0 / 3,
			Requests: 3, Queries: 5, DistinctKeys: 3, MeanObjectSize: 114768.0 / 5},
		{Name: "7a1e0c22", QueryPct: 400.0 / 13, RequestPctPairs: 25, RequestPctTouching: 50, MeanBatchSize: 2, MeanFanout: 2,
			Requests: 2, Queries: 4, DistinctKeys: 3, MeanObjectSize: 640, UncacheablePct: 25},
		{Name: "b4fbebd8", QueryPct: 400.0 / 13, RequestPctPairs: 37.5, RequestPctTouching: 75, MeanBatchSize: 4.0 / 3, MeanFanout: 7.0 / 3,
			Requests: 3, Queries: 4, DistinctKeys: 4, MeanObjectSize: 47290.0 / 4},
	}
	if len(res.Backends) != len(want) {
		t.Fatalf("backends: %+v", res.Backends)
	}
	for i, w := range want {
		g := res.Backends[i]
		if g.Name != w.Name || g.Requests != w.Requests || g.Queries != w.Queries || g.DistinctKeys != w.DistinctKeys ||
			!approx(g.QueryPct, w.QueryPct) || !approx(g.RequestPctPairs, w.RequestPctPairs) || !approx(g.RequestPctTouching, w.RequestPctTouching) ||
			!approx(g.MeanBatchSize, w.MeanBatchSize) || !approx(g.MeanFanout, w.MeanFanout) || !approx(g.MeanObjectSize, w.MeanObjectSize) ||
			!approx(g.UncacheablePct, w.UncacheablePct) {
			t.Errorf("backend %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// A backend queried in two layers of a request counts once for fanout and
// its queries form one batch; integer keys load as strings.
func TestLayersAndNumericKeys(t *testing.T) {
	res, err := readFile(t, traceFile(t, "layers_numeric_keys.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 2 || res.Queries != 5 || !approx(res.MeanFanout, 1.5) || res.DistinctKeys != 4 {
		t.Fatalf("totals: %+v", res)
	}
	o, u := res.Backends[0], res.Backends[1]
	if o.Name != "orders" || o.Requests != 2 || !approx(o.MeanBatchSize, 1.5) || !approx(o.MeanFanout, 1.5) || o.DistinctKeys != 2 {
		t.Fatalf("orders: %+v", o)
	}
	if u.Name != "users" || u.Requests != 1 || !approx(u.MeanBatchSize, 2) || !approx(u.MeanFanout, 2) || !approx(u.UncacheablePct, 50) || !approx(u.RequestPctPairs, 100.0/3) {
		t.Fatalf("users: %+v", u)
	}
}

// Every hand-written line in the original format survives a write and a
// re-read unchanged, and the re-written trace has the same statistics.
func TestRoundTripOriginalFormat(t *testing.T) {
	for _, name := range []string{"original.jsonl", "layers_numeric_keys.jsonl"} {
		raw, err := os.ReadFile(traceFile(t, name))
		if err != nil {
			t.Fatal(err)
		}
		var rewritten bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for n := 1; sc.Scan(); n++ {
			r, err := trace.Parse(sc.Bytes())
			if err != nil {
				t.Fatalf("%s line %d: %v", name, n, err)
			}
			if r.HasTs {
				t.Fatalf("%s line %d: the original format has no ts_ms", name, n)
			}
			out := trace.AppendJSON(nil, r)
			r2, err := trace.Parse(out)
			if err != nil {
				t.Fatalf("%s line %d: re-parse: %v", name, n, err)
			}
			if !reflect.DeepEqual(r, r2) {
				t.Fatalf("%s line %d: round trip changed the request:\n%+v\n%+v", name, n, r, r2)
			}
			rewritten.Write(out)
			rewritten.WriteByte('\n')
		}
		a, err := Read(bytes.NewReader(raw), Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Read(&rewritten, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: statistics changed by the round trip:\n%+v\n%+v", name, a, b)
		}
	}
	// The original release's very lines (lib/trace/trace_test.go) are in
	// original.jsonl: the first one starts the file.
	raw, _ := os.ReadFile(traceFile(t, "original.jsonl"))
	if !strings.HasPrefix(string(raw), `{"t": 0, "d": [{"39f00c48": {"S": [20881, 26109]`) {
		t.Fatal("original.jsonl does not start with the release's first line")
	}
}

func TestMalformedLines(t *testing.T) {
	_, err := readFile(t, traceFile(t, "bad_line3.jsonl"), Options{})
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || err.Error() != "line 3: d[0].x: S, U and C must have the same length (got 2, 1, 1)" {
		t.Fatalf("error = %v", err)
	}
	var bad []int64
	res, err := readFile(t, traceFile(t, "bad_line3.jsonl"), Options{SkipBad: true, OnBad: func(e *LineError) { bad = append(bad, e.Line) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 3 || res.SkippedLines != 1 || len(bad) != 1 || bad[0] != 3 {
		t.Fatalf("skip-bad: requests %d, skipped %d, reported %v", res.Requests, res.SkippedLines, bad)
	}
}

func synthTrace(t *testing.T, o synth.Options, n int64) []byte {
	t.Helper()
	g, err := synth.New(o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := g.Write(&buf, synth.Limit{Requests: n}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Parallel reading gives exactly the serial result, and with bad lines in
// several chunks it reports the first.
func TestParallelMatchesSerial(t *testing.T) {
	o := synth.DefaultOptions()
	o.Keys.Default = 2000
	raw := synthTrace(t, o, 4000) // several 1 MB chunks
	if len(raw) < 3*chunkSize {
		t.Fatalf("trace of %d bytes is too small for the test", len(raw))
	}
	serial, err := Read(bytes.NewReader(raw), Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	par, err := Read(bytes.NewReader(raw), Options{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(serial, par) {
		t.Fatal("parallel and serial statistics differ")
	}
	if serial.Requests != 4000 || serial.DurationS <= 0 || serial.RatePerS <= 0 {
		t.Fatalf("%+v", serial)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	for _, i := range []int{3500, 1200} { // 0-based
		lines[i] = "{not json}\n"
	}
	for _, w := range []int{1, 4} {
		_, err = Read(strings.NewReader(strings.Join(lines, "")), Options{Workers: w})
		if err == nil || !strings.HasPrefix(err.Error(), "line 1201: malformed JSON") {
			t.Fatalf("workers %d: error = %v, want line 1201", w, err)
		}
	}
}

func TestHyperLogLog(t *testing.T) {
	h := newHLL()
	const n = 500000
	for i := 0; i < n; i++ {
		h.add(hash("key-" + strconv.Itoa(i)))
	}
	if e := h.estimate(); math.Abs(e-n)/n > 0.03 {
		t.Fatalf("estimate %v of %d", e, n)
	}
	small := newHLL()
	for i := 0; i < 1000; i++ {
		small.add(hash(strconv.Itoa(i)))
		small.add(hash(strconv.Itoa(i)))
	}
	if e := small.estimate(); math.Abs(e-1000) > 30 {
		t.Fatalf("small estimate %v of 1000", e)
	}
	// Every merge path counts the union.
	mk := func(from, to int, sketch bool) *distinct {
		d := newDistinct()
		for i := from; i < to; i++ {
			d.add(strconv.Itoa(i))
		}
		if sketch {
			d.toSketch()
		}
		return d
	}
	for _, c := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		a := mk(0, 6000, c[0])
		a.merge(mk(3000, 9000, c[1]))
		got, exact := a.count()
		if exact != (!c[0] && !c[1]) || math.Abs(float64(got)-9000) > 270 {
			t.Errorf("merge %v: %d (exact %v), want 9000", c, got, exact)
		}
	}
}

func TestWriteTable(t *testing.T) {
	res, err := readFile(t, traceFile(t, "original.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"requests 4, queries 13 (3.25 per request), mean fanout 2.00", "distinct keys 10 (exact)", "req % (pairs)", "39f00c48", "38.46", "37.50", "75.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
