package stats

import (
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/loghist"
)

func TestWindowSumsPerBackendAndPerAppServer(t *testing.T) {
	s := New(time.Minute)
	t0 := time.Unix(1_000_000, 0)
	lat := func(us float64, n uint64) loghist.Sparse {
		return loghist.Sparse{Index: []uint32{uint32(loghist.Index(us))}, Count: []uint64{n}}
	}
	s.Add(t0, "app0", []Report{{Backend: 1, Hits: 10, Misses: 5, ShadowHits: 2, ShadowBytes: 1 << 20, Latency: lat(100, 15), LimitBytes: 64 << 20}})
	s.Add(t0.Add(2*time.Second), "app1", []Report{{Backend: 1, Hits: 1, Misses: 4, Latency: lat(10_000, 5), LimitBytes: 32 << 20}})
	s.Add(t0.Add(3*time.Second), "app0", []Report{{Backend: 0, Hits: 7, Latency: lat(50, 7)}})
	s.Add(t0.Add(-30*time.Second), "app0", []Report{{Backend: 1, Hits: 1000}}) // outside a 10 s window

	total, per := s.Window(t0.Add(3*time.Second), 10*time.Second)
	if len(total) != 2 || total[0].Backend != 0 || total[1].Backend != 1 {
		t.Fatalf("%+v", total)
	}
	b1 := total[1]
	if b1.Hits != 11 || b1.Misses != 9 || b1.ShadowHits != 2 || b1.ShadowBytes != 1<<20 || b1.Queries() != 20 ||
		b1.LimitBytes != 96<<20 {
		t.Fatalf("backend 1: %+v", b1)
	}
	// P99 of 15 fast and 5 slow queries is the slow bucket.
	if p := b1.Latency.Quantile(0.99); p < 9_800 || p > 10_200 {
		t.Fatalf("p99 %v", p)
	}
	if len(per["app0"]) != 2 || per["app1"][0].Hits != 1 || per["app0"][1].LimitBytes != 64<<20 {
		t.Fatalf("%+v", per)
	}
	total, _ = s.Window(t0.Add(3*time.Second), time.Minute)
	if total[1].Hits != 1011 {
		t.Fatalf("a minute back: %+v", total[1])
	}
	// Slots are reused: a minute later the old reports are gone.
	total, _ = s.Window(t0.Add(2*time.Minute), time.Minute)
	if len(total) != 0 {
		t.Fatalf("stale: %+v", total)
	}
}

func TestValidate(t *testing.T) {
	for _, r := range []Report{
		{Backend: 1024},
		{Backend: 1, Latency: loghist.Sparse{Index: []uint32{1}, Count: nil}},
		{Backend: 1, Latency: loghist.Sparse{Index: []uint32{loghist.Buckets}, Count: []uint64{1}}},
	} {
		if err := r.Validate(1024); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if err := (&Report{Backend: 3}).Validate(1024); err != nil {
		t.Fatal(err)
	}
}

func TestBackendQuantileSkipsTheHits(t *testing.T) {
	// 700 hits at 0.5 ms, 300 backend calls: 100 at 4 ms, 100 at 10 ms, 100 at 40 ms.
	c := loghist.Counts{}
	c[uint32(loghist.Index(500))] += 700
	c[uint32(loghist.Index(4000))] += 100
	c[uint32(loghist.Index(10000))] += 100
	c[uint32(loghist.Index(40000))] += 100
	s := Summary{Hits: 700, Misses: 300, Latency: c}
	near := func(got, want float64) bool { return got > want*0.97 && got < want*1.03 }
	if got := s.BackendQuantile(0.5); !near(got, 10000) {
		t.Fatalf("median of the backend calls: %v, want ~10 ms", got)
	}
	if got := s.BackendQuantile(0.9); !near(got, 40000) {
		t.Fatalf("P90 of the backend calls: %v, want ~40 ms", got)
	}
	if got := s.Latency.Quantile(0.5); !near(got, 500) {
		t.Fatalf("the median of every query is a hit's: %v", got)
	}
	if (&Summary{Hits: 5, Latency: loghist.Counts{uint32(loghist.Index(500)): 5}}).BackendQuantile(0.5) != 0 {
		t.Fatal("no backend call: 0")
	}
	if (&Summary{}).BackendQuantile(0.5) != 0 {
		t.Fatal("empty: 0")
	}
}
