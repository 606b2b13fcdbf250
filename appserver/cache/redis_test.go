package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// rawRedis is a plain go-redis client for checking and configuring the
// Redis under test behind the RedisClient's back.
func rawRedis(t *testing.T, addr string) *redis.Client {
	t.Helper()
	r := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// infoField returns one field of INFO section.
func infoField(t *testing.T, r *redis.Client, section, field string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := r.Info(ctx, section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s:\n%s", section, field, info)
	return ""
}

func configSet(t *testing.T, r *redis.Client, kv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < len(kv); i += 2 {
		if err := r.ConfigSet(ctx, kv[i], kv[i+1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[i], kv[i+1], err)
		}
	}
}

func TestRedisSetGetMulti(t *testing.T) {
	_, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{MaxConns: 4})
	defer c.Close()
	ctx := context.Background()

	bin := []byte("with\r\n$5\r\nEND\x00*1\r\n")
	for k, v := range map[string][]byte{"b:k1": []byte("one"), "b:k3": {}, "b:k4": bin} {
		if err := c.Set(ctx, k, v); err != nil {
			t.Fatalf("Set %s: %v", k, err)
		}
	}
	keys := []string{"b:k1", "b:k2", "b:k3", "b:k1", "b:k4", "b:k5", "b:k4"}
	vals := make([][]byte, len(keys)+1)
	for i := range vals {
		vals[i] = []byte("stale")
	}
	if err := c.GetMulti(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("one"), nil, {}, []byte("one"), bin, nil, bin}
	for i := range keys {
		if (vals[i] == nil) != (want[i] == nil) || !bytes.Equal(vals[i], want[i]) {
			t.Errorf("%s: got %q, want %q", keys[i], vals[i], want[i])
		}
	}
	if string(vals[len(keys)]) != "stale" {
		t.Errorf("GetMulti wrote past len(keys): %q", vals[len(keys)])
	}
	// The two answers of a repeated key are separate copies.
	vals[0][0] = 'X'
	if string(vals[3]) != "one" {
		t.Errorf("the values of a repeated key share memory: %q", vals[3])
	}

	// Stored as plain strings without expiry, under the key as given.
	r := rawRedis(t, addr)
	if got, err := r.Get(ctx, "b:k4").Bytes(); err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("GET b:k4: %q, %v", got, err)
	}
	if ttl, err := r.TTL(ctx, "b:k1").Result(); err != nil || ttl != -1 {
		t.Fatalf("TTL b:k1: %v, %v; want no expiry (-1)", ttl, err)
	}
	if err := c.GetMulti(ctx, nil, nil); err != nil {
		t.Fatalf("GetMulti of no keys: %v", err)
	}
}

func TestRedisManyKeysSplitIntoCommands(t *testing.T) {
	_, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{MaxConns: 2})
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
	keys[n-1] = keys[0] // a repeat across chunks
	r := rawRedis(t, addr)
	if err := r.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	vals := make([][]byte, n)
	if err := c.GetMulti(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		idx, _ := strconv.Atoi(strings.TrimPrefix(k, "b:"))
		if idx%3 == 0 && string(vals[i]) != k {
			t.Fatalf("%d (%s): got %q", i, k, vals[i])
		}
		if idx%3 != 0 && vals[i] != nil {
			t.Fatalf("%d (%s): got %q, want a miss", i, k, vals[i])
		}
	}
	// 307 keys: four MGETs of at most maxKeysPerGet keys.
	if got := infoField(t, r, "commandstats", "cmdstat_mget"); !strings.HasPrefix(got, "calls=4,") {
		t.Fatalf("cmdstat_mget %s, want calls=4", got)
	}
}

