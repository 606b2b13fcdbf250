package model

import "math"

// Projected is one backend as an online projection starts from it: its
// demand, its capacity and how that moves, and what its partition holds.
type Projected struct {
	Backend
	// Capacity is queries/s now (+Inf: no bound); CapacitySlope its change
	// per second over the projection (a falling capacity's trend; it
	// never takes the capacity below a tenth of now's).
	Capacity, CapacitySlope float64
	// HeldMB is what one app server's partition holds now (MiB of the
	// curve's sizes); a partition given more fills towards it.
	HeldMB float64
	// Queue is the backlog now, queries; TimeoutS gives up a query waiting
	// longer (QueueStep).
	Queue, TimeoutS float64
	// MeanValueBytes is the size of a value: how much a partition gains
	// per answered miss (0: it never fills).
	MeanValueBytes float64
}

// Outcome is a projection's summary over its horizon.
type Outcome struct {
	// Overload sums, second by second, the worst backend's demand (its
	// arrivals and its backlog) beyond what it can answer in the second, in
	// seconds of its capacity: the wait its backlog adds, summed (a backend
	// that answers nothing counts its timeout and one second).
	Overload float64
	// Pressure sums, second by second, the worst backend's utilization
	// beyond target.
	Pressure float64
	// Final is the worst utilization at the horizon's end.
	Final float64
}

// Project steps the transient arithmetic (QueueStep, FillMiB) second by
// second over horizonS seconds for an allocation (MiB per backend on each
// of apps app servers): a partition shrinks at once and grows only with the
// values of the misses its backend answers; a backend's backlog drains only
// below its capacity. It is the online planner's look ahead at what a move
// costs and when its gain arrives.
func Project(bs []Projected, alloc []float64, apps float64, horizonS int, target float64) Outcome {
	held := make([]float64, len(bs))
	queue := make([]float64, len(bs))
	for i, b := range bs {
		held[i] = math.Min(b.HeldMB, alloc[i])
		queue[i] = b.Queue
	}
	var o Outcome
	for t := 1; t <= horizonS; t++ {
		over, press, worst := 0.0, 0.0, 0.0
		for i, b := range bs {
			c := b.Capacity
			if !math.IsInf(c, 1) && b.CapacitySlope < 0 {
				c = math.Max(c+b.CapacitySlope*float64(t), c/10)
			}
			mr := MissAt(b.MissRatio, held[i])
			load := b.CacheableRate*mr + b.UncacheableRate
			u := 0.0
			if !math.IsInf(c, 1) {
				u = load / c
				if c > 0 {
					over = math.Max(over, math.Max((queue[i]+load)/c-1, 0))
				} else {
					over = math.Max(over, 1+b.TimeoutS)
				}
			}
			press = math.Max(press, math.Max(u-target, 0))
			worst = math.Max(worst, u)
			out, q := QueueStep(queue[i], load, c, 1, b.TimeoutS)
			queue[i] = q
			if load > 0 && held[i] < alloc[i] {
				misses := out * b.CacheableRate * mr / load
				held[i] = math.Min(alloc[i], held[i]+FillMiB(misses, b.MeanValueBytes, apps))
			}
		}
		o.Overload += over
		o.Pressure += press
		o.Final = worst
	}
	return o
}
