package capacity

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustNew(t *testing.T, l Limits, clock Clock) *Model {
	t.Helper()
	m, err := New(l, 1, clock)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJoin(t *testing.T, m *Model, n int) []*Ticket {
	t.Helper()
	ts, err := m.Join(n)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// admitted reports whether tk has been admitted, without blocking.
func admitted(tk *Ticket) bool {
	select {
	case <-tk.ready:
		return tk.err == nil
	default:
		return false
	}
}

func countAdmitted(ts []*Ticket) int {
	n := 0
	for _, tk := range ts {
		if admitted(tk) {
			n++
		}
	}
	return n
}

func wantStats(t *testing.T, m *Model, queue, inService int) {
	t.Helper()
	if s := m.Stats(); s.QueueLength != queue || s.InService != inService {
		t.Fatalf("stats = %+v, want queue %d, in service %d", s, queue, inService)
	}
}

func TestFIFOOrder(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1}, newFakeClock())
	var ts []*Ticket
	for i := 0; i < 4; i++ {
		ts = append(ts, mustJoin(t, m, 1)...)
	}
	ts = append(ts, mustJoin(t, m, 3)...) // a batch keeps its order too
	for i, tk := range ts {
		for j, other := range ts {
			if got, want := admitted(other), j <= i; got != want && other.state != stateDone {
				t.Fatalf("step %d: ticket %d admitted=%v, want %v", i, j, got, want)
			}
		}
		wantStats(t, m, len(ts)-i-1, 1)
		tk.Release()
	}
	wantStats(t, m, 0, 0)
}

func TestFIFOOrderWithConcurrentWaiters(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1}, nil)
	const n = 64
	ts := mustJoin(t, m, n)
	index := map[*Ticket]int{}
	for i, tk := range ts {
		index[tk] = i
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	// Start the waiters in reverse order: admission must still follow the
	// queue, not the goroutines.
	for i := n - 1; i >= 0; i-- {
		wg.Add(1)
		go func(tk *Ticket) {
			defer wg.Done()
			if err := tk.Wait(context.Background()); err != nil {
				t.Error(err)
				return
			}
			_, _ = tk.Serve(context.Background(), func(context.Context) error {
				mu.Lock()
				order = append(order, index[tk])
				mu.Unlock()
				return nil
			})
		}(ts[i])
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("service order %v is not FIFO", order)
		}
	}
}

func TestWorkerLimitUnderConcurrency(t *testing.T) {
	const workers = 3
	m := mustNew(t, Limits{Workers: workers}, nil)
	var inWork, maxInWork atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := m.Acquire(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = tk.Serve(context.Background(), func(context.Context) error {
				n := inWork.Add(1)
				for {
					old := maxInWork.Load()
					if n <= old || maxInWork.CompareAndSwap(old, n) {
						break
					}
				}
				if s := m.Stats(); s.InService > workers {
					t.Errorf("in service %d > workers %d", s.InService, workers)
				}
				time.Sleep(50 * time.Microsecond)
				inWork.Add(-1)
				return nil
			})
		}()
	}
	wg.Wait()
	if got := maxInWork.Load(); got > workers || got < 1 {
		t.Fatalf("max concurrent work = %d, want 1..%d", got, workers)
	}
	wantStats(t, m, 0, 0)
	// And exactly `workers` are admitted when more wait.
	ts := mustJoin(t, m, 10)
	if got := countAdmitted(ts); got != workers {
		t.Fatalf("admitted %d of 10 waiting, want %d", got, workers)
	}
}

func TestTokenBucketPacing(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 1000, Rate: 10}, clk)
	ts := mustJoin(t, m, 7)
	if got := countAdmitted(ts); got != MinBurst {
		t.Fatalf("admitted at once = %d, want the burst %d", got, MinBurst)
	}
	clk.Advance(99 * time.Millisecond)
	if got := countAdmitted(ts); got != 2 {
		t.Fatalf("after 99ms admitted = %d, want 2", got)
	}
	clk.Advance(time.Millisecond)
	if got := countAdmitted(ts); got != 3 {
		t.Fatalf("after 100ms admitted = %d, want 3", got)
	}
	clk.Advance(400 * time.Millisecond)
	if got := countAdmitted(ts); got != 7 {
		t.Fatalf("after 500ms admitted = %d, want 7", got)
	}
	start := ts[0].joined
	for i, tk := range ts {
		want := time.Duration(max(0, i-1)) * 100 * time.Millisecond
		if got := tk.admitted.Sub(start); got != want {
			t.Errorf("ticket %d admitted at +%v, want +%v", i, got, want)
		}
	}
	if clk.pending() != 0 {
		t.Fatalf("%d timers left with an empty queue", clk.pending())
	}
}

