// Command tracegen synthesizes OneRF-like request traces, prints their
// structure, replays them open-loop against a topology's application servers,
// checks capacity scenarios and draws them from the scenario zoo
// (docs/workloads.md). 'tracegen -h' lists the commands, 'tracegen COMMAND -h'
// the flags of one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/replay"
	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/experiment/zoo"
	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/bytesize"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/workload/mrc"
	"github.com/robinhoodcache/robinhood/workload/stats"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

const usage = `Usage: tracegen <command> [flags]

Commands:
  synth           write a synthetic trace (OneRF-like structure, Zipf keys, heavy-tailed sizes)
  import          a synthesized trace whose backends' keys come from real key streams (--stream BACKEND=FILE)
  capture         write a memcached's 'watch fetchers' log (every lookup, for import's --stream) for a while
  stats FILE      print a trace's structure: the columns of the paper's Table 1 and more
  replay          replay a trace open-loop against a topology's application servers
  scenario check  validate a capacity scenario against a topology (with --trace: phase by phase
                  feasibility, the oracle's allocation and the scenario's class)
  scenario generate  draw a capacity scenario from the scenario zoo's families for a topology and trace
  mrc FILE        each backend's LRU miss ratio as a function of cache bytes (exact, or sampled)
  oracle          the oracle's allocation schedules for a run (with foresight and reactive), as JSON

Run 'tracegen <command> -h' for the flags of a command. docs/workloads.md has the details.
`

// errUsage marks a command line the flag package already explained.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// commands are tracegen's commands but scenario's; scenarioCommands are
// scenario's.
var (
	commands = map[string]func(args []string, stdout, stderr io.Writer) error{
		"synth": cmdSynth, "import": cmdImport, "capture": cmdCapture, "stats": cmdStats, "replay": cmdReplay,
		"mrc": cmdMRC, "oracle": cmdOracle,
	}
	scenarioCommands = map[string]func(args []string, stdout, stderr io.Writer) error{
		"check": cmdScenarioCheck, "generate": cmdScenarioGenerate, "seeds": cmdScenarioSeeds,
	}
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	f := commands[cmd]
	switch {
	case cmd == "scenario" && len(rest) > 0 && scenarioCommands[rest[0]] != nil:
		f, cmd, rest = scenarioCommands[rest[0]], "scenario "+rest[0], rest[1:]
	case cmd == "scenario":
		fmt.Fprintln(stderr, "Usage: tracegen scenario check FILE --topology FILE [--duration D] [--print] [--trace FILE [--json]]")
		fmt.Fprintln(stderr, "       tracegen scenario generate --topology FILE --trace FILE --duration D --seed N [--family NAME] [--out FILE]")
		fmt.Fprintln(stderr, "       tracegen scenario seeds [--json]")
		return 2
	case cmd == "-h" || cmd == "-help" || cmd == "--help" || cmd == "help":
		fmt.Fprint(stdout, usage)
		return 0
	case f == nil:
		fmt.Fprintf(stderr, "tracegen: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	err := f(rest, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "tracegen %s: %v\n", cmd, err)
	return 1
}

// parse parses flags that may come before or after positional arguments
// and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseNone parses a command line that takes no positional argument.
func parseNone(fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args)
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q", pos[0])
	}
	return err
}

// parseFile parses a command line that takes one positional argument (a
// file), printing the usage without one.
func parseFile(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		fs.Usage()
		return "", errUsage
	}
	return pos[0], nil
}

// given is the set of flags the command line gave, not empty.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() != "" })
	return set
}

// required is the error naming the first of the flags the command line did
// not give.
func required(fs *flag.FlagSet, names ...string) error {
	set := given(fs)
	for _, name := range names {
		if !set[name] {
			return fmt.Errorf("--%s is required", name)
		}
	}
	return nil
}

