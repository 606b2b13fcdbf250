// Package schema holds the configuration contract: the topology and the
// experiment file, defined once as JSON Schema (draft 2020-12) written in
// YAML, with cross-field rules in CEL. The Go reader (lib/config) and the
// Python reader (robinhood_common.contract) both validate against these
// files and take every default from them; docs/topology.md and
// docs/testbed.md are generated from them (make schema). See
// docs/architecture.md for the dialect.
package schema

import "embed"

// Files holds topology.schema.yaml, experiment.schema.yaml, hedging.schema.yaml,
// oracle.schema.yaml (the oracle's schedule file, tracegen oracle's output)
// and policies.schema.yaml (every policy's parameters, generated from the
// policies' declarations by scripts/genschema.py).
//
//go:embed *.schema.yaml
var Files embed.FS

// Topology, Experiment, Hedging, Oracle and Policies are the schema file
// names (their $id).
const (
	Topology   = "topology.schema.yaml"
	Experiment = "experiment.schema.yaml"
	Hedging    = "hedging.schema.yaml"
	Oracle     = "oracle.schema.yaml"
	Policies   = "policies.schema.yaml"
)