// Property: with a backlog that never drains, the number admitted after T
// seconds is the bucket depth plus rate·T (±1 for rounding), for any rate
// and any pattern of clock steps.
func TestTokenBucketPacingProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 100; trial++ {
		rate := math.Round(math.Exp(rng.Float64()*math.Log(5000))*10) / 10
		if rate < 0.1 {
			rate = 0.1
		}
		clk := newFakeClock()
		m := mustNew(t, Limits{Workers: 1_000_000, Rate: rate}, clk)
		backlog := int(Burst(rate) + rate*2 + 10)
		ts := mustJoin(t, m, backlog)
		var elapsed time.Duration
		for step := 0; step < 20; step++ {
			d := time.Duration(rng.Int64N(int64(100 * time.Millisecond)))
			clk.Advance(d)
			elapsed += d
			want := math.Min(float64(backlog), math.Floor(Burst(rate)+rate*elapsed.Seconds()))
			got := float64(countAdmitted(ts))
			if math.Abs(got-want) > 1 {
				t.Fatalf("rate %g after %v: admitted %v, want %v±1", rate, elapsed, got, want)
			}
			if s := m.Stats(); s.InService != int(got) || s.QueueLength != backlog-int(got) {
				t.Fatalf("stats %+v disagree with %v admitted", s, got)
			}
		}
	}
}

func TestCancelledWaiterLeavesQueue(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1}, newFakeClock())
	first := mustJoin(t, m, 1)[0]
	rest := mustJoin(t, m, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- rest[0].Wait(ctx) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
	wantStats(t, m, 1, 1)
	first.Release()
	if admitted(rest[0]) || !admitted(rest[1]) {
		t.Fatal("after release the cancelled waiter was admitted instead of the next one")
	}
	wantStats(t, m, 0, 1)

	// A deadline works the same way.
	waiter := mustJoin(t, m, 1)[0]
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := waiter.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past deadline = %v", err)
	}
	wantStats(t, m, 0, 1)
}

func TestCancelAfterAdmissionGivesItBack(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 1, Rate: 10}, clk)
	ts := mustJoin(t, m, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// ts[0] is admitted, but its caller has already gone: Wait may see
	// either; if it reports the cancellation, the worker must be free again.
	if err := ts[0].Wait(ctx); err != nil {
		if !admitted(ts[1]) {
			t.Fatal("a given-back admission did not pass to the next waiter")
		}
	} else {
		ts[0].Release()
	}
	wantStats(t, m, 1, 1)
}

func TestRaisingWorkersReleasesWaiters(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1}, newFakeClock())
	ts := mustJoin(t, m, 5)
	if got := countAdmitted(ts); got != 1 {
		t.Fatalf("admitted %d, want 1", got)
	}
	w := 3
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldWorkers: float64(w)})); err != nil {
		t.Fatal(err)
	}
	if got := countAdmitted(ts); got != 3 {
		t.Fatalf("after workers=3 admitted %d, want 3", got)
	}
	w = 1
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldWorkers: float64(w)})); err != nil {
		t.Fatal(err)
	}
	ts[0].Release()
	ts[1].Release()
	if got := countAdmitted(ts[3:]); got != 0 {
		t.Fatalf("with workers=1 and one still in service, %d more were admitted", got)
	}
	ts[2].Release()
	if !admitted(ts[3]) || admitted(ts[4]) {
		t.Fatal("after the last release exactly the next waiter should be admitted")
	}
}