func TestRedisBoundsConnections(t *testing.T) {
	_, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{MaxConns: 3, Timeout: 5 * time.Second})
	defer c.Close()
	r := rawRedis(t, addr)
	before, _ := strconv.Atoi(infoField(t, r, "stats", "total_connections_received"))
	long := make([]string, 2*maxKeysPerGet+1) // pipelined: must use the same pool
	for i := range long {
		long[i] = fmt.Sprintf("b:long%d", i)
	}
	concurrentSetGet(t, c, func() error {
		if err := c.GetMulti(context.Background(), long, make([][]byte, len(long))); err != nil {
			return fmt.Errorf("long multi-get: %v", err)
		}
		return nil
	})
	if n, _ := strconv.Atoi(infoField(t, r, "clients", "connected_clients")); n < 2 || n > 4 {
		t.Fatalf("%d clients connected to Redis, want the raw one and 1 to 3 of the RedisClient", n)
	}
	if n, _ := strconv.Atoi(infoField(t, r, "stats", "total_connections_received")); n-before < 1 || n-before > 3 {
		t.Fatalf("the RedisClient opened %d connections for 64 concurrent callers, want 1 to 3", n-before)
	}
}

func TestRedisLimit(t *testing.T) {
	_, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{})
	defer c.Close()
	ctx := context.Background()
	if got, err := c.Limit(ctx); err != nil || got != 0 {
		t.Fatalf("Limit without maxmemory: %d, %v; want 0", got, err)
	}
	r := rawRedis(t, addr)
	for _, want := range []int64{64 << 20, 12345678} {
		configSet(t, r, "maxmemory", strconv.FormatInt(want, 10))
		if got, err := c.Limit(ctx); err != nil || got != want {
			t.Fatalf("Limit after CONFIG SET maxmemory %d: %d, %v", want, got, err)
		}
	}
}

func TestParseMaxmemory(t *testing.T) {
	if n, err := parseMaxmemory("# Memory\r\nused_memory:1\r\nmaxmemory_human:1.00M\r\nmaxmemory:1048576\r\nmaxmemory_policy:noeviction\r\n"); err != nil || n != 1<<20 {
		t.Fatalf("%d, %v", n, err)
	}
	for _, bad := range []string{"# Memory\r\nused_memory:1\r\n", "maxmemory:lots\r\n", "maxmemory:-1\r\n"} {
		if _, err := parseMaxmemory(bad); ErrorKind(err) != "protocol" {
			t.Errorf("%q: %v, want a protocol error", bad, err)
		}
	}
}

func TestMemcachedLimit(t *testing.T) {
	_, addr := testutil.Memcached(t, 16)
	c := NewClient(addr, Options{})
	defer c.Close()
	if got, err := c.Limit(context.Background()); err != nil || got != 16<<20 {
		t.Fatalf("Limit of a 16 MB memcached: %d, %v", got, err)
	}
}

