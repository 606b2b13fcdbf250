// Package rbctest gives tests the RBC band the servers default to.
package rbctest

import (
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
)

// PaperBand is the topology schema's default band (rbc_server.low_pct,
// high_pct: the paper's P98.5 to P99.5), the RBC server's default.
func PaperBand() rbc.Params {
	d, err := config.ReadRBCSettings(map[string]any{}, "")
	if err != nil {
		panic(err)
	}
	return rbc.Params{LowPct: d.LowPct, HighPct: d.HighPct}
}
