// Command sim is the discrete-event simulator's engine (docs/simulator.md):
// `sim arm` simulates one arm the testbed prepared (robinhood-testbed ...
// --engine sim calls it), its policies run in the controller's policy
// server; `sim hedging` and `sim advise` are the hedging bench's.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/lib/cpuprofile"
	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/sim"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

const usage = `usage:
  sim arm --topology FILE (--trace FILE | --synth "ARGS") --out DIR --duration D [flags]
  sim hedging --experiment FILE [--out DIR]   the replicated-backend bench (docs/hedging.md)
  sim advise (--measured FILE | --stall-prob P --stall-x D) [--replicas R --utilization U]
                                              which dispatch policy the bench finds best
  sim advise --heatmap DIR                    what hedging can bring over PSQ (a figure)

bin/sim is the simulator's engine: it runs one arm the testbed prepared.
Simulate an experiment with the testbed:
  robinhood-testbed run --engine sim --experiment FILE --policy NAME --out DIR
  robinhood-testbed compare --engine sim --experiment FILE --out DIR
  robinhood-testbed sweep --experiment FILE --param P --values A,B,... --out DIR
'sim arm -h' lists the flags of one prepared arm.
`

func main() {
	if err := mainErr(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
}

func mainErr(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "run", "compare", "sweep":
		engine := " --engine sim"
		if args[0] == "sweep" {
			engine = ""
		}
		return fmt.Errorf("%q is not a command of bin/sim, the simulator's engine: run `robinhood-testbed %s%s ...` (docs/simulator.md)", args[0], args[0], engine)
	case "arm":
		return cmdArm(args[1:], stdout, stderr)
	case "hedging":
		return cmdHedging(args[1:], stdout, stderr)
	case "advise":
		return cmdAdvise(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// flagSet is a subcommand's flags, its errors and usage on stderr.
func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses a subcommand's flags; it takes no arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// check is a flag's validation: when bad, err says what is wrong.
type check struct {
	bad bool
	err string
}

// firstFailed is the error of the first bad check, in order.
func firstFailed(checks ...check) error {
	for _, c := range checks {
		if c.bad {
			return errors.New(c.err)
		}
	}
	return nil
}

// repoFile finds a file relative to this binary's folder's parent (bin/sim
// → the repository), else on PATH.
func repoFile(rel, name string) (string, bool) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(filepath.Dir(exe)), rel)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	return "", false
}

// controllerCommand is the robinhood-controller the policies run in.
func controllerCommand(flagValue string) ([]string, error) {
	if flagValue != "" {
		return strings.Fields(flagValue), nil
	}
	if env := os.Getenv("ROBINHOOD_CONTROLLER"); env != "" {
		return strings.Fields(env), nil
	}
	if p, ok := repoFile(".venv/bin/robinhood-controller", "robinhood-controller"); ok {
		return []string{p}, nil
	}
	return nil, errors.New("robinhood-controller not found (give --controller, set ROBINHOOD_CONTROLLER, or run `make venv`)")
}

func cmdArm(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("sim arm", stderr)
	topoPath := fs.String("topology", "", "the arm's topology file (required)")
	tracePath := fs.String("trace", "", "trace file with ts_ms (this or --synth)")
	synthArgs := fs.String("synth", "", "generate the requests in process: the flags of `tracegen synth` (without --requests, --duration, --out), e.g. \"--rate 200 --keys 10000\" (this or --trace)")
	reqSample := fs.Float64("request-sample", 0, "miniature of a --synth workload: the fraction of requests simulated with their whole fan-out, in (0, 1] (default 0.1)")
	apps := fs.Int("apps", 0, "miniature of a --synth workload: simulate the first N app servers; the others are taken to be identical (default all)")
	out := fs.String("out", "", "the arm's folder: replay/summary.json, rbc.jsonl, controller-<app>.jsonl, sim.json (required)")
	duration := fs.Duration("duration", 0, "simulated run length (required)")
	scPath := fs.String("scenario", "", "capacity scenario (YAML)")
	sloParams := slo.Flags(fs)
	warmup := fs.Duration("warmup", sloParams().Warmup, "warm-up excluded from the violation count (slo.warmup)")
	seed := fs.Uint64("seed", 1, "seed of every random choice and of the scenario's random walks (unless it has one)")
	epoch := fs.String("epoch", "", "Unix time the run starts at (default: the controllers' run start file, else 1000000000)")
	ctl := fs.String("controller", "", "robinhood-controller command (default: $ROBINHOOD_CONTROLLER, .venv/bin/robinhood-controller, PATH)")
	psAddr := fs.String("policy-server", os.Getenv("ROBINHOOD_POLICY_SERVER"), "Unix socket of a running `robinhood-controller policy-server --listen PATH` to run the policies on instead of starting one (default: $ROBINHOOD_POLICY_SERVER)")
	calPath := fs.String("calibration", "", "calibration JSON replacing the measured defaults (docs/simulator.md)")
	shadowBytes := fs.Int64("shadow-bytes", 0, "each partition's shadow region in bytes (default: the app server's, 4 MiB)")
	sample := fs.Float64("sample", 1, "miniature simulation: simulate this fraction of the keys, in (0, 1], with caches and backend rates scaled to it")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the simulation here (go tool pprof)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	progress := fs.Duration("progress", time.Minute, "a progress line on stderr this often (wall time; 0: none)")
	serial := fs.Bool("serial", false, "one goroutine: the shadow models and the request generator in line, not beside the run (the same results; for many runs at once)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := firstFailed(
		check{(*tracePath == "") == (*synthArgs == ""), `give one of --trace FILE and --synth "ARGS"`},
		check{*synthArgs == "" && (*reqSample != 0 || *apps != 0), "--request-sample and --apps need --synth (a trace file's miniature only samples keys)"},
		check{*reqSample != 0 && !(*reqSample > 0 && *reqSample <= 1), fmt.Sprintf("--request-sample: %v is not in (0, 1]", *reqSample)},
		check{*apps < 0, fmt.Sprintf("--apps: %d must not be negative", *apps)},
		check{*topoPath == "", "--topology is required"},
		check{*out == "", "--out is required"},
		check{!(*sample > 0 && *sample <= 1), fmt.Sprintf("--sample: %v is not in (0, 1]", *sample)},
		check{*duration <= 0, "--duration is required and must be positive"},
		check{*progress < 0, fmt.Sprintf("--progress: %v must not be negative", *progress)},
	); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %q is not debug, info, warn or error", *logLevel)
	}
	topo, err := config.LoadTopology(*topoPath)
	if err != nil {
		return err
	}
	cfg := sim.Config{TopologyPath: *topoPath, Topology: topo, TracePath: *tracePath, Duration: *duration,
		Seed: *seed, ScenarioSeed: *seed, OutDir: *out, ShadowBytes: *shadowBytes, Sample: *sample,
		RequestSample: *reqSample, Apps: *apps, InlineShadows: *serial, InlineSource: *serial,
		ProgressEvery: *progress,
		SLO:           sloParams(),
		Log:           slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))}
	cfg.SLO.Warmup = *warmup
	if *progress > 0 {
		cfg.Progress = stderr
	}
	if *synthArgs != "" {
		o, err := synth.ParseArgs(strings.Fields(*synthArgs))
		if err != nil {
			return fmt.Errorf("--synth: %w", err)
		}
		cfg.Synth = &o
	}
	if cfg.Epoch, err = runEpoch(*epoch, topo); err != nil {
		return err
	}
	if *calPath != "" {
		if cfg.Calibration, err = costmodel.LoadCalibration(*calPath); err != nil {
			return err
		}
	}
	if *scPath != "" {
		if err := armScenario(&cfg, *scPath, topo, *duration); err != nil {
			return err
		}
	}
	if err := armController(&cfg, topo, *psAddr, *ctl); err != nil {
		return err
	}
	stopProfile, err := cpuprofile.Start(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	tuneRuntime()
	res, err := sim.Run(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "simulated %.0f s in %.1f s: %d requests, %d queries (%.0f queries/s), results in %s\n",
		res.SimulatedS, res.WallS, res.Requests, res.Queries, res.QueriesPerSec, *out)
	return nil
}

