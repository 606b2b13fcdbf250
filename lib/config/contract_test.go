package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/schema"
)

// casesDir holds the cases both readers are tested on (the Python reader
// runs the same files in lib/python/tests).
var casesDir = filepath.Join("..", "..", "tests", "config")

func schemaFor(kind string) string {
	switch kind {
	case "experiment":
		return schema.Experiment
	case "hedging":
		return schema.Hedging
	}
	return schema.Topology
}

// Every invalid case is rejected with exactly the error of its "# expect:"
// line, the same text the Python reader gives.
func TestInvalidCases(t *testing.T) {
	for _, kind := range []string{"topology", "experiment", "hedging"} {
		files, _ := filepath.Glob(filepath.Join(casesDir, kind, "invalid", "*.yaml"))
		if len(files) < 5 {
			t.Fatalf("%s: only %d invalid cases found", kind, len(files))
		}
		for _, f := range files {
			t.Run(kind+"/"+filepath.Base(f), func(t *testing.T) {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				first, _, _ := strings.Cut(string(b), "\n")
				want, ok := strings.CutPrefix(first, "# expect: ")
				if !ok {
					t.Fatalf("first line is not '# expect: ...'")
				}
				doc, err := ParseYAML(b, kind)
				if err == nil {
					_, err = Default().Read(schemaFor(kind), doc, "")
				}
				if err == nil {
					t.Fatalf("accepted; want %q", want)
				}
				if err.Error() != want {
					t.Fatalf("error\n  %s\nwant\n  %s", err, want)
				}
			})
		}
	}
}

