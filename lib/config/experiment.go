package config

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/robinhoodcache/robinhood/schema"
)

// Experiment is an experiment file (docs/testbed.md): what the testbed and
// the simulator run.
type Experiment struct {
	Name           string              `json:"name"`
	Description    string              `json:"description"`
	Seed           uint64              `json:"seed"`
	Duration       Duration            `json:"duration"`
	Backends       []ExperimentBackend `json:"backends"`
	Cache          ExperimentCache     `json:"cache"`
	Controller     Controller          `json:"controller"`
	RBCServer      RBCServer           `json:"rbc_server"`
	SLO            SLO                 `json:"slo"`
	Trace          Trace               `json:"trace"`
	Scenario       *Scenario           `json:"scenario,omitempty"`
	Compare        Compare             `json:"compare"`
	Sim            ExperimentSim       `json:"sim"`
	RequestTimeout Duration            `json:"request_timeout"`
	BackendTimeout Duration            `json:"backend_timeout"`

	// BaseDir is the experiment file's directory; relative paths in it
	// (trace.file, scenario.file) are relative to this.
	BaseDir string `json:"-"`
}

// ExperimentSim is how the simulator runs the experiment (docs/simulator.md).
type ExperimentSim struct {
	Generate      bool     `json:"generate"`
	Sample        *float64 `json:"sample,omitempty"`
	RequestSample *float64 `json:"request_sample,omitempty"`
	Apps          *int     `json:"apps,omitempty"`
}

// ExperimentBackend is one backend of an experiment.
type ExperimentBackend struct {
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Replicas int             `json:"replicas"`
	Limits   Limits          `json:"limits"`
	KV       *KVOptions      `json:"kv,omitempty"`
	SQL      *SQLOptions     `json:"sql,omitempty"`
	Compute  *ComputeOptions `json:"compute,omitempty"`
}

// ExperimentCache is the app servers' caches.
type ExperimentCache struct {
	AppServers    int              `json:"app_servers"`
	BudgetMB      int              `json:"budget_mb"`
	InitialMB     map[string]int   `json:"initial_mb"`
	AppInitialMB  []map[string]int `json:"app_initial_mb"`
	Store         string           `json:"store"`
	MemcachedArgs []string         `json:"memcached_args"`
}

// SLO is the request P99 objective and its series' settings (the
// schema's $defs/slo, shared by the experiment file and the topology).
type SLO struct {
	Latency Duration `json:"latency"`
	Step    Duration `json:"step"`
	Window  Duration `json:"window"`
	Warmup  Duration `json:"warmup"`
}

// SLODef is the schema definition of SLO.
const SLODef = schema.Topology + "#/$defs/slo"

// DefaultSLO is the schema's SLO defaults: the one source of the defaults
// of every command that takes the SLO settings as flags.
func DefaultSLO() SLO {
	norm, err := Default().Read(SLODef, map[string]any{}, "")
	if err != nil {
		panic(err)
	}
	var s SLO
	if err := decode(norm, &s); err != nil {
		panic(err)
	}
	return s
}

// Trace is the trace: synthesized, or a file.
type Trace struct {
	Synth *Synth `json:"synth,omitempty"`
	File  string `json:"file,omitempty"`
}

// Synth are the tracegen synth settings.
type Synth struct {
	Profile string         `json:"profile"`
	Rate    float64        `json:"rate"`
	Params  map[string]any `json:"params"`
	// Streams are real key streams by backend name (tracegen import).
	Streams map[string]Stream `json:"streams,omitempty"`
}

// Stream is one backend's real key stream (docs/workloads.md, "Real key
// streams"): a file relative to the experiment file, its format ("" when
// detected) and the records skipped at its start.
type Stream struct {
	File   string `json:"file"`
	Format string `json:"format,omitempty"`
	Skip   int64  `json:"skip"`
}

// Scenario is a capacity scenario: a file, or inline events (validated by
// experiment/scenario).
type Scenario struct {
	File   string           `json:"file,omitempty"`
	Seed   *int64           `json:"seed,omitempty"`
	Events []map[string]any `json:"events,omitempty"`
}

// Compare are the arms of a comparison.
type Compare struct {
	CacheModes []string           `json:"cache_modes"`
	Policies   []AllocationPolicy `json:"policies"`
	Dispatch   []Dispatch         `json:"dispatch"`
}

// LoadExperiment reads and validates an experiment file.
func LoadExperiment(path string) (*Experiment, error) {
	b, err := ReadConfigFile(path)
	var cerr *Error
	if errors.As(err, &cerr) {
		return nil, fmt.Errorf("experiment %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	doc, err := ParseYAML(b, "experiment")
	if err == nil {
		var e *Experiment
		if e, err = ExperimentFrom(doc, filepath.Dir(path)); err == nil {
			return e, nil
		}
	}
	return nil, fmt.Errorf("experiment %s: %w", path, err)
}

// ExperimentFrom validates a decoded experiment document.
func ExperimentFrom(doc any, baseDir string) (*Experiment, error) {
	norm, err := Default().Read(schema.Experiment, doc, "")
	if err != nil {
		return nil, err
	}
	var e Experiment
	if err := decode(norm, &e); err != nil {
		return nil, err
	}
	e.BaseDir = baseDir
	return &e, nil
}

// Path resolves a path of the experiment file against its directory.
func (e *Experiment) Path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.BaseDir, p)
}