// loadScenario reads a scenario file and checks it against the topology's
// backends and their replicas; its warnings go to warn.
func loadScenario(path string, topo *config.Topology, duration time.Duration, warn func(string)) (*scenario.Scenario, error) {
	sc, warns, err := scenario.Load(path, topo.BackendNames(), duration)
	if err != nil {
		return nil, err
	}
	if _, err := sc.Replicas(topo); err != nil {
		return nil, err
	}
	for _, w := range warns {
		warn(w)
	}
	return sc, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeFile writes the file path (created, or truncated) with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// traceFlags are the flags synth and import share: the generator's
// (synth.Flags), the trace's length, --out and --describe.
type traceFlags struct {
	build    func() (synth.Options, error)
	requests *int64
	duration *time.Duration
	out      *string
	describe *bool
}

func newTraceFlags(fs *flag.FlagSet, outHelp, describeHelp string) *traceFlags {
	return &traceFlags{build: synth.Flags(fs),
		requests: fs.Int64("requests", 0, "number of requests to write"),
		duration: fs.Duration("duration", 0, "trace length in arrival time (e.g. 30m)"),
		out:      fs.String("out", "-", outHelp),
		describe: fs.Bool("describe", false, describeHelp),
	}
}

// generator parses a synth or import command line and returns the trace's
// options and generator.
func (t *traceFlags) generator(fs *flag.FlagSet, args []string) (synth.Options, *synth.Generator, error) {
	if err := parseNone(fs, args); err != nil {
		return synth.Options{}, nil, err
	}
	o, err := t.build()
	if err != nil {
		return o, nil, err
	}
	if *t.requests < 0 || *t.duration < 0 {
		return o, nil, errors.New("--requests and --duration must not be negative")
	}
	if !*t.describe && *t.requests == 0 && *t.duration == 0 {
		return o, nil, errors.New("give --requests N or --duration D (or --describe)")
	}
	g, err := synth.New(o)
	return o, g, err
}

func (t *traceFlags) limit() synth.Limit {
	return synth.Limit{Requests: *t.requests, Duration: *t.duration}
}

// logWritten logs the trace written: its requests, --out, the time it took
// and attrs.
func logWritten(stderr io.Writer, n int64, out string, el time.Duration, attrs ...any) {
	attrs = append([]any{"requests", n, "out", out, "seconds", el.Round(time.Millisecond).Seconds()}, attrs...)
	slog.New(slog.NewTextHandler(stderr, nil)).Info("trace written", attrs...)
}

func cmdSynth(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("synth", "tracegen synth (--requests N | --duration D) [flags]", stderr)
	tf := newTraceFlags(fs, "output file (- for stdout)", "print the fitted request mix's expected Table 1 instead of a trace")
	_, g, err := tf.generator(fs, args)
	if err != nil {
		return err
	}
	if *tf.describe {
		return writeDescription(stdout, g)
	}
	start := time.Now()
	var n int64
	write := func(w io.Writer) (err error) {
		n, err = g.Write(w, tf.limit())
		return err
	}
	if *tf.out == "-" {
		err = write(stdout)
	} else {
		err = writeFile(*tf.out, write)
	}
	if err != nil {
		return err
	}
	el := time.Since(start)
	logWritten(stderr, n, *tf.out, el, "requests_per_s", int(float64(n)/el.Seconds()))
	return nil
}

// writeDescription prints the expected structure of the fitted mix next to
// the profile's targets.
func writeDescription(w io.Writer, g *synth.Generator) error {
	mix := g.Mix()
	st := mix.Predict()
	fmt.Fprintf(w, "%d request types, fitted in %d sweeps; expected %.2f queries per request, mean fanout %.3f\n",
		len(mix.Types), mix.Sweeps, mix.QueriesPerRequest(), mix.MeanFanout())
	if len(mix.Clamped) > 0 {
		fmt.Fprintf(w, "batch sizes raised to 1 for backends %v\n", mix.Clamped)
	}
	ws := make([]float64, len(mix.Types))
	for i, t := range mix.Types {
		ws[i] = t.Weight
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(ws)))
	top := 0.0
	for _, v := range ws[:min(10, len(ws))] {
		top += v
	}
	fmt.Fprintf(w, "type popularity: the most popular type has %.1f%% of requests, the top ten %.1f%%\n\n", 100*ws[0], 100*top)
	fmt.Fprintf(w, "%-10s %9s %9s %11s %9s %9s %9s %9s\n", "backend", "query %", "(target)", "req % pairs", "(target)", "batch", "fanout", "(target)")
	for i, name := range g.Names() {
		t := mix.Targets[i]
		target := fmt.Sprintf("%.2f", 100*t.QueryShare)
		fan := fmt.Sprintf("%.2f", t.Fanout)
		if t.FreeFanout {
			fan = "free"
		}
		fmt.Fprintf(w, "%-10s %9.2f %9s %11.2f %9.2f %9.2f %9.2f %9s\n", name, 100*st[i].QueryShare, target,
			100*st[i].PairShare, 100*t.PairShare, st[i].Batch, st[i].Fanout, fan)
	}
	return nil
}

