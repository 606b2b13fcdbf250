package kv

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

func TestMemoryReturnsDerivedValues(t *testing.T) {
	m, err := NewMemory("ratings", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		size int
	}{{"k1", 12}, {"user:42", 0}, {"user:42", 1000}, {"", 3}, {"k1", 12}} {
		got, err := m.Get(ctx, c.key, c.size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, value.Bytes("ratings", c.key, c.size)) {
			t.Fatalf("Get(%q, %d) is not value.Bytes", c.key, c.size)
		}
	}
	// "user:42" was stored with size 1000 last; "k1" once.
	if st := m.Stats(); st.Items != 3 || st.Created != 4 {
		t.Fatalf("stats %+v, want 3 items, 4 created", st)
	}
}

func TestMemoryBoundAndLRU(t *testing.T) {
	const size = 1000
	cost := int64(len("k00")+size) + EntryOverhead
	m, _ := NewMemory("b", 5*cost)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		m.Get(ctx, fmt.Sprintf("k%02d", i), size)
	}
	m.Get(ctx, "k00", size) // k00 is now the most recent; k01 the oldest
	m.Get(ctx, "k05", size) // evicts k01
	st := m.Stats()
	if st.Items != 5 || st.Bytes != 5*cost || st.Evictions != 1 {
		t.Fatalf("stats %+v, want 5 items, %d bytes, 1 eviction", st, 5*cost)
	}
	created := st.Created
	m.Get(ctx, "k00", size)
	if m.Stats().Created != created {
		t.Fatal("k00 was evicted although it was recently used")
	}
	m.Get(ctx, "k01", size)
	if m.Stats().Created != created+1 {
		t.Fatal("k01 was kept although it was the least recently used")
	}
	// A value larger than the whole store is served, not kept.
	big, _ := m.Get(ctx, "huge", 10*size)
	if !value.Check(big, "b", "huge") || m.Stats().Bytes > 5*cost {
		t.Fatalf("oversized value: ok=%v stats %+v", value.Check(big, "b", "huge"), m.Stats())
	}
}

func TestMemoryBoundUnderConcurrency(t *testing.T) {
	const max = 64 << 10
	m, _ := NewMemory("b", max)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				key := fmt.Sprintf("k%d", (i*7+g)%300)
				size := 100 + (i%5)*300
				v, _ := m.Get(context.Background(), key, size)
				if len(v) != size || !value.Check(v, "b", key) {
					t.Errorf("wrong value for %s/%d", key, size)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if st := m.Stats(); st.Bytes > max || st.Bytes <= 0 {
		t.Fatalf("stored %d bytes with a bound of %d", st.Bytes, max)
	}
}

func TestMemoryRejectsNegativeBound(t *testing.T) {
	if _, err := NewMemory("b", -1); err == nil {
		t.Fatal("NewMemory accepted a negative bound")
	}
}

func TestRedisReadsAndFillsRealRedis(t *testing.T) {
	_, addr := testutil.Redis(t)
	ctx := context.Background()
	r, err := NewRedis(ctx, "ratings", RedisOptions{Addr: addr, PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	direct := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer direct.Close()

	got, err := r.Get(ctx, "k1", 12)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, value.Bytes("ratings", "k1", 12)) {
		t.Fatalf("miss path returned %x", got)
	}
	stored, err := direct.Get(ctx, "ratings:k1").Bytes()
	if err != nil || !bytes.Equal(stored, got) {
		t.Fatalf("Redis holds %x (%v) after a miss, want the derived value", stored, err)
	}

	// A hit returns what Redis holds: plant a same-size value and read it.
	planted := bytes.Repeat([]byte{0xAB}, 12)
	if err := direct.Set(ctx, "ratings:k2", planted, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Get(ctx, "k2", 12); !bytes.Equal(got, planted) {
		t.Fatalf("hit path returned %x, want what Redis holds", got)
	}
	// Another size replaces the stored value.
	if got, _ := r.Get(ctx, "k2", 20); !bytes.Equal(got, value.Bytes("ratings", "k2", 20)) {
		t.Fatal("size change did not derive a new value")
	}
	if n, _ := direct.StrLen(ctx, "ratings:k2").Result(); n != 20 {
		t.Fatalf("Redis value length %d after size change, want 20", n)
	}
}

func TestRedisUnreachable(t *testing.T) {
	addr := testutil.FreeAddr(t) // nothing listens
	if _, err := NewRedis(context.Background(), "b", RedisOptions{Addr: addr}); err == nil {
		t.Fatal("NewRedis succeeded without a server")
	}
}

func BenchmarkMemoryGetHit(b *testing.B) {
	m, _ := NewMemory("ratings", 64<<20)
	ctx := context.Background()
	for i := 0; i < 1024; i++ {
		m.Get(ctx, fmt.Sprintf("k%d", i), 1024)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Get(ctx, fmt.Sprintf("k%d", i%1024), 1024)
	}
}

func BenchmarkMemoryGetMiss1KB(b *testing.B) {
	m, _ := NewMemory("ratings", 0) // stores nothing: every read derives
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		m.Get(ctx, "k", 1024)
	}
}
