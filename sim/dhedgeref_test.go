package sim

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// refDHedge is a reference model of d-Hedge (LÆDGE §2.3) written from the
// paper's text, sharing no code with the bench: per shard two
// single-worker leaves, each with its own FIFO queue; a query goes to a
// leaf chosen at random; if it has not been answered d after it was sent,
// a copy joins the other leaf's queue; the first copy to finish answers
// and the other is cancelled (taken out of its queue, or stopped if it
// runs), at once and for free. Cost P shared by the copies, plus a hiccup
// per execution as hiccupOf says.
type refDHedge struct {
	d        float64
	hiccupMs float64
	hiccupOf func(q, c int) bool
	arrivals []refArrival
	rng      *rand.Rand
	answered map[int]float64
	// first, when set, is the leaf of each query's first copy (a replay of
	// the bench's random choices); otherwise rng chooses.
	first map[int]int

	now    float64
	seq    uint64
	events refHeap
	leaves map[int]*[2]refLeaf
	// hiccupProb is used when hiccupOf is nil.
	hiccupProb float64
	// Variants (not the paper's): lowHedge serves a hedge only when no
	// first copy waits at its leaf; fromStart counts the delay from the
	// first copy's start of service instead of from its sending.
	lowHedge, fromStart bool
	// where[q] is the leaf of each copy of query q, in the order sent
	where map[*refQuery][]int
}

type refLeaf struct {
	run   *refCopy
	queue []*refQuery
	low   []*refQuery // hedges, with lowHedge
}

func (m *refDHedge) at(e refEvent) {
	m.seq++
	e.seq = m.seq
	heap.Push(&m.events, e)
}

func (m *refDHedge) startNext(s, l int) {
	lf := &m.leaves[s][l]
	for lf.run == nil && len(lf.queue)+len(lf.low) > 0 {
		var q *refQuery
		if len(lf.queue) > 0 {
			q = lf.queue[0]
			lf.queue = lf.queue[1:]
		} else {
			q = lf.low[0]
			lf.low = lf.low[1:]
		}
		if q.done {
			continue
		}
		m.seq++
		lf.run = &refCopy{q: q, start: m.now, ver: m.seq}
		d := q.p
		c := 0
		if w := m.where[q]; len(w) > 1 && w[1] == l {
			c = 1
		}
		if m.hiccupOf != nil && m.hiccupOf(q.id, c) || m.hiccupOf == nil && m.rng.Float64() < m.hiccupProb {
			d += m.hiccupMs
		}
		if m.fromStart && c == 0 {
			m.at(refEvent{t: m.now + m.d, kind: 3, shard: s, q: q})
		}
		m.at(refEvent{t: m.now + d, kind: 1, shard: s, leaf: l, ver: lf.run.ver})
	}
}

func (m *refDHedge) run() {
	m.answered = map[int]float64{}
	m.leaves = map[int]*[2]refLeaf{}
	for i, a := range m.arrivals {
		m.at(refEvent{t: a.t, kind: 2, shard: a.shard, n: i})
	}
	m.where = map[*refQuery][]int{}
	where := m.where
	for m.events.Len() > 0 {
		e := heap.Pop(&m.events).(refEvent)
		m.now = e.t
		switch e.kind {
		case 2:
			a := m.arrivals[e.n]
			if m.leaves[a.shard] == nil {
				m.leaves[a.shard] = &[2]refLeaf{}
			}
			q := &refQuery{id: e.n, p: a.p}
			l, ok := m.first[e.n]
			if !ok {
				l = m.rng.IntN(2)
			}
			where[q] = []int{l}
			lf := &m.leaves[a.shard][l]
			lf.queue = append(lf.queue, q)
			if !m.fromStart {
				m.at(refEvent{t: m.now + m.d, kind: 3, shard: a.shard, q: q})
			}
			m.startNext(a.shard, l)
		case 3:
			q := e.q
			if q.done || len(where[q]) > 1 {
				continue
			}
			l := 1 - where[q][0]
			where[q] = append(where[q], l)
			lf := &m.leaves[e.shard][l]
			if m.lowHedge {
				lf.low = append(lf.low, q)
			} else {
				lf.queue = append(lf.queue, q)
			}
			m.startNext(e.shard, l)
		case 1:
			lf := &m.leaves[e.shard][e.leaf]
			if lf.run == nil || lf.run.ver != e.ver {
				continue
			}
			q := lf.run.q
			lf.run = nil
			if !q.done {
				q.done = true
				m.answered[q.id] = m.now
				// cancel the other copy: stop it if it runs (a queued
				// one is skipped when it reaches the head)
				for _, l := range where[q] {
					if o := &m.leaves[e.shard][l]; l != e.leaf && o.run != nil && o.run.q == q {
						o.run = nil
						m.startNext(e.shard, l)
					}
				}
			}
			m.startNext(e.shard, e.leaf)
		}
	}
}

