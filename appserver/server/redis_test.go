package server

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/robinhoodcache/robinhood/appserver/cache"
	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// An app server whose "fast" partition is a Redis (and "slow" a memcached):
// misses are filled into Redis under the mapped keys, the next request hits,
// the partition's limit is Redis's maxmemory, and a hung Redis is bypassed.
func TestRedisPartition(t *testing.T) {
	e := newEnv(t, envOptions{redis: []string{"fast"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: e.mcAddr["fast"], Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer rdb.Close()
	// What the controller does on attach.
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "33554432").Err(); err != nil {
		t.Fatal(err)
	}

	body := `{"d": [{"fast": {"S": [100, 2000, 7], "U": ["a", "has space", 42], "C": [1, 1, 0]},
	                  "slow": {"S": [300], "U": ["m"], "C": [1]}}]}`
	code, r := e.post(body)
	if code != http.StatusOK || r.Status != "ok" {
		t.Fatalf("first request: %d %+v", code, r)
	}
	if g := r.Backends["fast"]; g.Queries != 3 || g.Hits != 0 || g.Misses != 3 || g.Errors != 0 {
		t.Fatalf("first request, fast: %+v, want 3 misses", g)
	}
	e.checkValues(r, "fast", []string{"a", "has space", "42"}, []int{100, 2000, 7})
	e.checkValues(r, "slow", []string{"m"}, []int{300})

	// The fills land in Redis, as plain strings under the mapped keys (the
	// key with a space hashed), read here with a plain client.
	for _, kv := range []struct {
		key  string
		size int
	}{{"a", 100}, {"has space", 2000}} {
		e.waitCached("fast", kv.key)
		got, err := rdb.Get(ctx, cache.Key("fast", kv.key)).Bytes()
		if err != nil || len(got) != kv.size || !value.Check(got, "fast", kv.key) {
			t.Fatalf("Redis GET %q: %d bytes, %v; want value.Bytes(fast, %q, %d)", cache.Key("fast", kv.key), len(got), err, kv.key, kv.size)
		}
	}
	if !strings.HasPrefix(cache.Key("fast", "has space"), "fast:#") {
		t.Fatal("a key with a space was not hashed")
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 2 {
		t.Fatalf("Redis holds %d keys (%v), want the two cacheable values of fast only", n, err)
	}
	e.waitCached("slow", "m") // the memcached partition still works beside it

	r = e.postCached(body)
	e.checkValues(r, "fast", []string{"a", "has space", "42"}, []int{100, 2000, 7})
	for series, want := range map[string]float64{
		`appserver_cache_hits_total{backend="fast"}`:   2,
		`appserver_cache_misses_total{backend="fast"}`: 4,
		`appserver_cache_fills_total{backend="fast"}`:  2,
		`appserver_cache_bypassed{backend="fast"}`:     0,
	} {
		if got := e.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// The partition's limit, reported with the statistics, is Redis's
	// maxmemory (polled every 2 s), next to memcached's limit_maxbytes.
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.backends["fast"].stats.limit.Load() != 32<<20 || e.srv.backends["slow"].stats.limit.Load() != 16<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("partition limits fast %d, slow %d after 5 s; want %d (maxmemory) and %d",
				e.srv.backends["fast"].stats.limit.Load(), e.srv.backends["slow"].stats.limit.Load(), 32<<20, 16<<20)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A hung Redis: requests are served by the backend, and after three
	// unanswered operations the partition is bypassed.
	defer testutil.Freeze(t, e.mc["fast"])()
	for i := range 3 {
		key := fmt.Sprintf("h%d", i)
		code, r := e.post(fmt.Sprintf(`{"d": [{"fast": {"S": [10], "U": [%q], "C": [1]}}]}`, key))
		if code != http.StatusOK || r.Backends["fast"].Misses != 1 {
			t.Fatalf("request %d with Redis stopped: %d %+v", i, code, r)
		}
		e.checkValues(r, "fast", []string{key}, []int{10})
	}
	if got := e.metric(`appserver_cache_errors_total{backend="fast",kind="timeout"}`); got < 1 {
		t.Errorf("cache timeout errors = %v, want ≥ 1", got)
	}
	deadline = time.Now().Add(5 * time.Second)
	for e.metric(`appserver_cache_bypassed{backend="fast"}`) != 1 || e.metric(`appserver_cache_breaker_openings_total{backend="fast"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the stopped Redis is not bypassed after 5 s (bypassed %v, openings %v)",
				e.metric(`appserver_cache_bypassed{backend="fast"}`), e.metric(`appserver_cache_breaker_openings_total{backend="fast"}`))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Redis partition that requires a password: the app server reads it from the
// partition's password_file and authenticates, so misses are filled and hit;
// an empty password file stops New with an error naming the file.
func TestRedisPartitionWithPassword(t *testing.T) {
	e := newEnv(t, envOptions{redis: []string{"fast"}, redisPassword: "s3cret pass"})
	body := `{"d": [{"fast": {"S": [100, 2000, 7], "U": ["a", "b", 42], "C": [1, 1, 0]},
	                  "slow": {"S": [300], "U": ["m"], "C": [1]}}]}`
	if code, r := e.post(body); code != http.StatusOK || r.Backends["fast"].Misses != 3 || r.Backends["fast"].Errors != 0 {
		t.Fatalf("first request: %d %+v", code, r)
	}
	e.waitCached("fast", "a")
	e.waitCached("fast", "b")
	e.waitCached("slow", "m")
	r := e.postCached(body)
	e.checkValues(r, "fast", []string{"a", "b", "42"}, []int{100, 2000, 7})
	if got := e.metric(`appserver_cache_errors_total{backend="fast",kind="server"}`); got != 0 {
		t.Fatalf("%v server errors from the Redis partition: authentication failed", got)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	topo := *e.cfg.Topology
	topo.AppServers = slices.Clone(topo.AppServers)
	app := &topo.AppServers[0]
	app.Partitions = maps.Clone(app.Partitions)
	p := app.Partitions["fast"]
	p.PasswordFile = empty
	app.Partitions["fast"] = p
	cfg := e.cfg
	cfg.Topology = &topo
	if s, err := New(cfg); err == nil || !strings.Contains(err.Error(), "partition fast: password_file "+empty+": the first line is empty") {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("New with an empty password file: %v", err)
	}
}
