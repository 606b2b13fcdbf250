package synth

import (
	"fmt"
	"sort"
	"strings"
)

// Target is what a profile asks of one backend. The generator fits a mix of
// request types that meets PairShare and Fanout exactly (up to the fit's
// tolerance) and then sets per-type batch sizes that meet Batch exactly in
// expectation.
type Target struct {
	// PairShare is the backend's share of (request, backend) pairs: the
	// fraction of all "request r queries backend b" incidences that are b's.
	// Shares sum to 1 over the backends.
	PairShare float64
	// Fanout is the mean number of distinct backends in the requests that
	// query this backend (≥ 1).
	Fanout float64
	// FreeFanout makes Fanout a hint for the type structure only: the fit
	// does not enforce it.
	FreeFanout bool
	// QueryShare is the backend's share of all queries. It is a target only
	// in MatchQuery mode; in MatchBatch mode it is what the batch sizes give.
	QueryShare float64
	// Batch is the mean number of queries to this backend in the requests
	// that query it (≥ 1). In MatchQuery mode it is derived after the fit
	// from QueryShare and the queries per request.
	Batch float64
}

// Match selects which of Table 1's two mutually inconsistent columns (query %
// and mean batch size) a profile reproduces; request % and fanout are always
// reproduced. docs/workloads.md explains the inconsistency.
type Match string

const (
	// MatchQuery reproduces query % and the paper's ≈50 queries per request
	// (§4.1, §4.3); batch sizes follow from them.
	MatchQuery Match = "query"
	// MatchBatch reproduces the mean batch sizes as published; query % and
	// queries per request follow from them.
	MatchBatch Match = "batch"
)

// Profile describes a family of workloads: per-backend targets for any
// number of backends.
type Profile struct {
	// Name is the --profile value.
	Name string
	// Doc is one line for --help.
	Doc string
	// Targets returns the targets of n backends, in order (the first is the
	// most queried). It fails when the profile cannot describe n backends.
	Targets func(n int, m Match) ([]Target, error)
}

var profiles = map[string]Profile{}

// Register adds a profile; it panics on a duplicate name (a programming
// error caught at start-up).
func Register(p Profile) {
	if _, dup := profiles[p.Name]; dup {
		panic("synth: profile " + p.Name + " registered twice")
	}
	profiles[p.Name] = p
}

// Lookup returns the named profile.
func Lookup(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("profile %q is unknown (known: %s)", name, strings.Join(ProfileNames(), ", "))
	}
	return p, nil
}

// ProfileNames returns the registered profile names, sorted.
func ProfileNames() []string {
	out := make([]string, 0, len(profiles))
	for n := range profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Table1Row is one row of the paper's Table 1 (percentages as printed).
type Table1Row struct {
	QueryPct, RequestPct, Batch, Fanout float64
}

// Table1 is Table 1 of the paper: the ten most queried OneRF backends, most
// queried first.
var Table1 = [10]Table1Row{
	{37.7, 14.7, 15.4, 5.6},
	{16.0, 4.5, 32.3, 7.4},
	{15.3, 4.5, 25.7, 7.4},
	{14.0, 20.0, 1.6, 4.8},
	{7.7, 19.0, 1.9, 4.9},
	{4.2, 4.7, 14.5, 7.3},
	{2.4, 10.8, 2.0, 5.3},
	{1.6, 15.5, 1.0, 5.3},
	{0.7, 3.4, 2.0, 7.5},
	{0.2, 0.7, 2.5, 9.1},
}

// ExtraDecay is the factor by which each backend beyond Table 1's ten has a
// smaller request and query share than the one before it.
const ExtraDecay = 0.7

// DefaultBackends is the onerf default: the paper's testbed replicates the
// 20 most queried OneRF backends (§4.3).
const DefaultBackends = 20

func init() {
	Register(Profile{
		Name:    "onerf",
		Doc:     "the request structure of the paper's Table 1 (OneRF), extended to N backends",
		Targets: onerfTargets,
	})
}

// onerfTargets implements the onerf profile (docs/workloads.md):
//   - n ≥ 10: Table 1's rows for the first ten; backend 10+k (k ≥ 1) has
//     backend 10's fanout and batch size and ExtraDecay^k times its request
//     and query shares, so the ten stay the most queried and the extras share
//     the small remainder;
//   - n < 10: the first n rows. Their fanouts (up to 9.1) cannot be met with
//     fewer than ten backends, so they are scaled towards 1 by (n−1)/9 and
//     used only to draw the type structure; the fit does not enforce them.
//
// Request and query shares are then normalized to sum to 1 (the printed
// columns sum to 97.8% and 99.8%).
func onerfTargets(n int, m Match) ([]Target, error) {
	if n < 1 {
		return nil, fmt.Errorf("backends: %d must be at least 1", n)
	}
	out := make([]Target, n)
	for i := range out {
		row := Table1[min(i, len(Table1)-1)]
		share, qshare := row.RequestPct/100, row.QueryPct/100
		if i >= len(Table1) {
			decay := pow(ExtraDecay, i-len(Table1)+1)
			share *= decay
			qshare *= decay
		}
		f := row.Fanout
		if n < len(Table1) {
			f = 1 + (f-1)*float64(n-1)/float64(len(Table1)-1)
		}
		out[i] = Target{PairShare: share, Fanout: f, FreeFanout: n < len(Table1), QueryShare: qshare}
		if m == MatchBatch {
			out[i].Batch = row.Batch
		}
	}
	var ps, qs float64
	for _, t := range out {
		ps += t.PairShare
		qs += t.QueryShare
	}
	for i := range out {
		out[i].PairShare /= ps
		out[i].QueryShare /= qs
	}
	return out, nil
}

func pow(x float64, k int) float64 {
	r := 1.0
	for ; k > 0; k-- {
		r *= x
	}
	return r
}
