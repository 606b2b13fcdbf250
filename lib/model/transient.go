package model

import "math"

// The transient arithmetic (docs/algorithms.md, "The transient model"): a
// partition given more space fills only with the values of the misses its
// backend answers, and a backlog outlives the overload that built it. The
// oracle steps it second by second (experiment/feasibility).

// FillMiB is how many MiB of values one app server's partition gains when
// its backend answers misses cacheable misses of meanBytes each: the
// misses of every app server, each filling its own partition (apps of
// them).
func FillMiB(misses, meanBytes, apps float64) float64 {
	if apps <= 0 {
		return 0
	}
	return misses * meanBytes / MiB / apps
}

// QueueStep advances a backend's backlog by dt seconds: q0 queries waiting,
// in arriving, mu answered per second at most (+Inf: no bound, 0: none).
// A query waiting longer than timeout seconds is given up, so the backlog
// never holds more than mu·timeout. It returns the queries answered and
// the backlog after.
func QueueStep(q0, in, mu, dt, timeout float64) (out, q1 float64) {
	switch {
	case mu <= 0:
		return 0, q0 + in
	case math.IsInf(mu, 1):
		return q0 + in, 0
	}
	out = math.Min(q0+in, mu*dt)
	return out, math.Min(q0+in-out, mu*timeout)
}
