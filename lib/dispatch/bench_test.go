package dispatch

import (
	"testing"
	"time"
)

// BenchmarkDecision is each policy's decision cost per batch: Arrive, then
// Done for every copy it sends (the first OK, a cancelled one Cancelled),
// on a Machine with 2 replicas and no I/O (docs/benchmarks.md):
//
//	go test -run '^$' -bench Decision -benchmem ./lib/dispatch/
func BenchmarkDecision(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			m, err := New(name, nil, Env{Replicas: 2, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			var now time.Duration
			var open []int // copies sent and not yet Done
			collect := func(bt *Batch, acts []Action) {
				for _, a := range acts {
					if a.Kind == Send && a.Batch == bt {
						open = append(open, a.Copy)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now += 100 * time.Microsecond
				bt := NewBatch(uint64(i+1), now)
				open = open[:0]
				collect(bt, m.Arrive(now, bt))
				for k := 0; k < len(open); k++ {
					c := open[k]
					st := OK
					if bt.Copies[c].Cancelling {
						st = Cancelled
					}
					now += 10 * time.Microsecond
					collect(bt, m.Done(now, bt, c, st))
				}
				if !bt.Finished() {
					b.Fatalf("%s: batch %d not finished", name, i)
				}
			}
		})
	}
}
