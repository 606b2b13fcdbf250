package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

func TestClientSetGetMulti(t *testing.T) {
	_, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{MaxConns: 4})
	defer c.Close()
	ctx := context.Background()

	if err := c.Set(ctx, "b:k1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "b:k3", []byte{}); err != nil {
		t.Fatal(err)
	}
	bin := []byte("with\r\nEND\r\nVALUE inside")
	if err := c.Set(ctx, "b:k4", bin); err != nil {
		t.Fatal(err)
	}
	keys := []string{"b:k1", "b:k2", "b:k3", "b:k1", "b:k4", "b:k5"}
	vals := make([][]byte, len(keys))
	for i := range vals {
		vals[i] = []byte("stale")
	}
	if err := c.GetMulti(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("one"), nil, {}, []byte("one"), bin, nil}
	for i := range keys {
		if (vals[i] == nil) != (want[i] == nil) || !bytes.Equal(vals[i], want[i]) {
			t.Errorf("%s: got %q, want %q", keys[i], vals[i], want[i])
		}
	}
}

func TestClientManyKeysSplitIntoCommands(t *testing.T) {
	_, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{})
	defer c.Close()
	ctx := context.Background()
	const n = 3*maxKeysPerGet + 7
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("b:%d", i)
		if i%3 == 0 {
			if err := c.Set(ctx, keys[i], []byte(keys[i])); err != nil {
				t.Fatal(err)
			}
		}
	}
	vals := make([][]byte, n)
	if err := c.GetMulti(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if i%3 == 0 && string(vals[i]) != keys[i] {
			t.Fatalf("%s: got %q", keys[i], vals[i])
		}
		if i%3 != 0 && vals[i] != nil {
			t.Fatalf("%s: got %q, want a miss", keys[i], vals[i])
		}
	}
}

func TestClientTooLargeKeepsConnection(t *testing.T) {
	_, addr := testutil.Memcached(t, 16) // default item limit 1 MiB
	c := NewClient(addr, Options{MaxConns: 1})
	defer c.Close()
	ctx := context.Background()
	err := c.Set(ctx, "b:big", make([]byte, 2<<20))
	if !errors.Is(err, ErrTooLarge) || ErrorKind(err) != "too_large" {
		t.Fatalf("set 2 MiB: got %v, want ErrTooLarge", err)
	}
	// The one connection is still usable.
	if err := c.Set(ctx, "b:small", []byte("x")); err != nil {
		t.Fatal(err)
	}
	vals := make([][]byte, 1)
	if err := c.GetMulti(ctx, []string{"b:small"}, vals); err != nil || string(vals[0]) != "x" {
		t.Fatalf("get after too-large set: %q, %v", vals[0], err)
	}
	if got := len(c.slots); got != 1 {
		t.Fatalf("open connections = %d, want 1 (reused)", got)
	}
}

func TestClientRejectsIllegalKeys(t *testing.T) {
	c := NewClient("127.0.0.1:1", Options{})
	defer c.Close()
	for _, k := range []string{"", "a b", strings.Repeat("x", 251), "a\r\nflush_all"} {
		err := c.Set(context.Background(), k, nil)
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Errorf("Set(%q): got %v, want KeyError", k, err)
		}
		if err := c.GetMulti(context.Background(), []string{"ok", k}, make([][]byte, 2)); !errors.As(err, &ke) {
			t.Errorf("GetMulti(%q): got %v, want KeyError", k, err)
		}
	}
}

func TestClientTimeoutAndRecovery(t *testing.T) {
	p, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{MaxConns: 2, Timeout: 200 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "b:k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	resume := testutil.Freeze(t, p)
	err := c.GetMulti(ctx, []string{"b:k"}, make([][]byte, 1))
	if ErrorKind(err) != "timeout" {
		t.Fatalf("get from a stopped memcached: %v (kind %s), want a timeout", err, ErrorKind(err))
	}
	// A context deadline shorter than Timeout wins.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Set(short, "b:k2", []byte("v"))
	if ErrorKind(err) != "timeout" {
		t.Fatalf("set with a short deadline: %v, want a timeout", err)
	}
	if el := time.Since(start); el > 150*time.Millisecond {
		t.Fatalf("set with a 20ms deadline took %v", el)
	}
	resume()
	vals := make([][]byte, 1)
	if err := c.GetMulti(ctx, []string{"b:k"}, vals); err != nil || string(vals[0]) != "v" {
		t.Fatalf("after SIGCONT: %q, %v", vals[0], err)
	}
}

func TestClientBoundsConnections(t *testing.T) {
	_, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{MaxConns: 3})
	defer c.Close()
	var dials atomic.Int64
	c.dialer.Control = func(string, string, syscall.RawConn) error {
		dials.Add(1)
		return nil
	}
	concurrentSetGet(t, c, nil)
	if n := dials.Load(); n < 1 || n > 3 {
		t.Fatalf("the client dialled %d connections for 64 concurrent callers, want 1 to 3", n)
	}
	if n := len(c.idle); int64(n) != dials.Load() {
		t.Fatalf("%d idle connections, want all %d kept", n, dials.Load())
	}
}