func cmdStats(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("stats", "tracegen stats FILE [--json] [--skip-bad]   (FILE - reads stdin)", stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	skipBad := fs.Bool("skip-bad", false, "count and skip malformed lines instead of stopping at the first")
	file, err := parseFile(fs, args)
	if err != nil {
		return err
	}
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := safefile.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	const shown = 10
	var bad int
	res, err := stats.Read(r, stats.Options{SkipBad: *skipBad, OnBad: func(e *stats.LineError) {
		if bad++; bad <= shown {
			fmt.Fprintf(stderr, "tracegen stats: %s: skipping %v\n", file, e)
		}
	}})
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if bad > shown {
		fmt.Fprintf(stderr, "tracegen stats: %s: %d malformed lines skipped in all\n", file, bad)
	}
	if *asJSON {
		return printJSON(stdout, res)
	}
	return stats.WriteTable(stdout, res)
}

// warmupFlag is a duration or a percentage of the run ("25%").
type warmupFlag struct {
	d        time.Duration
	fraction float64
	isFrac   bool
}

func (w *warmupFlag) String() string {
	if w.isFrac {
		return strconv.FormatFloat(w.fraction*100, 'g', -1, 64) + "%"
	}
	return w.d.String()
}

func (w *warmupFlag) Set(s string) error {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 || v >= 100 {
			return fmt.Errorf("%q is not a percentage in [0, 100)", s)
		}
		w.fraction, w.isFrac = v/100, true
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither a duration nor a percentage of the run", s)
	}
	w.d, w.isFrac = d, false
	return nil
}

