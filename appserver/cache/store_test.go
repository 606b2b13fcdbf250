package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// What the memcached and Redis clients' tests share: both implement Store
// behind the same breaker, so the same checks hold for either.

// pinClock stops the breaker's clock at the time it returns; the test moves
// the clock by writing through the pointer.
func pinClock(b *breaker) *time.Time {
	now := new(time.Time)
	*now = time.Now()
	b.mu.Lock()
	b.now = func() time.Time { return *now }
	b.mu.Unlock()
	return now
}

// wantBypassedAtOnce checks that with the breaker open 100 lookups fail with
// ErrBreakerOpen (kind "bypassed") without waiting.
func wantBypassedAtOnce(t *testing.T, c Store, within time.Duration) {
	t.Helper()
	t0 := time.Now()
	for range 100 {
		if err := c.GetMulti(context.Background(), []string{"b:k"}, make([][]byte, 1)); !errors.Is(err, ErrBreakerOpen) || ErrorKind(err) != "bypassed" {
			t.Fatalf("with the breaker open: %v", err)
		}
	}
	if el := time.Since(t0); el > within {
		t.Fatalf("100 bypassed operations took %v: they must not wait", el)
	}
}

// wantClosed checks that the breaker is closed and has opened `openings` times.
func wantClosed(t *testing.T, c Store, openings uint64) {
	t.Helper()
	if c.Bypassed() || c.BreakerOpenings() != openings {
		t.Fatalf("bypassed %v, %d openings; want closed after %d", c.Bypassed(), c.BreakerOpenings(), openings)
	}
}

// concurrentSetGet runs 64 callers at once, each setting its own key and
// reading it back, then calling extra (if not nil); it reports every error.
func concurrentSetGet(t *testing.T, c Store, extra func() error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("b:%d", i)
			if err := c.Set(context.Background(), k, []byte(k)); err != nil {
				errs <- err
				return
			}
			vals := make([][]byte, 1)
			if err := c.GetMulti(context.Background(), []string{k}, vals); err != nil || string(vals[0]) != k {
				errs <- fmt.Errorf("%s: %q %v", k, vals[0], err)
				return
			}
			if extra != nil {
				if err := extra(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
