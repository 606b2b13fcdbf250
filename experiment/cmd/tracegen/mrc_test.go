package main

import (
	"container/list"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/mrc"
)

// bruteLRU replays a trace file through one LRU cache of every size per
// backend, exactly as docs/algorithms.md defines the model.
func bruteLRU(t *testing.T, path string, sizes []int64) map[string][]float64 {
	type entry struct {
		key  string
		size int64
	}
	type cache struct {
		used  int64
		order *list.List
		items map[string]*list.Element
	}
	caches := map[string][]*cache{}
	hits := map[string][]int{}
	total := map[string]int{}
	err := mrc.EachRequest(path, func(r *trace.Request) {
		for _, l := range r.Layers {
			for i := range l {
				q := &l[i]
				if caches[q.Backend] == nil {
					for range sizes {
						caches[q.Backend] = append(caches[q.Backend], &cache{order: list.New(), items: map[string]*list.Element{}})
					}
					hits[q.Backend] = make([]int, len(sizes))
				}
				for j, k := range q.Keys {
					if !q.Cacheable[j] {
						continue
					}
					total[q.Backend]++
					for s, c := range caches[q.Backend] {
						if e, ok := c.items[k]; ok {
							hits[q.Backend][s]++
							it := e.Value.(*entry)
							c.used += q.Sizes[j] - it.size
							it.size = q.Sizes[j]
							c.order.MoveToFront(e)
						} else {
							c.items[k] = c.order.PushFront(&entry{k, q.Sizes[j]})
							c.used += q.Sizes[j]
						}
						for c.used > sizes[s] {
							e := c.order.Back()
							it := e.Value.(*entry)
							c.order.Remove(e)
							delete(c.items, it.key)
							c.used -= it.size
						}
					}
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float64{}
	for b, h := range hits {
		for _, n := range h {
			out[b] = append(out[b], 1-float64(n)/float64(total[b]))
		}
	}
	return out
}

// tracegen mrc --format csv against a brute-force LRU on the same synthetic
// trace: exact mode equal (to the printed precision), sampled mode within
// the documented error.
func TestMRCAgainstBruteForceLRU(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	if code, _, stderr := tg("synth", "--out", path, "--requests", "20000", "--backends", "3", "--keys", "3000",
		"--zipf", "0.9", "--mean-size", "4096", "--seed", "5"); code != 0 {
		t.Fatal(stderr)
	}
	sizes := []int64{256 << 10, 1 << 20, 4 << 20, 16 << 20}
	want := bruteLRU(t, path, sizes)
	for _, c := range []struct {
		args  []string
		limit float64
	}{
		{nil, 1e-6},
		{[]string{"--sample", "0.5"}, 0.05},
	} {
		args := append([]string{"mrc", path, "--sizes", "256KiB,1MiB,4MiB,16MiB", "--format", "csv"}, c.args...)
		code, out, stderr := tg(args...)
		if code != 0 {
			t.Fatal(stderr)
		}
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(rows) != 1+len(want)*len(sizes) || strings.Join(rows[0], ",") != "backend,cache_bytes,miss_ratio" {
			t.Fatalf("csv %q: %v", out, err)
		}
		for _, r := range rows[1:] {
			b, _ := strconv.ParseInt(r[1], 10, 64)
			mr, _ := strconv.ParseFloat(r[2], 64)
			idx := -1
			for i, s := range sizes {
				if s == b {
					idx = i
				}
			}
			if idx < 0 || want[r[0]] == nil {
				t.Fatalf("unexpected row %v", r)
			}
			if d := mr - want[r[0]][idx]; d > c.limit || -d > c.limit {
				t.Errorf("%v: %s at %d bytes: %v, brute-force LRU %v", c.args, r[0], b, mr, want[r[0]][idx])
			}
		}
	}
}

func TestMRCOutputsAndErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	if code, _, stderr := tg("synth", "--out", path, "--requests", "500", "--backends", "2", "--seed", "1"); code != 0 {
		t.Fatal(stderr)
	}
	svg := filepath.Join(dir, "mrc.svg")
	code, out, stderr := tg("mrc", path, "--plot", svg)
	if code != 0 || !strings.Contains(out, "accesses") || !strings.Contains(out, "1GiB") {
		t.Fatalf("table: %d %q %s", code, out, stderr)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.HasPrefix(string(b), "<svg") || !strings.Contains(string(b), "polyline") {
		t.Fatalf("svg: %v", err)
	}
	if code, out, _ := tg("mrc", path, "--format", "json"); code != 0 || !strings.Contains(out, `"miss_ratio"`) {
		t.Fatalf("json: %q", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mrc", path, "--sizes", "lots"}, `--sizes: "lots" is not a byte size`},
		{[]string{"mrc", path, "--format", "xml"}, `--format: "xml" is not csv, table or json`},
		{[]string{"mrc", path, "--sample", "1.5"}, "--sample: 1.5 is not in [0, 1)"},
		{[]string{"mrc", filepath.Join(dir, "missing.jsonl")}, "no such file"},
	} {
		code, _, stderr := tg(c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %d %q, want %q", c.args, code, stderr, c.want)
		}
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"t\": 0, \"d\": []}\nnot json\n"), 0o644)
	if code, _, stderr := tg("mrc", bad); code == 0 || !strings.Contains(stderr, "line 2") {
		t.Errorf("bad line: %d %q", code, stderr)
	}
}

// scenario check --trace: phase by phase, the cache each backend needs and
// whether the budget covers it; a capacity below what any cache leaves is
// reported infeasible.
func TestScenarioFeasibility(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.jsonl")
	if code, _, stderr := tg("synth", "--out", tr, "--duration", "20s", "--rate", "200", "--backends", "2",
		"--backend-names", "a,b", "--keys", "2000", "--mean-size", "8192", "--seed", "3"); code != 0 {
		t.Fatal(stderr)
	}
	topo := filepath.Join(dir, "topology.yaml")
	os.WriteFile(topo, []byte(`backends:
  - {id: 0, name: a, type: kv, limits: {rate: 5000}, replicas: [{grpc: "127.0.0.1:1", http: "127.0.0.1:6"}]}
  - {id: 1, name: b, type: kv, limits: {rate: 5000}, replicas: [{grpc: "127.0.0.1:2", http: "127.0.0.1:7"}]}
app_servers:
  - {id: app0, http: "127.0.0.1:3", cache_budget_mb: 32, partitions: {a: "127.0.0.1:4", b: "127.0.0.1:5"},
     controller: {min_partition_mb: 8}}
`), 0o644)
	sc := filepath.Join(dir, "s.yaml")
	os.WriteFile(sc, []byte(`events:
  - {kind: set, at: 5s, backend: a, set: {rate: 1}}
  - {kind: set, at: 10s, backend: a, set: {rate: 5000}}
`), 0o644)
	code, out, stderr := tg("scenario", "check", sc, "--topology", topo, "--duration", "20s", "--trace", tr)
	if code != 0 {
		t.Fatal(stderr)
	}
	lines := strings.Split(out, "\n")
	if !strings.Contains(out, "1 of 3 phases are infeasible") || !strings.Contains(lines[4], "5s–10s") ||
		!strings.Contains(lines[4], "a=∞") || !strings.Contains(lines[4], "NO") || !strings.Contains(lines[3], "yes") {
		t.Fatalf("%s", out)
	}
	code, out, _ = tg("scenario", "check", sc, "--topology", topo, "--duration", "20s", "--trace", tr, "--json")
	if code != 0 || !strings.Contains(out, `"oracle_mb"`) || !strings.Contains(out, `"feasible": false`) {
		t.Fatalf("%s", out)
	}
	if code, _, stderr := tg("scenario", "check", sc, "--topology", topo, "--trace", tr); code == 0 || !strings.Contains(stderr, "--trace needs --duration") {
		t.Fatalf("%d %s", code, stderr)
	}
}