func cmdReplay(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", "tracegen replay --topology FILE --trace FILE --out DIR [--rate R] [--duration D] [flags]", stderr)
	var cfg replay.Config
	topoPath := fs.String("topology", "", "topology file: app servers' http addresses, backends' admin addresses (required)")
	fs.StringVar(&cfg.TracePath, "trace", "", "trace file (required)")
	fs.StringVar(&cfg.OutDir, "out", "", "output folder for requests.csv, summary.json, scenario.jsonl (required)")
	tokenFile := fs.String("token-file", "", "this caller's token file (one \"name token\" line) for the app servers and the backends' admin API (default: the topology's auth.token with {id} = operator)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "send Poisson arrivals at this many requests/s instead of the trace's ts_ms")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop sending after this long (default: at the end of the trace)")
	apps := fs.String("app-servers", "", "comma-separated app server ids to spread requests over (default: all)")
	scPath := fs.String("scenario", "", "capacity scenario (YAML) to apply during the replay")
	sloParams := slo.Flags(fs)
	warm := &warmupFlag{d: sloParams().Warmup}
	fs.Var(warm, "warmup", "warm-up excluded from the violation count: a duration or a percentage of the run (slo.warmup)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed for arrivals, app server choice and the scenario's random walks (unless it has a seed)")
	fs.BoolVar(&cfg.Loop, "loop", false, "restart the trace at its end until --duration")
	fs.DurationVar(&cfg.Timeout, "timeout", replay.DefaultTimeout, "per-request timeout")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", replay.DefaultMaxInFlight, "requests in flight at most; beyond it requests are dropped and counted")
	fs.IntVar(&cfg.MaxConns, "max-conns", replay.DefaultMaxConns, "HTTP connections per app server at most")
	fs.StringVar(&cfg.MetricsAddr, "metrics", "", "serve Prometheus /metrics on this address during the run (e.g. 127.0.0.1:9300)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %q is not debug, info, warn or error", *logLevel)
	}
	if err := required(fs, "topology", "trace", "out"); err != nil {
		return err
	}
	topo, err := config.LoadTopology(*topoPath)
	if err != nil {
		return err
	}
	copts := auth.ClientOptionsFromTopology(topo, auth.Operator)
	if *tokenFile != "" {
		copts.TokenFile = *tokenFile
	}
	if cfg.Credentials, err = auth.NewClient(copts); err != nil {
		return err
	}
	cfg.Topology, cfg.SLO, cfg.ScenarioSeed = topo, sloParams(), cfg.Seed
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.SLO.Warmup = warm.d
	if warm.isFrac {
		cfg.SLO.Warmup, cfg.WarmupFraction = -1, warm.fraction
		if warm.fraction == 0 {
			cfg.SLO.Warmup = 0
		}
	}
	if *apps != "" {
		cfg.AppServers = strings.Split(*apps, ",")
	}
	if *scPath != "" {
		sc, err := loadScenario(*scPath, topo, cfg.Duration, func(w string) { cfg.Log.Warn("scenario", "warning", w) })
		if err != nil {
			return err
		}
		if rs := sc.RateSchedule(); len(rs) > 0 && cfg.Rate > 0 {
			return fmt.Errorf("--rate: the scenario's request_rate events (line %d) are carried by the trace's ts_ms, which --rate replaces with a constant rate; replay without --rate a trace synthesized with --rate-schedule %s",
				rs[0].Line, scenario.RateScheduleSpec(rs))
		}
		cfg.Scenario = sc
		if sc.Seed != nil {
			cfg.ScenarioSeed = *sc.Seed
		}
	}
	if os.Getenv("GOGC") == "" {
		// The replayer's heap is small (tens of MB); fewer collections
		// mean fewer GC assists stalling the scheduler goroutine.
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := replay.Run(ctx, cfg)
	if sum != nil {
		p99 := "n/a"
		if sum.Latency.P99 != nil {
			p99 = strconv.FormatFloat(*sum.Latency.P99, 'f', 1, 64)
		}
		errs := maps.Clone(sum.Errors)
		maps.DeleteFunc(errs, func(_ string, n int64) bool { return n == 0 })
		fmt.Fprintf(stdout, "sent %d, ok %d, errors %v, P99 %s ms, SLO violations %.1f%% of %d points, late sends %d (P99 %.1f ms, max %.1f ms); results in %s\n",
			sum.Sent, sum.OK, errs, p99, sum.SLO.ViolationPct, sum.SLO.PointsCounted,
			sum.Lateness.LateSends, sum.Lateness.P99LateMs, sum.Lateness.MaxLateMs, cfg.OutDir)
	}
	return err
}

func cmdScenarioCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("scenario check", "tracegen scenario check FILE --topology FILE [--duration D] [--print] [--trace FILE [--app-server ID] [--json]]", stderr)
	topoPath := fs.String("topology", "", "topology file (required)")
	duration := fs.Duration("duration", 0, "the run's duration: warns about events beyond it, needed by --print and --trace")
	print := fs.Bool("print", false, "print the expanded timeline, one JSON change per line")
	seed := fs.Uint64("seed", 1, "seed for random walks when the file has none")
	tracePath := fs.String("trace", "", "also say, phase by phase, whether any allocation of the cache can keep every backend under its capacity (miss-ratio curves from this trace)")
	appServer := fs.String("app-server", "", "with --trace: the partitioned app server whose budget is analysed (default: the first)")
	asJSON := fs.Bool("json", false, "with --trace: print the analysis as JSON")
	lookahead := fs.Bool("lookahead", true, "with --trace: the oracle's column is the schedule with foresight (false: the reactive one, which learns each phase when it starts)")
	file, err := parseFile(fs, args)
	if err != nil {
		return err
	}
	if err := required(fs, "topology"); err != nil {
		return err
	}
	topo, err := config.LoadTopology(*topoPath)
	if err != nil {
		return err
	}
	sc, err := loadScenario(file, topo, *duration, func(w string) { fmt.Fprintln(stderr, "warning:", w) })
	if err != nil {
		return err
	}
	kinds := map[scenario.Kind]int{}
	for _, e := range sc.Events {
		kinds[e.Kind]++
	}
	rr := ""
	if k := kinds[scenario.KindRequestRate]; k > 0 {
		rr = fmt.Sprintf(", %d request_rate", k)
	}
	fmt.Fprintf(stdout, "%s: ok: %d events (%d set, %d ramp, %d random_walk%s)\n", file, len(sc.Events),
		kinds[scenario.KindSet], kinds[scenario.KindRamp], kinds[scenario.KindRandomWalk], rr)
	if *tracePath != "" {
		return feasibilityReport(stdout, stderr, sc, topo, *tracePath, *appServer, *duration, *seed, *asJSON, *lookahead)
	}
	if !*print {
		return nil
	}
	if *duration <= 0 {
		return errors.New("--print needs --duration")
	}
	changes, err := expand(sc, "--print", *duration, *seed)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, c := range changes {
		fields := map[string]float64{}
		for _, fv := range c.Fields {
			fields[fv.Field] = fv.Value
		}
		if err := enc.Encode(map[string]any{"at_s": c.At.Seconds(), "backend": c.Backend, "set": fields, "line": c.Line, "kind": c.Kind}); err != nil {
			return err
		}
	}
	return nil
}

func cmdScenarioGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("scenario generate", "tracegen scenario generate --topology FILE --trace FILE --duration D --seed N [--family NAME] [--app-server ID] [--warmup D] [--out FILE] [--json]", stderr)
	topoPath := fs.String("topology", "", "topology file: the backends and their initial limits, the app server's cache (required)")
	tracePath := fs.String("trace", "", "trace the run replays: drop depths are relative to each backend's miss load in it (required)")
	duration := fs.Duration("duration", 0, "the run's length (required)")
	seed := fs.Uint64("seed", 0, "seed of every draw, the family's too unless --family is given (required; "+zoo.DescribeSeedRanges()+")")
	family := fs.String("family", "", "draw from this family: "+strings.Join(zoo.Families, ", ")+" (default: drawn from the seed)")
	appServer := fs.String("app-server", "", "the partitioned app server whose configured allocation the miss loads are under (default: the first)")
	warmup := fs.Duration("warmup", zoo.DefaultWarmup, "events start at or after this time (default: the topology's slo.warmup, else this)")
	out := fs.String("out", "-", "write the scenario here (- for stdout)")
	asJSON := fs.Bool("json", false, "print the family, seed, drawn parameters and the scenario as JSON on stdout")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if err := required(fs, "topology", "trace", "duration", "seed"); err != nil {
		return err
	}
	if *duration <= 0 {
		return fmt.Errorf("--duration: %v must be positive", *duration)
	}
	warmupGiven := given(fs)["warmup"]
	if err := zoo.CheckSeed(*seed); err != nil {
		return fmt.Errorf("--seed: %w", err)
	}
	if *family != "" && zoo.FamilyIndex(*family) < 0 {
		return fmt.Errorf("--family: %q is not one of %s", *family, strings.Join(zoo.Families, ", "))
	}
	if warmupGiven && *warmup < 0 {
		return fmt.Errorf("--warmup: %v is negative", *warmup)
	}
	topo, err := config.LoadTopology(*topoPath)
	if err != nil {
		return err
	}
	in, err := zoo.Load(topo, *tracePath, *duration, *appServer)
	if err != nil {
		return err
	}
	if warmupGiven {
		in.Warmup = *warmup
	}
	if in.Warmup >= in.Duration {
		return fmt.Errorf("--warmup: %v is not shorter than --duration %v", in.Warmup, in.Duration)
	}
	sc, err := zoo.Generate(in, *seed, *family)
	if err != nil {
		return err
	}
	if *out != "-" {
		if err := os.WriteFile(*out, []byte(sc.YAML), 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		return printJSON(stdout, sc)
	}
	if *out == "-" {
		_, err = io.WriteString(stdout, sc.YAML)
	}
	return err
}