func TestRateChangesApplyToQueuedWork(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 1000, Rate: 100}, clk)
	ts := mustJoin(t, m, 40)
	clk.Advance(10 * time.Millisecond)
	if got := countAdmitted(ts); got != 3 {
		t.Fatalf("rate 100 after 10ms: admitted %d, want 3", got)
	}
	slow := 10.0
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldRate: float64(slow)})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(99 * time.Millisecond)
	if got := countAdmitted(ts); got != 3 {
		t.Fatalf("rate lowered to 10: admitted %d after 99ms, want still 3", got)
	}
	clk.Advance(time.Millisecond)
	if got := countAdmitted(ts); got != 4 {
		t.Fatalf("rate 10: admitted %d after 100ms, want 4", got)
	}
	fast := 1000.0
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldRate: float64(fast)})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Millisecond)
	if got := countAdmitted(ts); got != 9 {
		t.Fatalf("rate raised to 1000: admitted %d after 5ms, want 9", got)
	}
	unlimited := 0.0
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldRate: float64(unlimited)})); err != nil {
		t.Fatal(err)
	}
	if got := countAdmitted(ts); got != 40 {
		t.Fatalf("rate 0 (unlimited): admitted %d, want all 40", got)
	}
	// Back from unlimited: the bucket starts full.
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldRate: float64(slow)})); err != nil {
		t.Fatal(err)
	}
	more := mustJoin(t, m, 5)
	if got := countAdmitted(more); got != MinBurst {
		t.Fatalf("rate 10 after unlimited: admitted %d at once, want %d", got, MinBurst)
	}
}

func TestInjectedDelayAndHiccups(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 1, ExtraLatencyMs: 5, HiccupProb: 1, HiccupMs: 20}, clk)
	tk := mustJoin(t, m, 1)[0]
	if err := tk.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tk.Delay() != 25*time.Millisecond || !tk.Hiccup() {
		t.Fatalf("delay %v hiccup %v, want 25ms and a hiccup", tk.Delay(), tk.Hiccup())
	}
	type result struct {
		d   time.Duration
		err error
	}
	res := make(chan result)
	go func() {
		d, err := tk.Serve(context.Background(), func(context.Context) error { return nil })
		res <- result{d, err}
	}()
	for clk.pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	next := mustJoin(t, m, 1)[0]
	clk.Advance(24 * time.Millisecond)
	if admitted(next) {
		t.Fatal("the worker was released before the injected delay ended")
	}
	clk.Advance(time.Millisecond)
	r := <-res
	if r.err != nil || r.d != 25*time.Millisecond {
		t.Fatalf("Serve = %v, %v; want 25ms, nil", r.d, r.err)
	}
	if !admitted(next) {
		t.Fatal("the next waiter was not admitted after the delay")
	}
}

func TestHiccupDrawsFollowProbabilityAndSeed(t *testing.T) {
	draw := func(seed uint64) []bool {
		m, err := New(Limits{Workers: 1, HiccupProb: 0.3, HiccupMs: 1}, seed, newFakeClock())
		if err != nil {
			t.Fatal(err)
		}
		out := make([]bool, 2000)
		for i := range out {
			tk := mustJoin(t, m, 1)[0]
			out[i] = tk.Hiccup()
			tk.Release()
		}
		return out
	}
	a, b, c := draw(5), draw(5), draw(6)
	n, same, sameOther := 0, true, true
	for i := range a {
		if a[i] {
			n++
		}
		same = same && a[i] == b[i]
		sameOther = sameOther && a[i] == c[i]
	}
	if !same || sameOther {
		t.Fatalf("hiccups must repeat with the seed and differ across seeds (same=%v other=%v)", same, sameOther)
	}
	// 2000 draws at p=0.3: mean 600, sd ≈ 20.5; ±6 sd.
	if n < 477 || n > 723 {
		t.Fatalf("%d hiccups in 2000 draws at p=0.3", n)
	}
}

func TestCancelDuringInjectedDelay(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 1, ExtraLatencyMs: 1000}, clk)
	tk := mustJoin(t, m, 1)[0]
	_ = tk.Wait(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error)
	go func() {
		_, err := tk.Serve(ctx, func(context.Context) error { return nil })
		res <- err
	}()
	for clk.pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v, want context.Canceled", err)
	}
	wantStats(t, m, 0, 0)
}

