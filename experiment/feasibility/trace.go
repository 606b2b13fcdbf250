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
	sizes := make([]int64, budget)
	for m := 1; m <= budget; m++ {
		sizes[m-1] = int64(m) * MiB * int64(appServers)
	}
	b, err := mrc.New(mrc.Options{Sizes: sizes})
	if err != nil {
		return nil, err
	}
	uncacheable := map[string]int64{}
	limit := float64(duration.Milliseconds())
	var lastMs float64
	err = mrc.EachRequest(path, func(r *trace.Request) {
		if r.HasTs && r.TsMs >= limit {
			return
		}
		if r.HasTs {
			lastMs = r.TsMs
		}
		b.Add(r)
		for _, l := range r.Layers {
			for i := range l {
				for _, c := range l[i].Cacheable {
					if !c {
						uncacheable[l[i].Backend]++
					}
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
	return out, nil
}
