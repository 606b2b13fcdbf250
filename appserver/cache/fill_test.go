package cache

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

func TestFillerStores(t *testing.T) {
	_, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{})
	defer c.Close()
	var mu sync.Mutex
	var results []error
	f := NewFiller(c, FillOptions{Done: func(err error) {
		mu.Lock()
		results = append(results, err)
		mu.Unlock()
	}})
	defer f.Close()
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = fmt.Sprintf("b:%d", i)
		if !f.Enqueue(keys[i], []byte(keys[i])) {
			t.Fatalf("enqueue %d refused with an empty queue", i)
		}
	}
	if !f.Enqueue("b:big", make([]byte, 2<<20)) {
		t.Fatal("enqueue refused")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(results)
		mu.Unlock()
		if n == len(keys)+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sets done after 10 s", n, len(keys)+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	tooLarge := 0
	for _, err := range results {
		switch ErrorKind(err) {
		case "":
		case "too_large":
			tooLarge++
		default:
			t.Errorf("set: %v", err)
		}
	}
	if tooLarge != 1 {
		t.Errorf("%d too-large results, want 1", tooLarge)
	}
	vals := make([][]byte, len(keys))
	if err := c.GetMulti(context.Background(), keys, vals); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if string(vals[i]) != k {
			t.Errorf("%s = %q after fill", k, vals[i])
		}
	}
}

// With memcached stopped the workers hang in their sets, the queue fills up
// and Enqueue refuses further values without blocking; Close still returns
// once the sets time out.
func TestFillerDropsWhenFull(t *testing.T) {
	p, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{Timeout: 300 * time.Millisecond})
	defer c.Close()
	defer testutil.Freeze(t, p)()
	f := NewFiller(c, FillOptions{QueueLen: 4, Workers: 1, Timeout: 300 * time.Millisecond})
	accepted, dropped := 0, 0
	for i := range 100 {
		if f.Enqueue(fmt.Sprintf("b:%d", i), []byte("v")) {
			accepted++
		} else {
			dropped++
		}
	}
	// One value may be in a worker's hands, four in the queue.
	if accepted > 5 || dropped < 95 {
		t.Fatalf("accepted %d, dropped %d; want at most 5 accepted", accepted, dropped)
	}
	f.Close()
	if f.Enqueue("b:x", []byte("v")) {
		t.Fatal("Enqueue accepted a value after Close")
	}
}
