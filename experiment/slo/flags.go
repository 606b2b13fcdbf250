package slo

import (
	"flag"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// Flags registers --slo, --slo-step and --slo-window on fs, with the
// experiment schema's slo defaults (config.DefaultSLO: the one place they
// live), and returns the Params they give once fs is parsed. Warmup is the
// schema's default; a command with a --warmup flag of its own sets it.
func Flags(fs *flag.FlagSet) func() Params {
	def := config.DefaultSLO()
	latency := fs.Duration("slo", time.Duration(def.Latency), "P99 latency objective (slo.latency)")
	step := fs.Duration("slo-step", time.Duration(def.Step), "how often the SLO series observes the percentiles (slo.step)")
	window := fs.Duration("slo-window", time.Duration(def.Window), "how far back each observation looks, a multiple of --slo-step (slo.window)")
	return func() Params {
		return Params{SLO: *latency, Step: *step, Window: *window, Warmup: time.Duration(def.Warmup)}
	}
}
