package feasibility

import (
	"sort"
	"time"

	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/mrc"
)

// FromTrace measures every backend's demand on one of appServers app
// servers from the requests of a trace file sent before duration: its query
// rates and its exact miss-ratio curve at 0 … budget MiB (read at
// appServers × the size, see the package comment).
func FromTrace(path string, duration time.Duration, appServers, budget int) ([]Backend, error) {
	return Measure(path, duration, appServers, budget, nil)
}

// Measure is FromTrace that also measures, in the same pass over the trace,
// each phase's own query rates and sets them as the phase's Rates: per
// backend, the cacheable and uncacheable queries of the requests whose
// ts_ms falls in [Start, End), over the part of the phase the trace covers
// (up to its last ts_ms), per app server. The miss-ratio curves are the
// whole trace's. A phase the trace does not reach, or a trace without
// ts_ms, keeps the whole-trace rates (no Rates). The phases must be in
// time order and not overlap (as Phases returns them).
func Measure(path string, duration time.Duration, appServers, budget int, phases []Phase) ([]Backend, error) {
	sizes := make([]int64, budget)
	for m := 1; m <= budget; m++ {
		sizes[m-1] = int64(m) * MiB * int64(appServers)
	}
	b, err := mrc.New(mrc.Options{Sizes: sizes})
	if err != nil {
		return nil, err
	}
	uncacheable := map[string]int64{}
	// counts[i][backend] are phase i's {cacheable, uncacheable} queries.
	counts := make([]map[string]*[2]int64, len(phases))
	for i := range counts {
		counts[i] = map[string]*[2]int64{}
	}
	limit := float64(duration.Milliseconds())
	var lastMs, maxMs float64
	err = mrc.EachRequest(path, func(r *trace.Request) {
		if r.HasTs && r.TsMs >= limit {
			return
		}
		if r.HasTs {
			lastMs = r.TsMs
			maxMs = max(maxMs, r.TsMs)
		}
		b.Add(r)
		var phase map[string]*[2]int64
		if r.HasTs && len(phases) > 0 {
			at := time.Duration(r.TsMs * float64(time.Millisecond))
			if i := sort.Search(len(phases), func(i int) bool { return phases[i].End > at }); i < len(phases) && at >= phases[i].Start {
				phase = counts[i]
			}
		}
		for _, l := range r.Layers {
			for i := range l {
				var c, u int64
				for _, ok := range l[i].Cacheable {
					if ok {
						c++
					} else {
						u++
					}
				}
				if u > 0 {
					uncacheable[l[i].Backend] += u
				}
				if phase != nil {
					n := phase[l[i].Backend]
					if n == nil {
						n = &[2]int64{}
						phase[l[i].Backend] = n
					}
					n[0] += c
					n[1] += u
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	secs := duration.Seconds()
	if lastMs > 0 && lastMs/1000 < secs {
		secs = lastMs / 1000 // a trace shorter than the run
	}
	n := float64(appServers)
	var out []Backend
	for _, c := range b.Curves() {
		mr := make([]float64, budget+1)
		mr[0] = 1
		for i, p := range c.Points {
			mr[i+1] = p.MissRatio
		}
		out = append(out, Backend{
			Name:            c.Backend,
			CacheableRate:   float64(c.Accesses) / secs / n,
			UncacheableRate: float64(uncacheable[c.Backend]) / secs / n,
			MissRatio:       mr,
		})
	}
	for name, u := range uncacheable { // backends with only uncacheable queries
		found := false
		for _, o := range out {
			found = found || o.Name == name
		}
		if !found {
			mr := make([]float64, budget+1)
			for i := range mr {
				mr[i] = 1
			}
			out = append(out, Backend{Name: name, UncacheableRate: float64(u) / secs / n, MissRatio: mr})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	end := time.Duration(maxMs * float64(time.Millisecond))
	for i := range phases {
		ph := &phases[i]
		covered := (min(ph.End, end) - ph.Start).Seconds()
		if maxMs == 0 || covered <= 0 {
			ph.Rates = nil
			continue
		}
		ph.Rates = map[string]Rates{}
		for _, be := range out {
			var c [2]int64
			if v := counts[i][be.Name]; v != nil {
				c = *v
			}
			ph.Rates[be.Name] = Rates{Cacheable: float64(c[0]) / covered / n, Uncacheable: float64(c[1]) / covered / n}
		}
	}
	return out, nil
}
