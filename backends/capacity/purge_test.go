package capacity

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A running query that is stopped holds its worker purge_cost_ms longer,
// at most what it had left; the next query is admitted only then.
func TestStoppingARunningQueryCostsItsWorker(t *testing.T) {
	for _, tc := range []struct {
		name         string
		stopAt, free time.Duration // after admission
	}{
		{"the whole cost", 20 * time.Millisecond, 30 * time.Millisecond},
		{"no more than it had left", 95 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			m := mustNew(t, Limits{Workers: 1, ExtraLatencyMs: 100, PurgeCostMs: 10}, clk)
			ts := mustJoin(t, m, 2)
			if err := ts[0].Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan error, 1)
			go func() {
				_, err := ts[0].Serve(ctx, func(context.Context) error { return nil })
				res <- err
			}()
			clk.waitTimer(t, start.Add(100*time.Millisecond))
			clk.Advance(tc.stopAt)
			cancel()
			clk.waitTimer(t, start.Add(tc.free))
			wantStats(t, m, 1, 1) // the stopped query still holds the worker
			clk.Advance(tc.free - tc.stopAt)
			if err := <-res; !errors.Is(err, context.Canceled) {
				t.Fatalf("Serve = %v, want context.Canceled", err)
			}
			wantStats(t, m, 0, 1) // the next one is in
			if !admitted(ts[1]) {
				t.Fatal("the queued query was not admitted when the worker came free")
			}
		})
	}
}

func TestPurgeLimitsAreReadFromTheModel(t *testing.T) {
	m := mustNew(t, Limits{Workers: 1, PurgeDelayMs: 2.5, PurgeCostMs: 4}, newFakeClock())
	if d := m.PurgeDelay(); d != 2500*time.Microsecond {
		t.Fatalf("PurgeDelay = %v, want 2.5ms", d)
	}
	for _, c := range []struct{ remaining, want time.Duration }{
		{time.Second, 4 * time.Millisecond},
		{time.Millisecond, time.Millisecond},
		{-time.Millisecond, 0},
	} {
		if got := m.StopCost(c.remaining); got != c.want {
			t.Errorf("StopCost(%v) = %v, want %v", c.remaining, got, c.want)
		}
	}
	if _, _, err := m.Update(NewPatch(map[string]float64{FieldPurgeCostMs: -1})); err == nil {
		t.Fatal("a negative purge_cost_ms was accepted")
	}
	if m.StopCost(time.Second) != 4*time.Millisecond {
		t.Fatal("a refused update changed the purge cost")
	}
}
