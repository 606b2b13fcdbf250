package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/sim"
)

// cmdHedging runs a hedging bench experiment (docs/hedging.md): every
// policy at every utilization with every seed, in parallel.
func cmdHedging(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("sim hedging", stderr)
	exp := fs.String("experiment", "", "hedging experiment file, e.g. examples/hedging/laedge.yaml (required)")
	out := fs.String("out", "", "folder for runs.json, summary.json and table.md (default: print only)")
	par := fs.Int("parallel", runtime.GOMAXPROCS(0), "arms run at once")
	requests := fs.Int("requests", 0, "override the experiment's requests per arm (a quick look)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := firstFailed(check{*exp == "", "--experiment is required"},
		check{*par < 1, fmt.Sprintf("--parallel: %d must be at least 1", *par)}); err != nil {
		return err
	}
	c, err := sim.LoadHedging(*exp)
	if err != nil {
		return err
	}
	if *requests > 0 {
		c.Requests = *requests
		c.Warmup = min(c.Warmup, *requests/10)
		if err := c.Validate(); err != nil {
			return fmt.Errorf("--requests: %w", err)
		}
	}
	start := time.Now()
	runs, sums, err := runArms(c, *par)
	if err != nil {
		return err
	}
	arms := len(runs)
	table := c.Table(sums)
	unit := fmt.Sprintf("multiples of the mean service time %.3g ms", c.MeanService())
	if c.Unit == "ms" {
		unit = "ms"
	}
	fmt.Fprintf(stdout, "%s: P%g latency in %s (median over %d seeds, range), %d arms in %.0f s\n\n%s",
		c.Name, c.Percentile, unit, len(c.Seeds), arms, time.Since(start).Seconds(), table)
	if *out == "" {
		return nil
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]any{"runs.json": runs, "summary.json": sums} {
		if err := replay.WriteJSON(filepath.Join(*out, name), v); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(*out, "table.md"), []byte(table), 0o644)
}
