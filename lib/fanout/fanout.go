// Package fanout holds the rule that names a request's blocking backend
// (paper §2.1, docs/algorithms.md): a request fans out into parallel
// queries, one batch per backend, and is as slow as the batch that finished
// last; that batch's backend blocked it. The app server, the simulator and
// any other source of request records use this one rule.
package fanout

import "cmp"

// Call is one backend's batch within one layer of a request.
type Call[T cmp.Ordered] struct {
	// Done is when the batch's last value became available, or when it
	// failed (any ordered clock: time since the request started, simulated
	// time).
	Done T
	// Failed marks a batch that did not get its values.
	Failed bool
	// Empty marks a batch without queries; it cannot block.
	Empty bool
}

// Blocking returns the index of the call that blocked a layer and whether
// the layer failed. The blocker is the call that finished last; when calls
// failed, the failed call that finished last (a failure decides the
// request's outcome, whatever else was slower). Ties go to the later index.
// index is -1 when no call has queries.
func Blocking[T cmp.Ordered](calls []Call[T]) (index int, failed bool) {
	index = -1
	for i, c := range calls {
		if c.Empty {
			continue
		}
		if c.Failed && !failed {
			failed, index = true, -1
		}
		if failed && !c.Failed {
			continue
		}
		if index < 0 || c.Done >= calls[index].Done {
			index = i
		}
	}
	return index, failed
}