// Every valid case normalizes to exactly its .normalized.json (written by
// the Python reader): the same defaults, shorthands and number types.
func TestValidCasesNormalize(t *testing.T) {
	for _, kind := range []string{"topology", "experiment", "hedging"} {
		files, _ := filepath.Glob(filepath.Join(casesDir, kind, "valid", "*.yaml"))
		if len(files) == 0 {
			t.Fatalf("%s: no valid cases", kind)
		}
		for _, f := range files {
			t.Run(kind+"/"+filepath.Base(f), func(t *testing.T) {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				doc, err := ParseYAML(b, kind)
				if err != nil {
					t.Fatal(err)
				}
				got, err := Default().Read(schemaFor(kind), doc, "")
				if err != nil {
					t.Fatal(err)
				}
				wb, err := os.ReadFile(strings.TrimSuffix(f, ".yaml") + ".normalized.json")
				if err != nil {
					t.Fatal(err)
				}
				dec := json.NewDecoder(strings.NewReader(string(wb)))
				dec.UseNumber()
				var want any
				if err := dec.Decode(&want); err != nil {
					t.Fatal(err)
				}
				if diff := sameDoc(got, want, ""); diff != "" {
					t.Fatal(diff)
				}
				if kind == "hedging" {
					return // the bench's own checks are sim.LoadHedging's (sim/hedging_test.go)
				}
				if kind == "topology" {
					if _, err := TopologyFrom(doc); err != nil {
						t.Fatal(err)
					}
				} else if _, err := ExperimentFrom(doc, "."); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// sameDoc compares a normalized document with the JSON the Python reader
// wrote, integers against integers and floats against floats.
func sameDoc(got, want any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path + ": not a mapping"
		}
		if len(g) != len(w) {
			return path + ": keys differ: " + keysOf(g) + " vs " + keysOf(w)
		}
		for k, wv := range w {
			if d := sameDoc(g[k], wv, join(path, k)); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path + ": lists differ"
		}
		for i := range w {
			if d := sameDoc(g[i], w[i], path+"["+string(rune('0'+i))+"]"); d != "" {
				return d
			}
		}
	case json.Number:
		s := string(w)
		if strings.ContainsAny(s, ".eE") || s == "Infinity" {
			f, _ := w.Float64()
			if g, ok := got.(float64); !ok || g != f {
				return path + ": got " + FormatValue(got) + ", want float " + s
			}
		} else {
			i, _ := w.Int64()
			if g, ok := got.(int64); !ok || g != i {
				return path + ": got " + FormatValue(got) + ", want integer " + s
			}
		}
	default:
		if !reflect.DeepEqual(got, want) {
			return path + ": got " + FormatValue(got) + ", want " + FormatValue(want)
		}
	}
	return ""
}

func keysOf(m map[string]any) string {
	b, _ := json.Marshal(m)
	return string(b)
}

func TestLoadExample(t *testing.T) {
	top, err := LoadTopology(filepath.Join("..", "..", "examples", "topology.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := top.AppServer("app0")
	if !ok {
		t.Fatal("app0 missing")
	}
	if got := a.Partitions["ratings"]; got.Addr != "127.0.0.1:11212" || got.InitialMB != 64 {
		t.Fatalf("long partition form: %+v", got)
	}
	if got := a.Partitions["catalog"]; got.Addr != "127.0.0.1:11211" || got.InitialMB != 0 {
		t.Fatalf("short partition form: %+v", got)
	}
	if a.BackendTimeout.D() != time.Second || a.RequestTimeout.D() != 2*time.Second {
		t.Fatalf("timeouts %v %v", a.BackendTimeout, a.RequestTimeout)
	}
	if a.Controller.Policy.Name != "robinhood" || a.Controller.Policy.Params["tax"] != 0.01 {
		t.Fatalf("controller policy: %+v", a.Controller.Policy)
	}
	if a.Dispatch.Policy != "random" || len(a.Dispatch.Params) != 0 {
		t.Fatalf("dispatch default: %+v", a.Dispatch)
	}
	if top.RBCServer.Window.D() != 5*time.Second || top.RBCServer.RingSize != 1_000_000 {
		t.Fatalf("rbc_server defaults: %+v", top.RBCServer)
	}
	b, ok := top.BackendByName("recommender")
	if !ok || b.ID != 2 || b.Limits != DefaultLimits() {
		t.Fatalf("BackendByName: %+v %v", b, ok)
	}
}

// A document that uses every field decodes into the Go types without
// loss: a schema property missing from a Go type fails the strict decode.
func TestGoTypesCoverTheSchema(t *testing.T) {
	for _, f := range []string{"shorthands", "example", "everything"} {
		p := filepath.Join(casesDir, "topology", "valid", f+".yaml")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if _, err := LoadTopology(p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatal(err)
	}
	l := DefaultLimits()
	l.HiccupProb = 2
	err := l.Validate()
	if err == nil || err.Error() != "hiccup_prob: 2.0 is out of range [0, 1]" {
		t.Fatalf("got %v", err)
	}
}

// The configured allocation, as the Python side computes it.
func TestInitialAllocationVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "vectors", "split.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Cases []struct {
			Fixed      map[string]int `json:"fixed"`
			Names      []string       `json:"names"`
			Total      int            `json:"total"`
			Allocation map[string]int `json:"allocation"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Cases) < 5 {
		t.Fatalf("vectors: %v", err)
	}
	for _, c := range v.Cases {
		a := AppServer{CacheBudgetMB: c.Total, Partitions: map[string]Partition{}}
		for _, n := range c.Names {
			a.Partitions[n] = Partition{InitialMB: c.Fixed[n]}
		}
		if got := a.InitialAllocationMB(); !reflect.DeepEqual(got, c.Allocation) {
			t.Errorf("%+v: got %v", c, got)
		}
	}
}

// generatedCase is one of tests/config/generated.json's files.
type generatedCase struct {
	Name, Kind, Head, Repeat, Tail, Expect string
	Times                                  int
}

func (c generatedCase) text() []byte {
	return []byte(c.Head + strings.Repeat(c.Repeat, c.Times) + c.Tail)
}

// The files too large to commit (tests/config/generated.json) are refused
// with exactly their error, from memory and from a file, whose reading
// stops at the bound; what each costs is logged (go test -v).
func TestGeneratedCasesAreRefusedWithinBounds(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(casesDir, "generated.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cases []generatedCase }
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Cases) < 3 {
		t.Fatalf("generated.json: %v, %d cases", err, len(doc.Cases))
	}
	for _, c := range doc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			text := c.text()
			path := filepath.Join(t.TempDir(), c.Name+".yaml")
			if err := os.WriteFile(path, text, 0o644); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := ParseYAML(text, c.Kind)
			if err == nil || err.Error() != c.Expect {
				t.Fatalf("ParseYAML: %v, want %q", err, c.Expect)
			}
			load := func() error { _, err := LoadTopology(path); return err }
			if c.Kind == "experiment" {
				load = func() error { _, err := LoadExperiment(path); return err }
			}
			if err := load(); err == nil || !strings.HasSuffix(err.Error(), ": "+c.Expect) {
				t.Fatalf("loading the file: %v, want it to end in %q", err, c.Expect)
			}
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes: refused twice in %v, %.1f MiB allocated", len(text), took, float64(allocated)/(1<<20))
			// The defect this holds off took gigabytes; reading a few megabytes
			// of YAML into nodes takes a few hundred at most.
			if allocated > 1<<30 {
				t.Fatalf("%.0f MiB allocated to refuse it", float64(allocated)/(1<<20))
			}
		})
	}
}
