package sim

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/shadow"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// The pipe gives every shadow model the queries it would have seen in line,
// in the same order: at every sync the shadow hits and the models' state
// are the in-line ones, whatever the batch boundaries.
func TestShadowPipeEqualsInLine(t *testing.T) {
	mk := func() []*partition {
		var ps []*partition
		for range 3 {
			ps = append(ps, &partition{shadow: shadow.NewByID(64<<10, 1<<20)})
		}
		return ps
	}
	inline, piped := mk(), mk()
	pipe := newShadowPipe()
	defer pipe.close()
	s := &Sim{shadows: pipe}
	rng := rand.New(rand.NewPCG(1, 2))
	limit := int64(256 << 10)
	for round := range 40 {
		n := rng.IntN(3 * shadowBatch) // sometimes less than a batch, sometimes several
		for range n {
			p := rng.IntN(3)
			id := int32(rng.IntN(2000))
			size := int64(100 + rng.IntN(900))
			hit := rng.IntN(3) > 0
			if rng.IntN(5000) == 0 {
				limit = int64(128<<10 + rng.IntN(256<<10))
			}
			if inline[p].shadow.ObserveID(id, size, hit, limit) {
				inline[p].shadowH++
			}
			s.observeShadow(piped[p], id, size, hit, limit)
		}
		pipe.sync()
		for p := range inline {
			a, b := inline[p], piped[p]
			if a.shadowH != b.shadowH || a.shadow.Effective() != b.shadow.Effective() || a.shadow.Objects() != b.shadow.Objects() {
				t.Fatalf("round %d partition %d: in line %d shadow hits (effective %d, %d objects), piped %d (%d, %d)", round, p,
					a.shadowH, a.shadow.Effective(), a.shadow.Objects(), b.shadowH, b.shadow.Effective(), b.shadow.Objects())
			}
		}
	}
	if inline[0].shadowH == 0 {
		t.Fatal("the stream should make some shadow hits")
	}
}

// The producer hands over the generator's requests in its order, and close
// stops it.
func TestSynthProducerEqualsInLine(t *testing.T) {
	o, err := synth.ParseArgs([]string{"--backends", "3", "--rate", "500", "--seed", "9", "--keys", "5000"})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	inline, err := newSynthSource(o, false)
	if err != nil {
		t.Fatal(err)
	}
	ahead, err := newSynthSource(o, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3*requestBatch + 17 {
		a, at, _ := inline.next()
		b, bt, _ := ahead.next()
		if at != bt || !reflect.DeepEqual(a, b) {
			t.Fatalf("request %d differs: %v at %v, %v at %v", i, a, at, b, bt)
		}
	}
	if ahead.where() != inline.where() {
		t.Fatalf("%s vs %s", ahead.where(), inline.where())
	}
	ahead.close()
	ahead.close() // twice is harmless
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after close, %d before: the producer should stop", n, before)
	}
}
