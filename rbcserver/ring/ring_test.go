package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// model is the obvious implementation Ring is checked against: a slice of
// all records ever appended.
type model struct {
	at      []int64
	lat, be []uint32
}

func (m *model) append(at int64, lat, be []uint32) {
	if len(m.at) > 0 {
		at = max(at, m.at[len(m.at)-1])
	}
	for i := range lat {
		m.at = append(m.at, at)
		m.lat = append(m.lat, lat[i])
		m.be = append(m.be, be[i])
	}
}

func (m *model) window(capacity int, since int64) (lat, be []uint32) {
	start := max(0, len(m.at)-capacity)
	for i := start; i < len(m.at); i++ {
		if m.at[i] >= since {
			lat = append(lat, m.lat[i])
			be = append(be, m.be[i])
		}
	}
	return lat, be
}

func seq(from, n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(from + i)
	}
	return s
}

func TestNewRejectsBadCapacity(t *testing.T) {
	for _, c := range []int{0, -1} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%d) succeeded", c)
		}
	}
}

func TestWrapAround(t *testing.T) {
	r, _ := New(5)
	r.Append(1, seq(0, 3), seq(100, 3)) // 0 1 2
	r.Append(2, seq(3, 4), seq(103, 4)) // 3 4 5 6 → wraps, 0 and 1 are overwritten
	if r.Len() != 5 {
		t.Fatalf("Len = %d, want 5", r.Len())
	}
	lat, be := r.Window(0, nil, nil)
	if want := seq(2, 5); !slices.Equal(lat, want) {
		t.Fatalf("latencies %v, want %v (oldest first)", lat, want)
	}
	if want := seq(102, 5); !slices.Equal(be, want) {
		t.Fatalf("backends %v, want %v", be, want)
	}
	// The window since time 2 is exactly the second batch.
	lat, _ = r.Window(2, nil, nil)
	if want := seq(3, 4); !slices.Equal(lat, want) {
		t.Fatalf("window since 2: %v, want %v", lat, want)
	}
}

func TestBatchLargerThanRing(t *testing.T) {
	r, _ := New(4)
	r.Append(1, seq(0, 2), seq(0, 2))
	r.Append(2, seq(10, 11), seq(50, 11)) // keeps 17 18 19 20
	lat, be := r.Window(0, nil, nil)
	if want := seq(17, 4); !slices.Equal(lat, want) {
		t.Fatalf("latencies %v, want %v", lat, want)
	}
	if want := seq(57, 4); !slices.Equal(be, want) {
		t.Fatalf("backends %v, want %v", be, want)
	}
}

func TestWindowExpiresByTime(t *testing.T) {
	r, _ := New(100)
	for sec := int64(1); sec <= 10; sec++ {
		r.Append(sec*1e9, seq(int(sec)*10, 3), seq(0, 3))
	}
	// Records with arrival ≥ 8 s: the batches of seconds 8, 9 and 10.
	lat, _ := r.Window(8e9, nil, nil)
	want := append(append(seq(80, 3), seq(90, 3)...), seq(100, 3)...)
	if !slices.Equal(lat, want) {
		t.Fatalf("window since 8 s: %v, want %v", lat, want)
	}
	// Just after 10 s nothing is left; exactly at 10 s the last batch is.
	if lat, _ := r.Window(10e9+1, nil, nil); len(lat) != 0 {
		t.Fatalf("window after the newest record: %v, want empty", lat)
	}
	if lat, _ := r.Window(10e9, nil, nil); !slices.Equal(lat, seq(100, 3)) {
		t.Fatalf("window at the newest arrival: %v", lat)
	}
}

func TestArrivalGoingBackwardsIsClamped(t *testing.T) {
	r, _ := New(10)
	r.Append(5, seq(0, 2), seq(0, 2))
	r.Append(3, seq(2, 2), seq(0, 2)) // stored as arrival 5
	if lat, _ := r.Window(4, nil, nil); !slices.Equal(lat, seq(0, 4)) {
		t.Fatalf("window since 4: %v, want all four records", lat)
	}
	if lat, _ := r.Window(6, nil, nil); len(lat) != 0 {
		t.Fatalf("window since 6: %v, want empty", lat)
	}
}

