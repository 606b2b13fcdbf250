package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/sim"
)

// adviseCandidates are the implementable policies advise compares, with
// the idealized hedge as the bound (docs/hedging.md, "Which policy").
// (documents of the experiment file's policies list).
var adviseCandidates = []any{
	map[string]any{"dispatch": "random"},
	map[string]any{"dispatch": "jsq"},
	map[string]any{"dispatch": "psq"},
	map[string]any{"label": "hedge", "dispatch": map[string]any{"policy": "hedge", "budget": 1.0, "cancel": true}},
	map[string]any{"label": "d-hedge-5P", "dispatch": map[string]any{"policy": "d-hedge", "delay": "5ms", "percentile": 0.0, "budget": 10.0, "cancel": true}},
	map[string]any{"dispatch": "laedge"},
	map[string]any{"dispatch": "laedge-cc"},
	map[string]any{"dispatch": sim.Ideal},
}

// cmdAdvise answers which dispatch policy the bench finds best for a
// backend's measured jitter, or draws the heat map of what hedging can
// bring over PSQ.
func cmdAdvise(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("sim advise", stderr)
	measured := fs.String("measured", "", "a `backendload --measure --json` result: its stall_prob and stall_x")
	prob := fs.Float64("stall-prob", -1, "probability that a query stalls (instead of --measured)")
	stallX := fs.Float64("stall-x", -1, "a stall's duration in mean service times (instead of --measured)")
	replicas := fs.Int("replicas", 2, "replicas per shard")
	shards := fs.Int("shards", 10, "shards a request queries (all of them)")
	util := fs.Float64("utilization", 0.3, "load of the replicas without duplicates, in (0, 1)")
	requests := fs.Int("requests", 30000, "requests per arm (the default separates the best pick from the next at the documented example; docs/hedging.md)")
	seeds := fs.Int("seeds", 3, "seeds per arm")
	heat := fs.String("heatmap", "", "instead: sweep stall probability 1e-1..1e-4 x utilization 10..80% at --stall-x (default 15) and write the idealized hedge's and LÆDGE's gain over PSQ as heatmap.svg and heatmap.json into this folder")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// the flags behind the experiment's fields, named in the contract's errors
	flags := map[string]string{"shards": "--shards", "replicas": "--replicas", "requests": "--requests",
		"utilizations[0]": "--utilization", "hiccup_prob": "--stall-prob", "hiccup_ms": "--stall-x"}
	if *measured != "" {
		flags["hiccup_prob"], flags["hiccup_ms"] = "--measured's stall_prob", "--measured's stall_x"
		var err error
		if *prob, *stallX, err = sim.ReadMeasured(*measured); err != nil {
			return fmt.Errorf("--measured: %w", err)
		}
	}
	if *heat != "" && *stallX < 0 {
		*stallX = 15
	}
	if *heat == "" && (*prob == -1 || *stallX == -1) {
		return errors.New("give --measured FILE, or --stall-prob in [0, 1] and --stall-x")
	}
	if *seeds < 1 || *seeds > 100 {
		return fmt.Errorf("--seeds: %d is not between 1 and 100", *seeds)
	}
	seedList := make([]any, *seeds)
	for s := range seedList {
		seedList[s] = s + 1
	}
	// An experiment document (a stall of stall-x mean service times is
	// stall-x ms), read through the contract as the experiment files are.
	base := func(p float64, u float64, pols []any) (*sim.HedgingConfig, error) {
		c, err := sim.ReadHedging(map[string]any{"name": "advise", "shards": *shards, "replicas": *replicas, "workers": 1,
			"service": map[string]any{"dist": "exponential", "mean_ms": 1}, "hiccup_prob": p, "hiccup_ms": *stallX,
			"utilizations": []any{u}, "requests": *requests, "warmup": *requests / 10, "seeds": seedList, "policies": pols})
		var e *config.Error
		if errors.As(err, &e) && flags[e.Path] != "" {
			return nil, fmt.Errorf("%s: %s (%s)", flags[e.Path], e.Message, e.Path)
		}
		return c, err
	}
	if *heat != "" {
		return heatmap(*heat, *stallX, base, stdout)
	}
	c, err := base(*prob, *util, adviseCandidates)
	if err != nil {
		return err
	}
	_, sums, err := runArms(c, runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	sort.SliceStable(sums, func(i, j int) bool { return sums[i].Tail < sums[j].Tail })
	t := tails(sums, c.Utilizations[0])
	psq, ideal := t["psq"], t[sim.Ideal]
	fmt.Fprintf(stdout, "%d shards x %d replicas at %.0f%% load, stalls of %.3g P̄ with probability %.3g: P99 in P̄, median [range] of %d seeds x %d requests\n",
		*shards, *replicas, *util*100, *stallX, *prob, *seeds, *requests)
	var best, second *sim.BenchSummary
	for i := range sums {
		s := &sums[i]
		note := ""
		switch {
		case s.Policy == sim.Ideal:
			note = "  (the bound: not implementable)"
		case s.Unstable > 0:
			note = "  (unstable: work piles up)"
		case best == nil:
			best = s
			note = "  <- best"
		case second == nil:
			second = s
		}
		fmt.Fprintf(stdout, "  %-12s %7.1f  [%.1f–%.1f]%s\n", s.Policy, s.Tail, s.TailMin, s.TailMax, note)
	}
	if best == nil {
		fmt.Fprintln(stdout, "best: none (every implementable policy was unstable)")
		return nil
	}
	fmt.Fprintf(stdout, "best: %s, P99 %.1f P̄: %+.0f%% against psq (%.1f); the idealized hedge reaches %.1f\n",
		best.Policy, best.Tail, 100*(best.Tail-psq)/psq, psq, ideal)
	fmt.Fprintln(stdout, separation(best, second, *seeds))
	return nil
}

// tails is each policy's tail at utilization u.
func tails(sums []sim.BenchSummary, u float64) map[string]float64 {
	t := map[string]float64{}
	for _, s := range sums {
		if s.Utilization == u {
			t[s.Policy] = s.Tail
		}
	}
	return t
}

// separation says whether the seeds separate the best policy from the
// runner-up: a pick whose range overlaps the next one's is not established.
func separation(best, second *sim.BenchSummary, seeds int) string {
	switch {
	case second == nil:
		return "(no other stable policy)"
	case seeds < 3:
		return fmt.Sprintf("not established: %d seed(s) give no spread; run --seeds 3 or more", seeds)
	case best.TailMax < second.TailMin:
		return fmt.Sprintf("separated: every seed of %s is below every seed of %s (%.1f–%.1f against %.1f–%.1f)",
			best.Policy, second.Policy, best.TailMin, best.TailMax, second.TailMin, second.TailMax)
	}
	return fmt.Sprintf("not separated from %s: their seeds' ranges overlap (%.1f–%.1f against %.1f–%.1f); run more --seeds or --requests before choosing",
		second.Policy, best.TailMin, best.TailMax, second.TailMin, second.TailMax)
}

// runArms runs every arm of c (policy × utilization × seed) on par
// goroutines and returns the runs in arm order and their summaries.
func runArms(c *sim.HedgingConfig, par int) ([]sim.BenchRun, []sim.BenchSummary, error) {
	type arm struct {
		p sim.BenchPolicy
		u float64
		s uint64
	}
	var arms []arm
	for _, p := range c.Policies {
		for _, u := range c.Utilizations {
			for _, s := range c.Seeds {
				arms = append(arms, arm{p, u, s})
			}
		}
	}
	runs := make([]sim.BenchRun, len(arms))
	errs := make([]error, len(arms))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				runs[i], errs[i] = c.RunBench(arms[i].p, arms[i].u, arms[i].s)
			}
		}()
	}
	for i := range arms {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return runs, sim.Summarize(runs), nil
}

