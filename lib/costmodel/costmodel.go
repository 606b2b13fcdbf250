// Package costmodel is what the real components cost: the measured
// data-path times of cache lookups, RPCs and backend types (Calibration),
// and memcached's memory charge per item (its slab classes). The simulator
// (sim) charges its requests and fills its caches with it; the oracle's
// latency model (experiment/feasibility) predicts with the same numbers.
package costmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/robinhoodcache/robinhood/lib/safefile"
)

// Cost is a time that grows with the bytes involved: BaseUs + PerKBUs per
// KiB.
type Cost struct {
	BaseUs  float64 `json:"base_us"`
	PerKBUs float64 `json:"per_kb_us"`
}

// Of is the cost of handling n bytes.
func (c Cost) Of(n int64) time.Duration {
	return time.Duration((c.BaseUs + c.PerKBUs*float64(n)/1024) * float64(time.Microsecond))
}

// Calibration is every time the simulator does not get from the capacity
// model: how long a cache lookup, a backend RPC and a backend's data path
// take. The defaults are measured on the real components (docs/simulator.md,
// "Calibration", says how, and scripts/sim-calibrate.sh measures the data
// paths again); a JSON file of the same shape (bin/sim --calibration)
// replaces them.
type Calibration struct {
	// CacheLookup is one multi-get round trip to memcached, per KiB of the
	// values it returns.
	CacheLookup Cost `json:"cache_lookup"`
	// RPC is a backend call's round trip outside the backend's queue and
	// workers (gRPC, the network, marshalling), per KiB of values returned.
	RPC Cost `json:"rpc"`
	// Service is the data path of one query while it holds a worker, per
	// backend type ("kv", "sql", "compute"), per KiB of its value; compute
	// adds ComputePerCellUs per cell of its matrix product (matrix_size³).
	Service          map[string]Cost `json:"service"`
	ComputePerCellUs float64         `json:"compute_per_cell_us"`
	// Note says where the numbers come from.
	Note string `json:"note,omitempty"`
}

// DefaultCalibration is measured on the project's machine (2 cores,
// 2026-11-23; docs/simulator.md, "Calibration"): the data path per query
// from real bin/backend processes under a light load
// (scripts/sim-calibrate.sh), the lookup and RPC round trips from the app
// server's query latency histograms during a testbed run of the demo, on
// the backends that never lost capacity.
func DefaultCalibration() Calibration {
	return Calibration{
		CacheLookup: Cost{BaseUs: 420, PerKBUs: 1.5},
		RPC:         Cost{BaseUs: 2500, PerKBUs: 3},
		Service: map[string]Cost{
			"kv":      {BaseUs: 8, PerKBUs: 1.5},
			"sql":     {BaseUs: 180, PerKBUs: 0.5},
			"compute": {BaseUs: 8, PerKBUs: 1.5},
		},
		ComputePerCellUs: 0.0014,
		Note:             "measured 2026-11-23 (docs/simulator.md)",
	}
}

// LoadCalibration reads a calibration file; fields it leaves out keep their
// defaults, and an unknown field is an error naming it.
func LoadCalibration(path string) (Calibration, error) {
	c := DefaultCalibration()
	b, err := safefile.ReadFile(path, 1<<20)
	if err != nil {
		return c, fmt.Errorf("calibration: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("calibration %s: %w", path, err)
	}
	return c, c.Validate()
}

// Validate checks that every time is finite and not negative.
func (c Calibration) Validate() error {
	check := func(name string, v Cost) error {
		if !(v.BaseUs >= 0 && v.PerKBUs >= 0) || v.BaseUs > 1e8 || v.PerKBUs > 1e8 {
			return fmt.Errorf("calibration: %s must have base_us and per_kb_us ≥ 0, got %+v", name, v)
		}
		return nil
	}
	if err := check("cache_lookup", c.CacheLookup); err != nil {
		return err
	}
	if err := check("rpc", c.RPC); err != nil {
		return err
	}
	for t, v := range c.Service {
		if t != "kv" && t != "sql" && t != "compute" {
			return fmt.Errorf("calibration: service.%s: unknown backend type (kv, sql, compute)", t)
		}
		if err := check("service."+t, v); err != nil {
			return err
		}
	}
	if !(c.ComputePerCellUs >= 0) {
		return fmt.Errorf("calibration: compute_per_cell_us must be ≥ 0, got %v", c.ComputePerCellUs)
	}
	return nil
}