// DefaultMRCSizes are the cache sizes tracegen mrc evaluates unless told.
const DefaultMRCSizes = "1MiB,2MiB,4MiB,8MiB,16MiB,32MiB,64MiB,128MiB,256MiB,512MiB,1GiB"

// cmdScenarioSeeds lists the zoo's seed ranges: the one definition the
// testbed's copy is generated from (scripts/genschema.py).
func cmdScenarioSeeds(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("scenario seeds", "tracegen scenario seeds [--json]", stderr)
	asJSON := fs.Bool("json", false, "print the ranges as JSON")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		return enc.Encode(zoo.SeedRanges)
	}
	for _, r := range zoo.SeedRanges {
		if _, err := fmt.Fprintf(stdout, "%s %d-%d sample %d-%d -- %s\n", r.Name, r.Min, r.Max, r.Min, r.SampleMax, r.Meaning); err != nil {
			return err
		}
	}
	return nil
}

func cmdMRC(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mrc", "tracegen mrc FILE [--sizes 1MiB,4MiB,...] [--format csv|table|json] [--sample R] [--plot FILE.svg]", stderr)
	sizesFlag := fs.String("sizes", DefaultMRCSizes, "cache sizes (comma-separated byte sizes: 512KiB, 64MiB, 1.5GiB, 1000000)")
	format := fs.String("format", "table", "output: csv (backend,cache_bytes,miss_ratio rows), table or json")
	sample := fs.Float64("sample", 0, "SHARDS sampling rate R in (0, 1) for large traces; 0 = exact")
	heavy := fs.Int("heavy-keys", 1000, "with --sample: popular keys tracked at every access, per backend")
	plot := fs.String("plot", "", "also draw the curves into this SVG file")
	file, err := parseFile(fs, args)
	if err != nil {
		return err
	}
	sizes, err := bytesize.ParseList(*sizesFlag)
	switch {
	case err != nil:
		return fmt.Errorf("--sizes: %w", err)
	case len(sizes) == 0:
		return errors.New("--sizes: give at least one size")
	case !slices.Contains([]string{"csv", "table", "json"}, *format):
		return fmt.Errorf("--format: %q is not csv, table or json", *format)
	case *sample < 0 || *sample >= 1:
		return fmt.Errorf("--sample: %v is not in [0, 1) (0 = exact)", *sample)
	case *heavy < 0:
		return fmt.Errorf("--heavy-keys: %d is negative", *heavy)
	}
	curves, err := mrc.FromFile(file, mrc.Options{Sizes: sizes, SampleRate: *sample}, *heavy)
	if err != nil {
		return err
	}
	if *plot != "" {
		title := "LRU miss ratio per backend: " + file
		if *sample > 0 {
			title += fmt.Sprintf(" (sampled, R = %g)", *sample)
		}
		if err := writeFile(*plot, func(w io.Writer) error { return mrc.WriteSVG(w, curves, title) }); err != nil {
			return err
		}
	}
	switch *format {
	case "json":
		return printJSON(stdout, curves)
	case "csv":
		fmt.Fprintln(stdout, "backend,cache_bytes,miss_ratio")
		for _, c := range curves {
			for _, p := range c.Points {
				fmt.Fprintf(stdout, "%s,%d,%s\n", c.Backend, p.Bytes, strconv.FormatFloat(p.MissRatio, 'f', 6, 64))
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"backend", "accesses"}
	if len(curves) > 0 {
		for _, p := range curves[0].Points {
			head = append(head, bytesize.Format(p.Bytes))
		}
	}
	fmt.Fprintln(w, strings.Join(head, "\t")+"\t")
	for _, c := range curves {
		row := []string{c.Backend, strconv.FormatInt(c.Accesses, 10)}
		for _, p := range c.Points {
			row = append(row, strconv.FormatFloat(p.MissRatio, 'f', 3, 64))
		}
		fmt.Fprintln(w, strings.Join(row, "\t")+"\t")
	}
	return w.Flush()
}
