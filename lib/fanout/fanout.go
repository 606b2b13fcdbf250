// Package fanout holds the rule that names a request's blocking backend
// (paper §2.1, docs/algorithms.md "The blocking backend"): a request fans
// out into parallel queries, one batch per backend, and is as slow as the
// batch that finished last; that batch's backend blocked it.
//
// This is the one rule of the project. The Go app server, the simulator and
// the RBC server's OTLP assembler call Blocking; the Python reporter
// (robinhood_report.fanout.blocking) implements the same rule, and every
// implementation passes the cases of tests/vectors/blocking.json.
package fanout

import "cmp"

// Call is one backend's batch (or one query) of a request.
type Call[T cmp.Ordered] struct {
	// Backend is the batch's backend id; the smaller id wins a tie.
	Backend int
	// Done is when the batch's last value became available, or when it
	// failed (any ordered clock: time since the request started, simulated
	// time, Unix nanoseconds).
	Done T
	// NoEnd marks a batch that had not ended when the request did (it was
	// abandoned, or its end is unknown): it ended after every batch that
	// did, and Done is not read.
	NoEnd bool
	// Failed marks a batch that did not get its values.
	Failed bool
	// Empty marks a batch without queries; it cannot block.
	Empty bool
}

// Blocking returns the index of the call that blocked the request and
// whether the request failed:
//
//  1. a call without queries (Empty) never blocks;
//  2. when any call failed, the request failed and only failed calls can
//     block (a failure decides the request's outcome, whatever else was
//     slower): the request counts against the backend that failed it;
//  3. the blocker is the candidate that ended last, a call with no end
//     counting as later than every call that ended;
//  4. ties (equal ends, or several calls with no end) go to the smallest
//     backend id, then to the earlier index, so the answer does not depend
//     on the order in which calls are listed or reported.
//
// index is -1 (and failed false) when no call has queries: such a request
// has no blocking backend and is not reported.
func Blocking[T cmp.Ordered](calls []Call[T]) (index int, failed bool) {
	index = -1
	for i := range calls {
		c := &calls[i]
		if c.Empty {
			continue
		}
		if c.Failed && !failed {
			failed, index = true, -1
		}
		if failed && !c.Failed {
			continue
		}
		if index < 0 || later(c, &calls[index]) {
			index = i
		}
	}
	return index, failed
}

// later reports whether a blocks rather than b: it ended later, or at the
// same time with a smaller backend id.
func later[T cmp.Ordered](a, b *Call[T]) bool {
	switch {
	case a.NoEnd != b.NoEnd:
		return a.NoEnd
	case !a.NoEnd && a.Done != b.Done:
		return a.Done > b.Done
	}
	return a.Backend < b.Backend
}
