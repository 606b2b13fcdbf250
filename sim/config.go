package sim

import (
	"io"
	"log/slog"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/costmodel"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// Config is one simulated run: one arm's topology driven by a trace and a
// scenario, with the replayer's SLO settings.
type Config struct {
	// TopologyPath is the arm's topology file (the testbed writes it);
	// Topology is its content.
	TopologyPath string
	Topology     *config.Topology
	TracePath    string
	// Synth, instead of a trace file, generates the requests in process
	// (the options of `tracegen synth`; its Rate is the whole topology's).
	Synth *synth.Options
	// Scenario, when set, changes the backends' limits during the run;
	// ScenarioSeed seeds its random walks.
	Scenario     *scenario.Scenario
	ScenarioSeed uint64
	Duration     time.Duration
	// Seed drives every random choice of the run (app server, replica).
	Seed uint64
	SLO  slo.Params
	// OutDir is the arm's folder: replay/summary.json, rbc.jsonl,
	// controller-<app>.jsonl, sim.json.
	OutDir string
	// Epoch is the wall-clock time the simulated run starts at (the run's
	// start file holds it).
	Epoch time.Time
	// Controller is the robinhood-controller command; needed when an app
	// server has a partitioned cache and PolicyServer is empty.
	Controller []string
	// PolicyServer is the Unix socket of a running policy server to use
	// instead of starting Controller ("": start it).
	PolicyServer string
	Calibration  costmodel.Calibration
	// ShadowBytes is each partition's shadow region (0: the app server's
	// default).
	ShadowBytes int64
	// Sample, in (0, 1), makes the run a miniature; RequestSample (default
	// 0.1) and Apps (default all) are a generated workload's miniature's
	// (docs/simulator.md, "Miniature simulation"). 0 or 1: everything.
	Sample        float64
	RequestSample float64
	Apps          int
	// InlineShadows and InlineSource run the shadow models and a Synth
	// workload's generator on the run's own goroutine instead of beside it
	// (shadowpipe.go, synthsource.go); the results are the same.
	InlineShadows, InlineSource bool
	// Progress, when set, hears a line every ProgressEvery of wall time
	// (default a minute): how far the run is and how long it has left.
	Progress      io.Writer
	ProgressEvery time.Duration
	Log           *slog.Logger
}