// Redis refuses a value that cannot fit in maxmemory (policy noeviction) with
// an OOM answer: ErrTooLarge, an answer (the breaker stays closed), and the
// connection stays in use.
func TestRedisOOMIsTooLarge(t *testing.T) {
	_, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{MaxConns: 1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "b:small", []byte("x")); err != nil {
		t.Fatal(err)
	}
	r := rawRedis(t, addr)
	used, err := strconv.ParseInt(infoField(t, r, "memory", "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	limit := used + 256<<10
	configSet(t, r, "maxmemory-policy", "noeviction", "maxmemory", strconv.FormatInt(limit, 10))
	conns := infoField(t, r, "stats", "total_connections_received")
	for i := range 2 * BreakAfter {
		err := c.Set(ctx, "b:big", make([]byte, 2<<20))
		if !errors.Is(err, ErrTooLarge) || ErrorKind(err) != "too_large" || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("set %d of 2 MiB under a %d-byte maxmemory: %v (kind %s), want ErrTooLarge", i, limit, err, ErrorKind(err))
		}
	}
	if c.Bypassed() || c.BreakerOpenings() != 0 {
		t.Fatalf("OOM answers opened the breaker (%d openings)", c.BreakerOpenings())
	}
	vals := make([][]byte, 2)
	if err := c.GetMulti(ctx, []string{"b:small", "b:big"}, vals); err != nil || string(vals[0]) != "x" || vals[1] != nil {
		t.Fatalf("get after OOM: %q, %v", vals, err)
	}
	if got := infoField(t, r, "stats", "total_connections_received"); got != conns {
		t.Fatalf("Redis accepted connections %s, then %s: the OOM answers cost the connection", conns, got)
	}
}

// Deadlines against a hung Redis (SIGSTOP), then the breaker: three
// operations unanswered open it, it fails operations at once, and a probe
// after OpenFor closes it once Redis answers again.
func TestRedisTimeoutAndBreaker(t *testing.T) {
	p, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{MaxConns: 2, Timeout: 300 * time.Millisecond})
	defer c.Close()
	now := pinClock(&c.brk)
	ctx := context.Background()
	if err := c.Set(ctx, "b:k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	resume := testutil.Freeze(t, p)
	defer resume()

	// A context deadline shorter than Timeout wins, on a pooled connection
	// and on a new one.
	for i, op := range []func(context.Context) error{
		func(ctx context.Context) error { return c.GetMulti(ctx, []string{"b:k"}, make([][]byte, 1)) },
		func(ctx context.Context) error { return c.Set(ctx, "b:k2", []byte("v")) },
	} {
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		start := time.Now()
		err := op(short)
		el := time.Since(start)
		cancel()
		if ErrorKind(err) != "timeout" {
			t.Fatalf("operation %d with a 20 ms deadline on a stopped Redis: %v (kind %s), want a timeout", i, err, ErrorKind(err))
		}
		if el > 150*time.Millisecond {
			t.Fatalf("operation %d with a 20 ms deadline took %v", i, el)
		}
	}
	if c.Bypassed() {
		t.Fatal("bypassed after two timeouts")
	}
	// Without a context deadline, Timeout bounds the operation.
	start := time.Now()
	err := c.GetMulti(ctx, []string{"b:k"}, make([][]byte, 1))
	if el := time.Since(start); ErrorKind(err) != "timeout" || el < 250*time.Millisecond || el > 2*time.Second {
		t.Fatalf("get without a deadline: %v (kind %s) after %v, want a timeout after about 300 ms", err, ErrorKind(err), el)
	}

	// Three in a row unanswered: bypassed, every operation fails at once.
	if !c.Bypassed() || c.BreakerOpenings() != 1 {
		t.Fatalf("after three timeouts: bypassed %v, %d openings", c.Bypassed(), c.BreakerOpenings())
	}
	wantBypassedAtOnce(t, c, 100*time.Millisecond)
	resume()
	*now = now.Add(OpenFor)
	got := make([][]byte, 1)
	if err := c.GetMulti(ctx, []string{"b:k"}, got); err != nil || string(got[0]) != "v" {
		t.Fatalf("after SIGCONT, the probe: %v %q", err, got[0])
	}
	wantClosed(t, c, 1)
}

// A killed Redis: refused connections open the breaker; a Redis started
// again on the same address closes it at the next probe.
func TestRedisBreakerAfterKill(t *testing.T) {
	p, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{MaxConns: 4, Timeout: 300 * time.Millisecond})
	defer c.Close()
	now := pinClock(&c.brk)
	ctx := context.Background()
	if err := c.Set(ctx, "b:k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	for i := range BreakAfter {
		if err := c.Set(ctx, "b:k", []byte("v")); ErrorKind(err) != "conn" {
			t.Fatalf("set %d on a killed Redis: %v (kind %s), want conn", i, err, ErrorKind(err))
		}
	}
	if !c.Bypassed() || c.BreakerOpenings() != 1 {
		t.Fatalf("after %d refused operations: bypassed %v, %d openings", BreakAfter, c.Bypassed(), c.BreakerOpenings())
	}
	if err := c.Set(ctx, "b:k", []byte("v")); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("with the breaker open: %v", err)
	}

	_, port, _ := net.SplitHostPort(addr)
	testutil.Start(t, "redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	testutil.WaitTCP(t, addr)
	*now = now.Add(OpenFor)
	if err := c.Set(ctx, "b:k2", []byte("again")); err != nil {
		t.Fatalf("the probe on the restarted Redis: %v", err)
	}
	wantClosed(t, c, 1)
	vals := make([][]byte, 2)
	if err := c.GetMulti(ctx, []string{"b:k", "b:k2"}, vals); err != nil || vals[0] != nil || string(vals[1]) != "again" {
		t.Fatalf("get from the restarted (empty) Redis: %q, %v", vals, err)
	}
}

