package cache

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The circuit breaker in front of one cache instance, memcached or Redis
// (docs/appserver.md, "A memcached that stops answering" and "Redis
// partitions"; both clients share this code): after BreakAfter operations in
// a row fail for want of an answer (a timeout, a refused or reset
// connection), the instance is bypassed — every operation fails at once with
// ErrBreakerOpen, which the app server treats as misses and skipped fills —
// for OpenFor, doubling with every opening in a row up to OpenMax; then one
// operation is let through as a probe: an answer closes the breaker, a
// failure opens it again.
const (
	BreakAfter = 3
	OpenFor    = time.Second
	OpenMax    = 30 * time.Second
)

// ErrBreakerOpen is returned while the breaker bypasses the instance.
var ErrBreakerOpen = errors.New("cache: bypassed (circuit breaker open)")

type breaker struct {
	mu      sync.Mutex
	now     func() time.Time
	fails   int       // failures in a row
	opens   int       // openings in a row (no answer since)
	until   time.Time // open until then
	probing bool      // a probe is in flight
	Opened  uint64    // times the breaker opened
}

func newBreaker() breaker { return breaker{now: time.Now} }

// guard runs one operation of the instance through the breaker: it fails at
// once with ErrBreakerOpen while the breaker is open, and its outcome is
// recorded otherwise (the caller's cancellation and a closed client say
// nothing about the instance).
func (b *breaker) guard(op func() error) error {
	if !b.allow() {
		return ErrBreakerOpen
	}
	err := op()
	if errors.Is(err, context.Canceled) || isClosed(err) {
		b.release()
	} else {
		b.done(unanswered(err))
	}
	return err
}

// openings is how many times the breaker opened.
func (b *breaker) openings() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Opened
}

// bypassed reports whether the breaker is open now.
func (b *breaker) bypassed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opens > 0 && b.now().Before(b.until)
}

// allow reports whether an operation may go to the instance now.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opens == 0 {
		return true
	}
	if b.now().Before(b.until) || b.probing {
		return false
	}
	b.probing = true
	return true
}

// done records an operation's outcome: failed is true when the instance did
// not answer.
func (b *breaker) done(failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if !failed {
		b.fails, b.opens = 0, 0
		return
	}
	b.fails++
	if b.fails < BreakAfter && b.opens == 0 {
		return
	}
	b.until = b.now().Add(min(OpenFor<<min(b.opens, 5), OpenMax))
	b.opens++
	b.fails = 0
	b.Opened++
}

// release ends a probe that says nothing about the instance (the caller
// gave up, or the client closed).
func (b *breaker) release() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// unanswered is a failure of the instance: no answer in time, or no
// connection. Answers (errors included) and the caller's cancellation are not.
func unanswered(err error) bool {
	switch ErrorKind(err) {
	case "timeout", "conn":
		return true
	}
	return false
}