func TestClientWaitForConnectionRespectsContext(t *testing.T) {
	p, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{MaxConns: 1, Timeout: 2 * time.Second})
	defer c.Close()
	if err := c.Set(context.Background(), "b:k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	resume := testutil.Freeze(t, p)
	defer resume()
	done := make(chan error, 1)
	go func() { done <- c.Set(context.Background(), "b:k", []byte("v")) }() // holds the one connection
	for len(c.idle) > 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.GetMulti(ctx, []string{"b:k"}, make([][]byte, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for the only connection: %v, want context.DeadlineExceeded", err)
	}
	// Without a context deadline the wait is bounded by Timeout (the test
	// would hang otherwise).
	err = c.GetMulti(context.Background(), []string{"b:k"}, make([][]byte, 1))
	if ErrorKind(err) != "timeout" {
		t.Fatalf("waiting for the only connection without a deadline: %v, want a timeout", err)
	}
	// By now the set holding the connection has reached its own Timeout.
	if err := <-done; ErrorKind(err) != "timeout" {
		t.Fatalf("the blocked set: %v, want a timeout", err)
	}
	resume()
	// Three operations in a row went unanswered: the breaker bypasses the
	// instance for OpenFor, then lets a probe through, which closes it.
	if err := c.Set(context.Background(), "b:k", []byte("v")); !errors.Is(err, ErrBreakerOpen) || ErrorKind(err) != "bypassed" {
		t.Fatalf("after three timeouts: %v, want the breaker open", err)
	}
	*pinClock(&c.brk) = time.Now().Add(OpenFor)
	if err := c.Set(context.Background(), "b:k", []byte("v")); err != nil {
		t.Fatalf("after SIGCONT, the probe: %v", err)
	}
	wantClosed(t, c, 1)
}

// A hung memcached (SIGSTOP) costs three operations their short timeout; after
// that every operation fails at once (the app server treats it as a miss)
// until a probe after OpenFor, doubling while it stays hung.
func TestBreakerBypassesAHungInstance(t *testing.T) {
	p, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{Timeout: 50 * time.Millisecond})
	defer c.Close()
	now := pinClock(&c.brk)
	if err := c.Set(context.Background(), "b:k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	resume := testutil.Freeze(t, p)
	defer resume()
	for i := range BreakAfter {
		if err := c.GetMulti(context.Background(), []string{"b:k"}, make([][]byte, 1)); ErrorKind(err) != "timeout" {
			t.Fatalf("operation %d on the hung instance: %v, want a timeout", i, err)
		}
	}
	wantBypassedAtOnce(t, c, 50*time.Millisecond)
	*now = now.Add(OpenFor) // the probe times out: open again, for twice as long
	if err := c.GetMulti(context.Background(), []string{"b:k"}, make([][]byte, 1)); ErrorKind(err) != "timeout" {
		t.Fatalf("the probe: %v, want a timeout", err)
	}
	*now = now.Add(OpenFor)
	if !c.Bypassed() {
		t.Fatal("the second opening lasted only OpenFor")
	}
	resume()
	*now = now.Add(OpenFor)
	got := make([][]byte, 1)
	if err := c.GetMulti(context.Background(), []string{"b:k"}, got); err != nil || string(got[0]) != "v" {
		t.Fatalf("after SIGCONT, the probe: %v %q", err, got[0])
	}
	wantClosed(t, c, 2)
}

func TestClientClose(t *testing.T) {
	_, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{})
	if err := c.Set(context.Background(), "b:k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := len(c.slots); got != 0 {
		t.Fatalf("%d connections open after Close", got)
	}
	if err := c.Set(context.Background(), "b:k", []byte("v")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: %v", err)
	}
}

// Fits agrees with memcached: what it accepts is stored, and the first size
// it refuses is refused by memcached too.
func TestFitsAgreesWithMemcached(t *testing.T) {
	_, addr := testutil.Memcached(t, 16, "-I", "1m")
	c := NewClient(addr, Options{})
	defer c.Close()
	const itemMax = 1 << 20
	for _, key := range []string{"b:k", "b:" + strings.Repeat("x", 240)} {
		n := itemMax
		for !Fits(key, n, itemMax) {
			n--
		}
		if err := c.Set(context.Background(), key, make([]byte, n)); err != nil {
			t.Fatalf("key of %d bytes, value of %d bytes (Fits): %v", len(key), n, err)
		}
		if err := c.Set(context.Background(), key, make([]byte, n+ItemOverhead)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("key of %d bytes, value of %d bytes: %v, want too large", len(key), n+ItemOverhead, err)
		}
	}
}

// A partition whose host name does not resolve fails its operations with
// kind "resolve" (counted as such, and warned about at start).
func TestAnUnresolvableHostIsKindResolve(t *testing.T) {
	c := NewClient("no-such-host.invalid:11211", Options{Timeout: 2 * time.Second})
	defer c.Close()
	err := c.GetMulti(context.Background(), []string{"k"}, make([][]byte, 1))
	if err == nil || ErrorKind(err) != "resolve" {
		t.Fatalf("GetMulti on an unresolvable host: %v (kind %q), want kind resolve", err, ErrorKind(err))
	}
}
