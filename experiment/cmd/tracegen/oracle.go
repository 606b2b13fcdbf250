package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/feasibility"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/cpuprofile"
)

// oracleInput reads the scenario's timeline for the oracle's analysis
// (feasibility.Analyse): its capacity changes and request-rate schedule.
func oracleInput(sc *scenario.Scenario, topo *config.Topology, tracePath, appID string, duration time.Duration, seed uint64) (feasibility.Input, error) {
	in := feasibility.Input{Topology: topo, AppServer: appID, TracePath: tracePath, Duration: duration}
	if duration <= 0 {
		return in, errors.New("--trace needs --duration (the part of the trace the run replays)")
	}
	if topo.PartitionedAppServer(appID) == nil {
		return in, fmt.Errorf("--app-server: no partitioned app server %q in the topology", appID)
	}
	if sc == nil {
		return in, nil
	}
	changes, err := expand(sc, "--trace", duration, seed)
	in.Changes, in.Rates = changes, sc.RateSchedule()
	return in, err
}

// expand is the scenario's timeline over duration, its random walks seeded
// by the file's seed, else seed; flagName names what needs it.
func expand(sc *scenario.Scenario, flagName string, duration time.Duration, seed uint64) ([]scenario.Change, error) {
	if need := sc.NeedsInitial(); len(need) > 0 {
		return nil, fmt.Errorf("%s: the random walk of %s.%s starts from the backend's current value; give it an initial value",
			flagName, need[0].Backend, need[0].Field)
	}
	if sc.Seed != nil {
		seed = *sc.Seed
	}
	return sc.Expand(duration, seed, nil)
}

// finite is v, or nil (JSON null) when it is infinite.
func finite(v float64) any {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return v
}

// feasibilityReport prints, for every phase of the scenario, the cache each
// backend needs to stay under its capacity, whether the budget covers them
// all at once, the oracle's allocation and predictions
// (experiment/feasibility) and the scenario's class.
func feasibilityReport(w, stderr io.Writer, sc *scenario.Scenario, topo *config.Topology, tracePath, appID string,
	duration time.Duration, seed uint64, asJSON, lookahead bool) error {
	in, err := oracleInput(sc, topo, tracePath, appID, duration, seed)
	if err != nil {
		return err
	}
	variant := feasibility.Foresight
	if !lookahead {
		variant = feasibility.Reactive
	}
	rep, err := feasibility.Analyse(in, feasibility.Options{Variants: []string{variant}})
	if err != nil {
		return err
	}
	sched := rep.Schedules[variant]
	results := rep.Results
	phases := make([]feasibility.Phase, len(results))
	rateChanges := false
	for i, r := range results {
		phases[i] = r.Phase
		rateChanges = rateChanges || r.RateFactor != 1
	}
	for _, ph := range feasibility.UncarriedRates(phases) {
		fmt.Fprintf(stderr, "warning: %v–%v: the scenario's request rate is ×%g, but the trace's query rate there is not: was it synthesized with --rate-schedule %s?\n",
			ph.Start, ph.End, ph.RateFactor, scenario.RateScheduleSpec(sc.RateSchedule()))
	}
	sloMs := float64(rep.SLO.SLO) / float64(time.Millisecond)
	if asJSON {
		return printJSON(w, reportJSON(rep, sched))
	}
	fmt.Fprintf(w, "feasibility: app server %s, budget %d MB, floor %d MB, %d app server(s); miss-ratio curves and query rates per phase from %s\n",
		rep.AppServer, rep.Budget, rep.Floor, rep.AppServers, tracePath)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rateCol := ""
	if rateChanges {
		rateCol = "request rate\t"
	}
	fmt.Fprintln(tw, "phase\t"+rateCol+"need MB (per backend)\ttotal\tfeasible\tbest worst util\tconfigured worst util\toracle MB at start\tP99 ms (predicted, steady: best / configured)\t")
	infeasible := 0
	for i, r := range results {
		var parts []string
		for _, b := range rep.Backends {
			parts = append(parts, b.Name+"="+mbOrInf(r.Need[b.Name]))
		}
		ok := "yes"
		if !r.Feasible {
			ok = "NO"
			infeasible++
		}
		rate := ""
		if rateChanges {
			rate = "×" + strconv.FormatFloat(r.RateFactor, 'g', -1, 64) + "\t"
		}
		fmt.Fprintf(tw, "%s–%s\t%s%s\t%s/%d\t%s\t%.2f\t%.2f\t%s\t%s / %s\t\n", r.Start, r.End, rate, strings.Join(parts, " "), mbOrInf(r.NeedTotal), rep.Budget, ok,
			r.MinMaxWorst, r.Even, fmtAlloc(sched.At(r.Start)), fmtMs(rep.Steady[i].OracleP99Ms), fmtMs(rep.Steady[i].ConfiguredP99Ms))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if infeasible > 0 {
		fmt.Fprintf(w, "%d of %d phases are infeasible: no allocation of %d MB keeps every backend under its capacity\n", infeasible, len(results), rep.Budget)
	} else {
		fmt.Fprintf(w, "every phase is feasible: some allocation of %d MB keeps every backend under its capacity\n", rep.Budget)
	}
	fmt.Fprintf(w, "class: %s (the best allocation's hardest phase loads a backend to %.2f of its capacity; margin ≤ %g, tight ≤ %g, infeasible above)\n",
		rep.Class, rep.Worst, feasibility.MarginUtilization, feasibility.FeasibleUtilization)
	fmt.Fprintf(w, "transient model, %s ms SLO: the oracle's schedule (%s, %d changes) violates it on %.1f%% of the series' points (predicted), the configured allocation on %.1f%%\n",
		fmtMs(sloMs), variant, len(sched.Steps), sched.Predicted.Pct, rep.ConfiguredPredicted.Pct)
	return nil
}

// fmtAlloc is an allocation as "name=MB ..." in name order.
func fmtAlloc(mb map[string]int) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(mb)) {
		parts = append(parts, n+"="+strconv.Itoa(mb[n]))
	}
	return strings.Join(parts, " ")
}