func TestEmptyBatchAndEmptyRing(t *testing.T) {
	r, _ := New(3)
	if lat, be := r.Window(0, nil, nil); len(lat) != 0 || len(be) != 0 {
		t.Fatalf("empty ring returned %v %v", lat, be)
	}
	r.Append(1, nil, nil)
	if r.Len() != 0 {
		t.Fatalf("empty batch stored %d records", r.Len())
	}
}

func TestAppendPanicsOnMismatchedArrays(t *testing.T) {
	r, _ := New(3)
	defer func() {
		if recover() == nil {
			t.Fatal("Append with arrays of different length did not panic")
		}
	}()
	r.Append(1, seq(0, 2), seq(0, 1))
}

func TestWindowReusesBuffers(t *testing.T) {
	r, _ := New(8)
	r.Append(1, seq(0, 6), seq(0, 6))
	lat, be := make([]uint32, 0, 8), make([]uint32, 0, 8)
	gotLat, gotBe := r.Window(0, lat, be)
	if &gotLat[0] != &lat[:1][0] || &gotBe[0] != &be[:1][0] {
		t.Fatal("Window reallocated buffers that were large enough")
	}
}

// TestMatchesModel appends random batches at random times into rings of
// several capacities and compares every window with the model.
func TestMatchesModel(t *testing.T) {
	rnd := rand.New(rand.NewPCG(11, 12))
	for _, capacity := range []int{1, 2, 3, 7, 64, 1000} {
		r, _ := New(capacity)
		var m model
		var now int64
		var lat, be []uint32
		for step := range 500 {
			now += int64(rnd.IntN(3)) // time stands still or advances
			if rnd.IntN(20) == 0 {
				now -= 2 // a clock step backwards
			}
			n := rnd.IntN(2 * capacity)
			bl, bb := seq(step*10000, n), seq(step, n)
			r.Append(now, bl, bb)
			m.append(now, bl, bb)
			since := now - int64(rnd.IntN(10))
			lat, be = r.Window(since, lat, be)
			wl, wb := m.window(capacity, since)
			if !slices.Equal(lat, wl) || !slices.Equal(be, wb) {
				t.Fatalf("cap %d step %d since %d:\n ring  %v %v\n model %v %v", capacity, step, since, lat, be, wl, wb)
			}
			if r.Len() != min(len(m.at), capacity) {
				t.Fatalf("cap %d step %d: Len = %d, want %d", capacity, step, r.Len(), min(len(m.at), capacity))
			}
		}
	}
}

// TestConcurrentAppendAndWindow runs writers and readers together (run it
// with -race). Every window must be a run of whole, ordered batches.
func TestConcurrentAppendAndWindow(t *testing.T) {
	r, _ := New(1000)
	const writers, batches, size = 4, 300, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range batches {
				lat := make([]uint32, size)
				for j := range lat {
					lat[j] = uint32(w)<<16 | uint32(i)
				}
				r.Append(int64(i), lat, slices.Repeat([]uint32{uint32(w)}, size))
			}
		})
	}
	done := make(chan struct{})
	var rerr error
	go func() {
		defer close(done)
		var lat, be []uint32
		for range 200 {
			lat, be = r.Window(0, lat, be)
			for j := range lat {
				if lat[j]>>16 != be[j] {
					rerr = fmt.Errorf("record %d: latency from writer %d but backend %d", j, lat[j]>>16, be[j])
					return
				}
			}
		}
	}()
	wg.Wait()
	<-done
	if rerr != nil {
		t.Fatal(rerr)
	}
	if r.Len() != 1000 {
		t.Fatalf("Len = %d, want 1000", r.Len())
	}
}

func BenchmarkAppend1000(b *testing.B) {
	r, _ := New(1_000_000)
	lat, be := seq(0, 1000), seq(0, 1000)
	b.SetBytes(1000 * 8)
	b.ReportAllocs()
	var at int64
	for b.Loop() {
		at++
		r.Append(at, lat, be)
	}
}

func BenchmarkWindow1M(b *testing.B) {
	r, _ := New(1_000_000)
	lat, be := seq(0, 1000), seq(0, 1000)
	for i := range 1000 {
		r.Append(int64(i), lat, be)
	}
	var dl, db []uint32
	b.ReportAllocs()
	for b.Loop() {
		dl, db = r.Window(0, dl, db)
	}
}