func TestWorkErrorIsReturnedAndWorkerFreed(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1, ExtraLatencyMs: 1000}, newFakeClock())
	tk, err := m.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := tk.Serve(context.Background(), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Serve = %v, want the work's error", err)
	}
	wantStats(t, m, 0, 0)
}

func TestQueueLimit(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1, QueueLimit: 2}, newFakeClock())
	mustJoin(t, m, 1)   // admitted
	mustJoin(t, m, 2)   // queue: 2
	_, err := m.Join(1) // full
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Join on a full queue = %v, want ErrQueueFull", err)
	}
	wantStats(t, m, 2, 1)
	zero := 0
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldQueueLimit: float64(zero)})); err != nil {
		t.Fatal(err)
	}
	mustJoin(t, m, 5)
	wantStats(t, m, 7, 1)
}

func TestCloseFailsWaiters(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1}, newFakeClock())
	ts := mustJoin(t, m, 3)
	done := make(chan error)
	go func() { done <- ts[1].Wait(context.Background()) }()
	m.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("queued Wait after Close = %v, want ErrClosed", err)
	}
	if err := ts[2].Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
	if _, err := m.Join(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Join after Close = %v", err)
	}
	if err := ts[0].Wait(context.Background()); err != nil {
		t.Fatalf("an operation admitted before Close must still be served: %v", err)
	}
	ts[0].Release()
	wantStats(t, m, 0, 0)
}

func TestInvalidLimitsRejected(t *testing.T) {
	cases := []struct {
		name  string
		p     Patch
		field string
	}{
		{"zero workers", NewPatch(map[string]float64{FieldWorkers: float64(0)}), FieldWorkers},
		{"negative workers", NewPatch(map[string]float64{FieldWorkers: float64(-3)}), FieldWorkers},
		{"too many workers", NewPatch(map[string]float64{FieldWorkers: float64(1_000_000 + 1)}), FieldWorkers},
		{"negative rate", NewPatch(map[string]float64{FieldRate: -1}), FieldRate},
		{"NaN rate", NewPatch(map[string]float64{FieldRate: math.NaN()}), FieldRate},
		{"infinite rate", NewPatch(map[string]float64{FieldRate: math.Inf(1)}), FieldRate},
		{"negative extra latency", NewPatch(map[string]float64{FieldExtraLatencyMs: -0.5}), FieldExtraLatencyMs},
		{"probability above 1", NewPatch(map[string]float64{FieldHiccupProb: 1.01}), FieldHiccupProb},
		{"negative probability", NewPatch(map[string]float64{FieldHiccupProb: -0.1}), FieldHiccupProb},
		{"negative hiccup", NewPatch(map[string]float64{FieldHiccupMs: -1}), FieldHiccupMs},
		{"hiccup beyond an hour", NewPatch(map[string]float64{FieldHiccupMs: 3_600_000 + 1}), FieldHiccupMs},
		{"negative queue limit", NewPatch(map[string]float64{FieldQueueLimit: float64(-1)}), FieldQueueLimit},
		// One bad field spoils the whole patch.
		{"good and bad together", NewPatch(map[string]float64{FieldWorkers: float64(4), FieldRate: -5}), FieldRate},
	}
	start := Limits{Workers: 2, Rate: 50, ExtraLatencyMs: 1, HiccupProb: 0.1, HiccupMs: 10}
	m := mustNew(t, start, newFakeClock())
	for _, c := range cases {
		_, _, err := m.Update(c.p)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: error %v, want a FieldError on %s", c.name, err, c.field)
		}
		if got := m.Limits(); got != start {
			t.Fatalf("%s: limits changed to %+v", c.name, got)
		}
		if _, err := New(c.p.Apply(start), 1, nil); err == nil {
			t.Errorf("%s: New accepted the limits", c.name)
		}
	}
}

func TestUpdateReturnsOldAndNew(t *testing.T) {
	m := mustNew(t, Limits{Workers: 2, Rate: 50}, newFakeClock())
	p := 0.5
	old, cur, err := m.Update(NewPatch(map[string]float64{FieldHiccupProb: float64(p)}))
	if err != nil {
		t.Fatal(err)
	}
	if old != (Limits{Workers: 2, Rate: 50}) || cur != (Limits{Workers: 2, Rate: 50, HiccupProb: 0.5}) {
		t.Fatalf("old %+v cur %+v", old, cur)
	}
	if d := old.Diff(cur); len(d) != 1 || d[0] != "hiccup_prob=0→0.5" {
		t.Fatalf("Diff = %v", d)
	}
}

