package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/robinhoodcache/robinhood/appserver/cache"
	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	"github.com/robinhoodcache/robinhood/lib/trace"
)

// BenchmarkServeAllHit measures the handler's cost for an all-hit request
// of 10 queries over 3 backends (real memcached; no HTTP transport), and
// the same three multi-gets done directly (multiget-loop) for comparison.
func BenchmarkServeAllHit(b *testing.B) {
	names := []string{"b0", "b1", "b2"}
	parts := make([]string, len(names))
	yaml := fmt.Sprintf("rbc_server: {grpc: %q}\nbackends:\n", testutil.FreeAddr(b))
	for i, n := range names {
		_, addr := testutil.Memcached(b, 64)
		parts[i] = fmt.Sprintf("%s: %q", n, addr)
		yaml += fmt.Sprintf("  - {id: %d, name: %s, type: kv, replicas: [{grpc: %q}]}\n", i, n, testutil.FreeAddr(b))
		c := cache.NewClient(addr, cache.Options{})
		for k := range 100 {
			key := strconv.Itoa(k)
			if err := c.Set(context.Background(), cache.Key(n, key), value.Bytes(n, key, 1000)); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
	}
	yaml += fmt.Sprintf("app_servers:\n  - {id: a, http: \"127.0.0.1:1\", cache_mode: partitioned, cache_budget_mb: 64, controller: {min_partition_mb: 8}, partitions: {%s}}\n", strings.Join(parts, ", "))
	topo, err := config.ParseTopology([]byte(yaml))
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Topology: topo, AppServerID: "a"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	tr := &trace.Request{Layers: []trace.Layer{{}}}
	for i, n := range names {
		q := trace.BackendQueries{Backend: n}
		for k := range 3 + boolInt(i == 0) { // 4 + 3 + 3 queries
			q.Keys = append(q.Keys, strconv.Itoa(k*7))
			q.Sizes = append(q.Sizes, 1000)
			q.Cacheable = append(q.Cacheable, true)
		}
		tr.Layers[0] = append(tr.Layers[0], q)
	}
	body := string(trace.AppendJSON(nil, tr))
	b.Run("handler", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/request", strings.NewReader(body)))
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"misses":0`) {
				b.Fatalf("%d %s", w.Code, w.Body.String())
			}
		}
	})
	b.Run("multiget-loop", func(b *testing.B) {
		b.ReportAllocs()
		keys := make([][]string, len(names))
		for i, q := range tr.Layers[0] {
			for _, k := range q.Keys {
				keys[i] = append(keys[i], cache.Key(q.Backend, k))
			}
		}
		for b.Loop() {
			var wg sync.WaitGroup
			for i := 1; i < len(names); i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					be := s.backends[names[i]]
					if err := be.cache.GetMulti(context.Background(), keys[i], make([][]byte, len(keys[i]))); err != nil {
						b.Error(err)
					}
				}()
			}
			be := s.backends[names[0]]
			if err := be.cache.GetMulti(context.Background(), keys[0], make([][]byte, len(keys[0]))); err != nil {
				b.Error(err)
			}
			wg.Wait()
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
