package synth

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// RateStep is one step of a rate schedule: from At on, arrivals come at
// Factor × Options.Rate, until the next step.
type RateStep struct {
	At     time.Duration
	Factor float64
}

// ParseRateSchedule parses --rate-schedule: comma-separated AT:FACTOR items
// ("0s:1,60s:1.5,100s:1"), AT a Go duration from the start of the trace,
// strictly increasing, FACTOR a positive multiplier of --rate. Before the
// first item the factor is 1. "" is no schedule. Errors name the item.
func ParseRateSchedule(spec string) ([]RateStep, error) {
	var out []RateStep
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		at, factor, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("--rate-schedule: %q is not AT:FACTOR (e.g. 60s:1.5)", item)
		}
		d, err := time.ParseDuration(at)
		if err != nil {
			return nil, fmt.Errorf("--rate-schedule: %q: %q is not a duration (e.g. 60s, 1m30s)", item, at)
		}
		f, err := strconv.ParseFloat(factor, 64)
		if err != nil {
			return nil, fmt.Errorf("--rate-schedule: %q: factor %q is not a number", item, factor)
		}
		out = append(out, RateStep{At: d, Factor: f})
	}
	if err := checkSchedule(out); err != nil {
		return nil, fmt.Errorf("--%w", err)
	}
	return out, nil
}

// checkSchedule validates a schedule given as Options.
func checkSchedule(s []RateStep) error {
	for i, st := range s {
		if st.At < 0 {
			return fmt.Errorf("rate-schedule: step %d at %v is negative", i+1, st.At)
		}
		if !(st.Factor > 0) || math.IsInf(st.Factor, 0) {
			return fmt.Errorf("rate-schedule: step %d (at %v): factor %v must be a positive number", i+1, st.At, st.Factor)
		}
		if i > 0 && st.At <= s[i-1].At {
			return fmt.Errorf("rate-schedule: step %d at %v is not after the step before (%v); give times in increasing order", i+1, st.At, s[i-1].At)
		}
	}
	return nil
}

// FormatRateSchedule writes a schedule as --rate-schedule takes it.
func FormatRateSchedule(s []RateStep) string {
	parts := make([]string, len(s))
	for i, st := range s {
		parts[i] = st.At.String() + ":" + strconv.FormatFloat(st.Factor, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// schedule is a rate schedule in the generator's units: step i holds from
// atMs[i] (ms) at rate[i] requests/s; before atMs[0] the base rate.
type schedule struct {
	atMs   []float64
	rate   []float64
	factor []float64
	base   float64
	// cur is the step the clock is in (-1: before the first); arrival
	// times only grow, so it only moves forward.
	cur int
}

func newSchedule(steps []RateStep, base float64) *schedule {
	if len(steps) == 0 {
		return nil
	}
	s := &schedule{base: base, cur: -1}
	for _, st := range steps {
		s.atMs = append(s.atMs, float64(st.At)/float64(time.Millisecond))
		s.rate = append(s.rate, base*st.Factor)
		s.factor = append(s.factor, st.Factor)
	}
	return s
}

// next is the arrival after nowMs given e, an exponential draw of mean 1:
// the time at which the integrated rate since nowMs reaches e (a Poisson
// process whose rate is piecewise constant, by time rescaling).
func (s *schedule) next(nowMs, e float64) float64 {
	for {
		rate, end := s.base, math.Inf(1)
		if s.cur >= 0 {
			rate = s.rate[s.cur]
		}
		if s.cur+1 < len(s.atMs) {
			end = s.atMs[s.cur+1]
		}
		if t := nowMs + e/rate*1000; t < end {
			return t
		}
		e -= (end - nowMs) / 1000 * rate
		nowMs = end
		s.cur++
	}
}

// factorAt is the schedule's multiplier at tMs.
func (s *schedule) factorAt(tMs float64) float64 {
	if s == nil {
		return 1
	}
	i := len(s.atMs)
	for i > 0 && s.atMs[i-1] > tMs {
		i--
	}
	if i == 0 {
		return 1
	}
	return s.factor[i-1]
}
