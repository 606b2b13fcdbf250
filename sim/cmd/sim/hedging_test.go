package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/sim"
)

const tinyBench = `
name: tiny
shards: 3
replicas: 2
workers: 1
service: {dist: exponential, mean_ms: 1}
hiccup_prob: 0.01
hiccup_ms: 15
utilizations: [0.2]
requests: 500
warmup: 50
seeds: [1, 2]
policies:
  - dispatch: {policy: psq}
  - label: d-hedge-5P
    dispatch: {policy: d-hedge, delay: 5ms, percentile: 0}
  - dispatch: {policy: ideal}
`

func TestHedgingCommandWritesItsTables(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "tiny.yaml")
	os.WriteFile(exp, []byte(tinyBench), 0o644)
	var out, errb bytes.Buffer
	if err := mainErr([]string{"hedging", "--experiment", exp, "--out", filepath.Join(dir, "out")}, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "| load | psq | d-hedge-5P | ideal |") || !strings.Contains(out.String(), "| 20% |") {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, f := range []string{"runs.json", "summary.json", "table.md"} {
		if _, err := os.Stat(filepath.Join(dir, "out", f)); err != nil {
			t.Error(err)
		}
	}
	if err := mainErr([]string{"hedging", "--experiment", exp, "--parallel", "0"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "--parallel") {
		t.Fatalf("--parallel 0: %v", err)
	}
}

// The pick is called separated only when every seed of the best is below
// every seed of the runner-up.
func TestSeparation(t *testing.T) {
	a := &sim.BenchSummary{Policy: "a", Tail: 10, TailMin: 9, TailMax: 11}
	b := &sim.BenchSummary{Policy: "b", Tail: 12, TailMin: 11.5, TailMax: 13}
	c := &sim.BenchSummary{Policy: "c", Tail: 11, TailMin: 10.5, TailMax: 12}
	if s := separation(a, b, 3); !strings.HasPrefix(s, "separated") {
		t.Errorf("a below b: %s", s)
	}
	if s := separation(a, c, 3); !strings.HasPrefix(s, "not separated from c") {
		t.Errorf("a overlapping c: %s", s)
	}
	if s := separation(a, b, 2); !strings.HasPrefix(s, "not established") {
		t.Errorf("two seeds: %s", s)
	}
}

func TestAdviseNamesTheBestPolicy(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"advise", "--stall-prob", "0.01", "--stall-x", "15", "--shards", "3", "--requests", "500", "--seeds", "1", "--utilization", "0.2"}
	if err := mainErr(args, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "<- best") || !strings.Contains(out.String(), "against psq") ||
		!strings.Contains(out.String(), "not established: 1 seed(s) give no spread") {
		t.Fatalf("output:\n%s", out.String())
	}
	// The flags go through the experiment file's contract; its errors name the flag.
	notMeasured := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(notMeasured, []byte(`{"stall_prob": 0.1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ args, want string }{
		{"advise", "give --measured FILE"},
		{"advise --stall-prob 2 --stall-x 15", "--stall-prob: 2.0 is out of range [0, 1]"},
		{"advise --stall-prob 0.1 --stall-x -3", "--stall-x: -3.0 is out of range"},
		{"advise --stall-prob 0.1 --stall-x 15 --shards 0", "--shards: 0 is out of range [1, 10000]"},
		{"advise --stall-prob 0.1 --stall-x 15 --utilization 1", "--utilization: 1.0 is out of range (0, 1)"},
		{"advise --stall-prob 0.1 --stall-x 15 --seeds 0", "--seeds: 0 is not between 1 and 100"},
		{"advise --measured /nonexistent.json", "--measured"},
		{"advise --measured " + notMeasured, "--measured: " + notMeasured + " is not a `backendload --measure --json` result"},
	} {
		if err := mainErr(strings.Fields(bad.args), &out, &errb); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.args, err, bad.want)
		}
	}
}