// armScenario loads the arm's capacity scenario into cfg (its seed, when it
// has one); a request_rate event needs --synth's --rate-schedule, and a
// trace file's arrival times must carry it.
func armScenario(cfg *sim.Config, scPath string, topo *config.Topology, duration time.Duration) error {
	sc, warns, err := scenario.Load(scPath, topo.BackendNames(), duration)
	if err != nil {
		return err
	}
	for _, w := range warns {
		cfg.Log.Warn("scenario", "warning", w)
	}
	cfg.Scenario = sc
	if sc.Seed != nil {
		cfg.ScenarioSeed = *sc.Seed
	}
	// request_rate events are the trace's: a generated one must be
	// given them (the testbed passes them as --rate-schedule).
	if rs := sc.RateSchedule(); len(rs) > 0 {
		switch {
		case cfg.Synth != nil && len(cfg.Synth.RateSchedule) == 0:
			return fmt.Errorf("--scenario: line %d: a request_rate event changes the trace's request rate, but --synth has no --rate-schedule (add --rate-schedule %s)",
				rs[0].Line, scenario.RateScheduleSpec(rs))
		case cfg.Synth == nil:
			cfg.Log.Warn("scenario", "warning", fmt.Sprintf("request_rate events (line %d) are not applied: the trace file's arrival times must carry them (tracegen synth --rate-schedule %s)",
				rs[0].Line, scenario.RateScheduleSpec(rs)))
		}
	}
	return nil
}