// Liveness under churn: with limits changing at random while many callers
// join, give up and finish, every operation ends (served or cancelled) and
// the model returns to empty. A lost wake-up would hang this test.
func TestRandomLimitChangesNeverStrandWork(t *testing.T) {
	m := mustNew(t, Limits{Workers: 2, Rate: 2000}, nil)
	stop := make(chan struct{})
	changer := make(chan struct{})
	go func() {
		defer close(changer)
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			w := 1 + rng.IntN(6)
			r := []float64{0, 500, 3000, 20000}[rng.IntN(4)]
			if _, _, err := m.Update(NewPatch(map[string]float64{FieldWorkers: float64(w), FieldRate: float64(r)})); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var served, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(g*i)%5)*time.Millisecond)
				ts, err := m.Join(1 + i%3)
				if err != nil {
					t.Error(err)
					cancel()
					return
				}
				for _, tk := range ts {
					if err := tk.Wait(ctx); err != nil {
						cancelled.Add(1)
						continue
					}
					if _, err := tk.Serve(ctx, func(context.Context) error { return nil }); err != nil {
						cancelled.Add(1)
						continue
					}
					served.Add(1)
				}
				cancel()
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	<-changer
	total := int64(0)
	for i := 0; i < 40; i++ {
		total += int64(1 + i%3)
	}
	if got := served.Load() + cancelled.Load(); got != 16*total {
		t.Fatalf("%d operations ended, want %d", got, 16*total)
	}
	if served.Load() == 0 {
		t.Fatal("nothing was served")
	}
	wantStats(t, m, 0, 0)
}

// The model's own cost per operation (join, admit, serve, release), with no
// limit binding.
func BenchmarkAcquireServe(b *testing.B) {
	m, _ := New(Limits{Workers: 64}, 1, nil)
	ctx := context.Background()
	work := func(context.Context) error { return nil }
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, err := m.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			tk.Serve(ctx, work)
		}
	})
}

// A refill timer that fires late (a descheduled process) must not lower the
// served rate of a backlog: the tokens owed are credited. After an idle
// period, though, the bucket only holds its ordinary depth.
func TestLateTimerCatchesUpButIdleBucketStaysSmall(t *testing.T) {
	clk := newFakeClock()
	m := mustNew(t, Limits{Workers: 1000, Rate: 100}, clk)
	ts := mustJoin(t, m, 100)
	if got := countAdmitted(ts); got != 2 {
		t.Fatalf("admitted %d at once, want the burst 2", got)
	}
	clk.Jump(500 * time.Millisecond) // the 10 ms refill timer fires 490 ms late
	clk.Advance(0)
	if got := countAdmitted(ts); got != 52 {
		t.Fatalf("after a late timer admitted %d, want 2 + 50 owed = 52", got)
	}
	clk.Advance(100 * time.Millisecond)
	if got := countAdmitted(ts); got != 62 {
		t.Fatalf("back on schedule: admitted %d, want 62", got)
	}

	// Idle: no backlog for a second, then a burst of arrivals.
	idle := mustNew(t, Limits{Workers: 1000, Rate: 100}, clk)
	clk.Advance(time.Second)
	more := mustJoin(t, idle, 50)
	if got := countAdmitted(more); got != int(Burst(100)) {
		t.Fatalf("after idling admitted %d at once, want the bucket depth %v", got, Burst(100))
	}
	// Waiting on workers is not waiting on tokens: no credit either.
	busy := mustNew(t, Limits{Workers: 1, Rate: 100}, clk)
	bs := mustJoin(t, busy, 20)
	clk.Advance(time.Second)
	w := 1000
	busy.Update(NewPatch(map[string]float64{FieldWorkers: float64(w)}))
	if got := countAdmitted(bs); got != 1+int(Burst(100)) {
		t.Fatalf("after a second bound by workers, raising them admitted %d, want 1 + depth %v", got, Burst(100))
	}
}
