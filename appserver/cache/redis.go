package cache

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// RedisClient is a Store on one Redis instance (a Redis partition,
// docs/appserver.md "Redis partitions"): GetMulti is MGET, Set is SET
// without expiry, Limit is maxmemory from INFO memory. It has the same
// contract as Client: a bounded pool (Options.MaxConns connections, busy and
// idle), every operation bounded by the context's deadline and
// Options.Timeout, no retries, and the same circuit breaker. Keys are used
// as they are (Redis keys are binary-safe; the app server maps them with
// Key). It is safe for concurrent use.
type RedisClient struct {
	addr    string
	timeout time.Duration
	rdb     *redis.Client
	closed  atomic.Bool
	brk     breaker
}

// NewRedisClient returns a client for the Redis at addr. It does not
// connect.
func NewRedisClient(addr string, opt Options) *RedisClient {
	if opt.MaxConns <= 0 {
		opt.MaxConns = DefaultMaxConns
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: addr,
		// At most MaxConns connections: the pool's size is also its hard
		// cap, and pipelines (long multi-gets) use the same pool instead
		// of a dedicated one.
		PoolSize:         opt.MaxConns,
		MaxActiveConns:   opt.MaxConns,
		PipelinePoolSize: -1,
		DialTimeout:      opt.Timeout,
		ReadTimeout:      opt.Timeout,
		WriteTimeout:     opt.Timeout,
		PoolTimeout:      opt.Timeout,
		// AUTH on every new connection when the partition has a password.
		Username: opt.Username,
		Password: opt.Password,
		// The context's deadline bounds waiting for a connection, dialing,
		// writing and reading.
		ContextTimeoutEnabled: true,
		// No retries, of commands or dials: the breaker and the app server
		// decide what a failure means.
		MaxRetries:    -1,
		DialerRetries: 1,
		// RESP2 and no client-identity or maintenance-notification
		// handshakes: plain MGET/SET against any Redis version, and no
		// round trip before a new connection's first command.
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	return &RedisClient{addr: addr, timeout: opt.Timeout, rdb: rdb, brk: newBreaker()}
}

// BreakerOpenings is how many times the circuit breaker opened.
func (c *RedisClient) BreakerOpenings() uint64 { return c.brk.openings() }

// Bypassed reports whether the breaker is open (the instance is bypassed).
func (c *RedisClient) Bypassed() bool { return c.brk.bypassed() }

// Addr returns the Redis address.
func (c *RedisClient) Addr() string { return c.addr }

// Close closes the connections; operations after Close fail with ErrClosed.
func (c *RedisClient) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.rdb.Close()
}

// run runs one operation through the breaker with its deadline: the earlier
// of the context's and now + Timeout.
func (c *RedisClient) run(ctx context.Context, op func(ctx context.Context) error) error {
	return c.brk.guard(func() error {
		if c.closed.Load() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > c.timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.timeout)
			defer cancel()
		}
		return op(ctx)
	})
}

// GetMulti looks keys up with MGET (one command per maxKeysPerGet keys,
// pipelined) and sets vals[i] to a copy of the value of keys[i], or nil on a
// miss. vals must be at least as long as keys. Keys may repeat. On error the
// values found so far are kept and the rest are nil.
func (c *RedisClient) GetMulti(ctx context.Context, keys []string, vals [][]byte) error {
	vals = vals[:len(keys)]
	clear(vals)
	if len(keys) == 0 {
		return nil
	}
	return c.run(ctx, func(ctx context.Context) error {
		if len(keys) <= maxKeysPerGet {
			res, err := c.rdb.MGet(ctx, keys...).Result()
			if err != nil {
				return err
			}
			return copyValues(res, vals)
		}
		pipe := c.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, 0, (len(keys)+maxKeysPerGet-1)/maxKeysPerGet)
		for start := 0; start < len(keys); start += maxKeysPerGet {
			cmds = append(cmds, pipe.MGet(ctx, keys[start:min(start+maxKeysPerGet, len(keys))]...))
		}
		_, err := pipe.Exec(ctx)
		for i, cmd := range cmds {
			if cmd.Err() != nil {
				continue
			}
			start := i * maxKeysPerGet
			if cerr := copyValues(cmd.Val(), vals[start:min(start+maxKeysPerGet, len(keys))]); err == nil {
				err = cerr
			}
		}
		return err
	})
}

// copyValues copies one MGET answer into vals.
func copyValues(res []any, vals [][]byte) error {
	if len(res) != len(vals) {
		return &ProtocolError{Line: fmt.Sprintf("MGET of %d keys answered %d values", len(vals), len(res))}
	}
	for i, v := range res {
		switch v := v.(type) {
		case nil:
		case string:
			vals[i] = []byte(v)
		default:
			return &ProtocolError{Line: fmt.Sprintf("MGET value of type %T", v)}
		}
	}
	return nil
}

// Set stores value under key (SET without expiry) and waits for Redis's
// answer. Redis's OOM answer (the value cannot be stored within maxmemory,
// under maxmemory-policy noeviction or when eviction cannot free enough) is
// returned wrapped in ErrTooLarge.
func (c *RedisClient) Set(ctx context.Context, key string, value []byte) error {
	return c.run(ctx, func(ctx context.Context) error {
		err := c.rdb.Set(ctx, key, value, 0).Err()
		if err != nil && redis.HasErrorPrefix(err, "OOM") {
			return fmt.Errorf("%w: redis: %w", ErrTooLarge, err)
		}
		return err
	})
}

// Limit is Redis's memory limit in bytes: maxmemory as INFO memory reports
// it (an app server may not be allowed CONFIG GET), 0 when Redis has none.
func (c *RedisClient) Limit(ctx context.Context) (int64, error) {
	var limit int64
	err := c.run(ctx, func(ctx context.Context) error {
		info, err := c.rdb.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		limit, err = parseMaxmemory(info)
		return err
	})
	return limit, err
}

// parseMaxmemory finds "maxmemory:<bytes>" in an INFO answer.
func parseMaxmemory(info string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "maxmemory:")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, &ProtocolError{Line: sc.Text()}
		}
		return n, nil
	}
	return 0, &ProtocolError{Line: "INFO memory without maxmemory"}
}