// armController sets how cfg runs the policies when an app server is
// partitioned: on the policy server at psAddr, else a controller command
// (ctl, or the default one).
func armController(cfg *sim.Config, topo *config.Topology, psAddr, ctl string) error {
	for _, a := range topo.AppServers {
		if a.CacheMode == config.CachePartitioned {
			if cfg.PolicyServer = psAddr; psAddr != "" {
				return nil
			}
			var err error
			cfg.Controller, err = controllerCommand(ctl)
			return err
		}
	}
	return nil
}

// tuneRuntime sets the garbage collector for a simulation (unless GOGC or
// GOMEMLIMIT are set) and ROBINHOOD_BIN to this binary's folder, for the
// oracle policy's bin/tracegen.
func tuneRuntime() {
	if os.Getenv("GOGC") == "" {
		// The simulation allocates many short-lived objects: fewer
		// collections, measurably faster.
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// But a run of the paper's whole system holds gigabytes (its
		// shadow models), and GOGC=400 alone would let the heap grow to
		// five times that: collect harder near 40% of the machine's
		// memory, so two arms at a time fit (docs/simulator.md).
		if total, ok := memTotal(); ok {
			debug.SetMemoryLimit(total * 2 / 5)
		}
	}
	if os.Getenv("ROBINHOOD_BIN") == "" { // the oracle policy runs bin/tracegen
		if exe, err := os.Executable(); err == nil {
			os.Setenv("ROBINHOOD_BIN", filepath.Dir(exe))
		}
	}
}

// memTotal is the machine's memory in bytes (Linux's /proc/meminfo).
func memTotal() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err == nil && kb > 0
		}
	}
	return 0, false
}

// runEpoch is the run's start: the flag, else the start file the testbed
// wrote for the controllers, else a fixed time (runs stay deterministic).
func runEpoch(flagValue string, topo *config.Topology) (time.Time, error) {
	parse := func(s, what string) (time.Time, error) {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v < 0 {
			return time.Time{}, fmt.Errorf("%s: %q is not a Unix time", what, s)
		}
		return time.Unix(0, int64(v*1e9)), nil
	}
	if flagValue != "" {
		return parse(flagValue, "--epoch")
	}
	for _, a := range topo.AppServers {
		if r := a.Controller.Run; r != nil && r.StartFile != "" {
			if b, err := safefile.ReadFile(r.StartFile, 4096); err == nil {
				return parse(string(b), r.StartFile)
			}
		}
	}
	return time.Unix(1_000_000_000, 0), nil
}