// heatCell is one point of the heat map.
type heatCell struct {
	StallProb   float64 `json:"stall_prob"`
	Utilization float64 `json:"utilization"`
	PSQ         float64 `json:"psq_p99"`
	Ideal       float64 `json:"ideal_p99"`
	Laedge      float64 `json:"laedge_p99"`
	DHedge      float64 `json:"dhedge_p99"`
	// Gains over PSQ: (psq - x) / psq.
	IdealGain  float64 `json:"ideal_gain"`
	LaedgeGain float64 `json:"laedge_gain"`
	DHedgeGain float64 `json:"dhedge_gain"`
}

func heatmap(dir string, stallX float64, base func(float64, float64, []any) (*sim.HedgingConfig, error), stdout io.Writer) error {
	probs := []float64{1e-1, 1e-2, 1e-3, 1e-4}
	utils := []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}
	pols := []any{adviseCandidates[2], adviseCandidates[4], adviseCandidates[5], adviseCandidates[7]}
	var cells []heatCell
	for _, p := range probs {
		c, err := base(p, utils[0], pols)
		if err != nil {
			return err
		}
		c.Utilizations = utils
		_, sums, err := runArms(c, runtime.GOMAXPROCS(0))
		if err != nil {
			return err
		}
		for _, u := range utils {
			t := tails(sums, u)
			h := heatCell{StallProb: p, Utilization: u, PSQ: t["psq"], Ideal: t[sim.Ideal], Laedge: t["laedge"], DHedge: t["d-hedge-5P"]}
			h.IdealGain, h.LaedgeGain, h.DHedgeGain = (h.PSQ-h.Ideal)/h.PSQ, (h.PSQ-h.Laedge)/h.PSQ, (h.PSQ-h.DHedge)/h.PSQ
			cells = append(cells, h)
		}
		fmt.Fprintf(stdout, "stall probability %g done\n", p)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := replay.WriteJSON(filepath.Join(dir, "heatmap.json"), cells); err != nil {
		return err
	}
	svg := heatSVG(cells, probs, utils, stallX)
	if err := os.WriteFile(filepath.Join(dir, "heatmap.svg"), []byte(svg), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(dir, "heatmap.svg"), filepath.Join(dir, "heatmap.json"))
	return nil
}