func TestRedisCloseAndCancel(t *testing.T) {
	_, addr := testutil.Redis(t)
	c := NewRedisClient(addr, Options{})
	ctx := context.Background()
	if err := c.Set(ctx, "b:k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for range 2 * BreakAfter {
		if err := c.GetMulti(canceled, []string{"b:k"}, make([][]byte, 1)); ErrorKind(err) != "canceled" {
			t.Fatalf("get with a canceled context: %v, want canceled", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for range 2 * BreakAfter {
		if err := c.Set(ctx, "b:k", []byte("v")); !errors.Is(err, ErrClosed) || ErrorKind(err) != "closed" {
			t.Fatalf("Set after Close: %v", err)
		}
	}
	if c.BreakerOpenings() != 0 {
		t.Fatal("cancellations or a closed client opened the breaker")
	}
}

// ErrorKind labels go-redis's own errors with the same fixed set.
func TestErrorKindRedis(t *testing.T) {
	_, addr := testutil.Redis(t)
	r := rawRedis(t, addr)
	serverErr := r.Do(context.Background(), "NOSUCHCOMMAND").Err()
	if serverErr == nil {
		t.Fatal("Redis accepted NOSUCHCOMMAND")
	}
	for _, tc := range []struct {
		err  error
		kind string
	}{
		{serverErr, "server"},
		{fmt.Errorf("wrapped: %w", serverErr), "server"},
		{redis.ErrPoolTimeout, "timeout"},
		{redis.ErrClosed, "closed"},
		{fmt.Errorf("%w: redis: %w", ErrTooLarge, serverErr), "too_large"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, "conn"},
	} {
		if got := ErrorKind(tc.err); got != tc.kind {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.kind)
		}
	}
}

// A Redis with a password (requirepass) and an ACL user: the client
// authenticates with Options.Username/Password; without them, or with the
// wrong ones, every operation fails with a server error (NOAUTH, WRONGPASS).
func TestRedisAuthentication(t *testing.T) {
	addr := testutil.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	testutil.Start(t, "redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--requirepass", "s3cret")
	testutil.WaitTCP(t, addr)
	ctx := context.Background()

	c := NewRedisClient(addr, Options{Password: "s3cret"})
	defer c.Close()
	if err := c.Set(ctx, "b:k", []byte("v")); err != nil {
		t.Fatalf("set with the password: %v", err)
	}
	vals := make([][]byte, 1)
	if err := c.GetMulti(ctx, []string{"b:k"}, vals); err != nil || string(vals[0]) != "v" {
		t.Fatalf("get with the password: %q, %v", vals[0], err)
	}
	if limit, err := c.Limit(ctx); err != nil || limit != 0 {
		t.Fatalf("limit with the password: %d, %v", limit, err)
	}

	// An ACL user with just what the app server needs.
	r := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret", Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer r.Close()
	if err := r.Do(ctx, "ACL", "SETUSER", "app", "on", ">apppw", "~b:*", "+mget", "+set", "+info").Err(); err != nil {
		t.Fatal(err)
	}
	u := NewRedisClient(addr, Options{Username: "app", Password: "apppw"})
	defer u.Close()
	if err := u.GetMulti(ctx, []string{"b:k"}, vals); err != nil || string(vals[0]) != "v" {
		t.Fatalf("get as the ACL user: %q, %v", vals[0], err)
	}

	for _, o := range []Options{{}, {Password: "wrong"}, {Username: "app", Password: "s3cret"}} {
		bad := NewRedisClient(addr, o)
		err := bad.GetMulti(ctx, []string{"b:k"}, vals)
		bad.Close()
		if err == nil || ErrorKind(err) != "server" || !strings.Contains(err.Error(), "AUTH") && !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("get with user %q password %q: %v (kind %s), want an authentication error", o.Username, o.Password, err, ErrorKind(err))
		}
	}
}