// replayDHedge runs arm label of laedge-collapse.yaml on one shard at load
// u with hiccups hashed from (query, copy), then the reference on the same
// arrivals, and returns the differing queries and the bench's and the
// reference's answers.
func replayDHedge(t *testing.T, label string, u, prob float64, requests int) (differ []int, bench, ref map[int]float64, arr []refArrival) {
	t.Helper()
	c, err := LoadHedging("../examples/hedging/laedge-collapse.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Shards, c.Fanout, c.Requests, c.Warmup = 1, 1, requests, 0
	hic := func(q, cp int) bool {
		return rand.New(rand.NewPCG(uint64(q), uint64(cp)+99)).Float64() < prob
	}
	c.hiccupOf = hic
	c.onQuery = func(q int, at time.Duration, shard int, cost float64) {
		arr = append(arr, refArrival{t: float64(at) / 1e6, shard: shard, p: float64(time.Duration(cost*1e6)) / 1e6})
	}
	first := map[int]int{}
	c.onSend = func(q, cp, r int) {
		if cp == 0 {
			first[q] = r
		}
	}
	bench = map[int]float64{}
	c.onAnswer = func(q int, at time.Duration) { bench[q] = float64(at) / 1e6 }
	arm := benchArm(t, c, label)
	if _, err := c.RunBench(*arm, u, 1); err != nil {
		t.Fatal(err)
	}
	m := &refDHedge{d: 5, hiccupMs: c.HiccupMs, hiccupOf: hic, arrivals: arr, first: first, rng: rand.New(rand.NewPCG(1, 7))}
	m.run()
	for q := range arr {
		if math.Abs(bench[q]-m.answered[q]) > 1e-5 {
			differ = append(differ, q)
		}
	}
	return differ, bench, m.answered, arr
}

// refRequests draws n Poisson requests at rate (per ms), each querying
// every one of shards shards with an exponential cost of mean 1: the
// arrivals in order, and each arrival's request.
func refRequests(rng *rand.Rand, n, shards int, rate float64) (arr []refArrival, req []int) {
	t := 0.0
	for i := 0; i < n; i++ {
		for s := 0; s < shards; s++ {
			arr = append(arr, refArrival{t: t, shard: s, p: rng.ExpFloat64()})
			req = append(req, i)
		}
		t += rng.ExpFloat64() / rate
	}
	return arr, req
}

// refTail is the P99 of the requests after warmup, each ending with its
// slowest query.
func refTail(arr []refArrival, req []int, answered map[int]float64, warmup, n int) float64 {
	end := make([]float64, n)
	start := make([]float64, n)
	for i, a := range arr {
		start[req[i]] = a.t
		end[req[i]] = math.Max(end[req[i]], answered[i])
	}
	var lat []float64
	for r := warmup; r < n; r++ {
		lat = append(lat, end[r]-start[r])
	}
	sort.Float64s(lat)
	return refP99(lat)
}

// The bench's d-hedge (d = 5 P̄, running copies stopped) answers every
// query at the time a reference model written from LÆDGE's text does, on
// the same arrivals, costs, hiccups and first replicas: its hedge joins
// the other replica's FIFO queue at the tail d after the first copy was
// sent, and the loser is purged at once when the winner ends.
func TestDHedgeMatchesTheReferenceModelEventForEvent(t *testing.T) {
	for _, u := range []float64{0.45, 0.7} {
		differ, _, _, arr := replayDHedge(t, "d-hedge-5P", u, 0.02, 3000)
		if len(differ) > 0 {
			t.Errorf("d-hedge at %.0f%%: %d of %d answers differ from the reference, the first query %d", u*100, len(differ), len(arr), differ[0])
		}
	}
}