// heatSVG draws three heat maps side by side (the idealized hedge's,
// LÆDGE's and d-hedge's P99 gain over PSQ), darker for more gain, each
// cell labelled.
func heatSVG(cells []heatCell, probs, utils []float64, stallX float64) string {
	const cw, ch, left, top = 56, 36, 70, 50
	panels := []string{"idealized hedge", "laedge", "d-hedge (d = 5 P̄)"}
	w := left + len(panels)*(len(utils)*cw+40)
	h := top + len(probs)*ch + 60
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">P99 gain over PSQ (stall %.3g P̄, replicas as given; darker is more)</text>`+"\n", left, stallX)
	for k, name := range panels {
		x0 := left + k*(len(utils)*cw+40)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x0, top-8, name)
		for i, p := range probs {
			y := top + i*ch
			if k == 0 {
				fmt.Fprintf(&b, `<text x="4" y="%d">p=%g</text>`+"\n", y+ch/2+4, p)
			}
			for j, u := range utils {
				var g float64
				for _, c := range cells {
					if c.StallProb == p && c.Utilization == u {
						g = []float64{c.IdealGain, c.LaedgeGain, c.DHedgeGain}[k]
					}
				}
				shade := int(255 - 255*math.Max(0, math.Min(1, g/0.6)))
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="rgb(%d,%d,255)" stroke="white"/>`+"\n", x0+j*cw, y, cw, ch, shade, shade)
				color := "black"
				if shade < 110 {
					color = "white"
				}
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="%s">%+.0f%%</text>`+"\n", x0+j*cw+cw/2, y+ch/2+4, color, 100*g)
			}
		}
		for j, u := range utils {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%.0f%%</text>`+"\n", x0+j*cw+cw/2, top+len(probs)*ch+16, u*100)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">utilization</text>`+"\n", x0+len(utils)*cw/2-30, top+len(probs)*ch+34)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