// mbOrInf is a need in MB: ∞ (negative) when no cache is enough.
func mbOrInf(mb int) string {
	if mb < 0 {
		return "∞"
	}
	return strconv.Itoa(mb)
}

// fmtMs prints a predicted latency: ∞ when overloaded.
func fmtMs(v float64) string {
	if math.IsInf(v, 1) {
		return "∞"
	}
	prec := 2
	if v >= 100 {
		prec = 0
	} else if v >= 10 {
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

type stepJSON struct {
	AtS float64        `json:"at_s"`
	MB  map[string]int `json:"mb"`
}

type scheduleJSON struct {
	Steps                 []stepJSON `json:"steps"`
	PredictedViolationPct float64    `json:"predicted_violation_pct"`
}

func scheduleOf(s *feasibility.Schedule) scheduleJSON {
	out := scheduleJSON{PredictedViolationPct: s.Predicted.Pct}
	for _, st := range s.Steps {
		out.Steps = append(out.Steps, stepJSON{AtS: st.At.Seconds(), MB: st.MB})
	}
	return out
}

// reportJSON is the analysis as scenario check --json prints it: per phase
// the load model's verdict, the oracle's allocation at the phase's start
// (sched; nil: the steady-state best) and the steady-state predictions.
func reportJSON(rep *feasibility.Report, sched *feasibility.Schedule) map[string]any {
	type row struct {
		StartS      float64        `json:"start_s"`
		EndS        float64        `json:"end_s"`
		Capacity    map[string]any `json:"capacity_qps"`
		Load        map[string]any `json:"configured_load_qps"`
		NeedMB      map[string]int `json:"need_mb"`
		NeedTotal   int            `json:"need_total_mb"`
		Feasible    bool           `json:"feasible"`
		MinMaxMB    map[string]int `json:"min_max_mb"`
		BestWorst   any            `json:"oracle_worst_utilization"`
		Configured  any            `json:"configured_worst_utilization"`
		RateFactor  float64        `json:"request_rate_factor"`
		QueryRate   map[string]any `json:"query_rate_qps"`
		SteadyMB    map[string]int `json:"steady_mb"`
		OracleMB    map[string]int `json:"oracle_mb"`
		SteadyP99   any            `json:"oracle_predicted_p99_ms"`
		ConfP99     any            `json:"configured_predicted_p99_ms"`
		MinMaxP99   any            `json:"min_max_predicted_p99_ms"`
		SteadyRho   any            `json:"oracle_predicted_utilization"`
		ConfRho     any            `json:"configured_predicted_utilization"`
		OracleMeets any            `json:"oracle_meets_slo"`
	}
	sloMs := float64(rep.SLO.SLO) / float64(time.Millisecond)
	var rows []row
	for i, r := range rep.Results {
		caps, loads, rates := map[string]any{}, map[string]any{}, map[string]any{}
		for _, b := range rep.Backends {
			caps[b.Name] = finite(r.Capacity[b.Name])
			pb := r.Phase.Demand(b)
			loads[b.Name] = pb.Load(rep.Configured[b.Name])
			rates[b.Name] = pb.CacheableRate + pb.UncacheableRate
		}
		st := rep.Steady[i]
		alloc := st.Best
		if sched != nil {
			alloc = sched.At(r.Start)
		}
		rows = append(rows, row{r.Start.Seconds(), r.End.Seconds(), caps, loads, r.Need, r.NeedTotal, r.Feasible, r.MinMax,
			finite(r.MinMaxWorst), finite(r.Even), r.RateFactor, rates, st.Best, alloc,
			finite(st.OracleP99Ms), finite(st.ConfiguredP99Ms), finite(st.MinMaxP99Ms), finite(st.OracleRho), finite(st.ConfiguredRho),
			st.OracleP99Ms <= sloMs})
	}
	out := map[string]any{"app_server": rep.AppServer, "app_servers": rep.AppServers, "budget_mb": rep.Budget, "floor_mb": rep.Floor,
		"configured_mb": rep.Configured, "slo_ms": sloMs, "phases": rows, "class": rep.Class, "worst_utilization": finite(rep.Worst),
		"thresholds":                         map[string]float64{"margin": feasibility.MarginUtilization, "feasible": feasibility.FeasibleUtilization},
		"configured_predicted_violation_pct": rep.ConfiguredPredicted.Pct, "series_points": rep.ConfiguredPredicted.Points}
	if sched != nil {
		out["schedule"] = scheduleOf(sched)
		out["variant"] = sched.Variant
	}
	return out
}

// cmdOracle computes the oracle's schedules for every partitioned app
// server of a run and writes them as one JSON file: what the oracle
// allocation policy applies (controller.run.oracle), and the scenario's
// analysis beside them.
func cmdOracle(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("oracle", "tracegen oracle --topology FILE --trace FILE --duration D [--scenario FILE] [--seed N] [--variants foresight,reactive] [--feasible-only] [--series] --out FILE", stderr)
	topoPath := fs.String("topology", "", "topology file of the run (required)")
	tracePath := fs.String("trace", "", "trace the run replays (required)")
	duration := fs.Duration("duration", 0, "the run's length (required)")
	scPath := fs.String("scenario", "", "capacity scenario the run applies (default: none)")
	seed := fs.Uint64("seed", 1, "seed of the scenario's random walks when the file has none (the run's)")
	variants := fs.String("variants", strings.Join(feasibility.Variants, ","), "schedules to compute: foresight (the future known in advance) and/or reactive (each phase learnt when it starts)")
	feasibleOnly := fs.Bool("feasible-only", false, "compute the schedules only when the run is feasible (margin or tight): an infeasible run's file has its class and phases, no schedule (most of the analysis' time is the schedule searches)")
	series := fs.Bool("series", false, "also write, per variant, the transient model's prediction of every point of the SLO series")
	out := fs.String("out", "-", "write the JSON here (- for stdout); written whole or not at all")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the analysis here (go tool pprof)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if err := required(fs, "topology", "trace", "duration"); err != nil {
		return err
	}
	if *duration <= 0 {
		return fmt.Errorf("--duration: %v must be positive", *duration)
	}
	vs, err := parseVariants(*variants)
	if err != nil {
		return err
	}
	topo, err := config.LoadTopology(*topoPath)
	if err != nil {
		return err
	}
	stopProfile, err := cpuprofile.Start(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var sc *scenario.Scenario
	if *scPath != "" {
		if sc, err = loadScenario(*scPath, topo, *duration, func(w string) { fmt.Fprintln(stderr, "warning:", w) }); err != nil {
			return err
		}
	}
	first, err := oracleDoc(topo, sc, *tracePath, *duration, *seed, vs, *feasibleOnly, *series)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(first, "", " ")
	if err != nil {
		return err
	}
	_, err = writeOut(*out, stdout, stderr, func(w io.Writer) (int64, error) {
		n, err := w.Write(append(b, '\n'))
		return int64(n), err
	})
	return err
}

// parseVariants reads --variants: a comma-separated list of
// feasibility.Variants, at least one.
func parseVariants(list string) ([]string, error) {
	var vs []string
	for _, v := range strings.Split(list, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if v != feasibility.Foresight && v != feasibility.Reactive {
			return nil, fmt.Errorf("--variants: %q is not %s", v, strings.Join(feasibility.Variants, " or "))
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return nil, errors.New("--variants: give at least one")
	}
	return vs, nil
}

// oracleDoc is tracegen oracle's document: the scenario's analysis
// (reportJSON) and every partitioned app server's schedules and
// candidates, one analysis per kind of app server (budget, floor,
// partitions).
func oracleDoc(topo *config.Topology, sc *scenario.Scenario, tracePath string, duration time.Duration, seed uint64,
	vs []string, feasibleOnly, series bool) (map[string]any, error) {
	apps, candidatesByApp := map[string]any{}, map[string]any{}
	var first map[string]any
	byKind := map[string]*feasibility.Report{}
	skipped := false
	for _, id := range topo.AppServerIDs() {
		app, _ := topo.AppServer(id)
		if app.CacheMode != config.CachePartitioned {
			continue
		}
		kind := fmt.Sprint(app.CacheBudgetMB, app.Controller.MinPartitionMB, app.InitialAllocationMB())
		rep := byKind[kind]
		if rep == nil {
			in, err := oracleInput(sc, topo, tracePath, id, duration, seed)
			if err != nil {
				return nil, err
			}
			if rep, err = feasibility.Analyse(in, feasibility.Options{Variants: vs, Candidates: true, FeasibleOnly: feasibleOnly}); err != nil {
				return nil, err
			}
			byKind[kind] = rep
		}
		sch := map[string]any{}
		for _, v := range vs {
			s := rep.Schedules[v]
			if s == nil {
				skipped = true // --feasible-only on an infeasible run
				continue
			}
			j := map[string]any{"steps": scheduleOf(s).Steps, "predicted_violation_pct": s.Predicted.Pct}
			if series {
				j["series"] = seriesJSON(rep.Series(s))
			}
			sch[v] = j
		}
		if len(rep.Candidates) > 0 {
			// the oracle's candidates, in order, for a judge on the
			// simulator (robinhood-testbed; docs/algorithms.md, "Judged in the
			// simulator")
			var cands []map[string]any
			for _, c := range rep.Candidates {
				cands = append(cands, map[string]any{"name": c.Name, "steps": scheduleOf(c.Schedule).Steps,
					"predicted_violation_pct": c.Schedule.Predicted.Pct})
			}
			candidatesByApp[id] = cands
		}
		apps[id] = sch
		if first == nil {
			first = reportJSON(rep, nil)
			if series {
				first["configured_series"] = seriesJSON(rep.Series(nil))
			}
		}
	}
	if first == nil {
		return nil, errors.New("--topology: no partitioned app server: the oracle allocates partitions")
	}
	first["app_server_schedules"] = apps
	if len(candidatesByApp) > 0 {
		first["app_server_candidates"] = candidatesByApp
	}
	first["variants"] = vs
	if skipped {
		// what was asked, and why an app server has no schedule
		first["schedules_skipped"] = "the run is infeasible and --feasible-only was given: no schedule"
	}
	delete(first, "app_server")
	return first, nil
}

// seriesJSON is a predicted SLO series for JSON (infinite P99s as null).
func seriesJSON(pts []feasibility.SeriesPoint) []map[string]any {
	out := make([]map[string]any, len(pts))
	for i, p := range pts {
		out[i] = map[string]any{"t_s": p.T.Seconds(), "p99_ms": finite(p.P99Ms), "slow": p.Slow, "violation_prob": p.ViolationProb, "rho": p.Rho}
	}
	return out
}
