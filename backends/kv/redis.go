package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/robinhoodcache/robinhood/backends/value"
)

// Redis is a store kept in a real Redis server: GET the key, and on a miss
// (or a stored value of another size) SET the derived value. Keys are
// prefixed with "<backend name>:" so several backends can share one Redis.
// Redis's own maxmemory setting bounds its memory.
type Redis struct {
	name   string
	client *redis.Client
}

// RedisOptions configures NewRedis.
type RedisOptions struct {
	// Addr is the Redis server, host:port.
	Addr string
	// PoolSize is the number of connections; size it to the backend's
	// workers (the model never has more queries in service).
	PoolSize int
	// Timeout bounds dialing and each command (default 2s).
	Timeout time.Duration
}

// NewRedis connects to Redis for backend name and checks the connection with
// a PING.
func NewRedis(ctx context.Context, name string, o RedisOptions) (*Redis, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 8
	}
	c := redis.NewClient(&redis.Options{
		Addr:         o.Addr,
		PoolSize:     o.PoolSize,
		DialTimeout:  o.Timeout,
		ReadTimeout:  o.Timeout,
		WriteTimeout: o.Timeout,
		// RESP2 and no client-identity or maintenance-notification
		// handshakes: plain GET/SET against any Redis version, no noise in
		// its log.
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("kv: redis %s: %w", o.Addr, err)
	}
	return &Redis{name: name, client: c}, nil
}

// Key returns the Redis key holding key's value.
func (r *Redis) Key(key string) string { return r.name + ":" + key }

// Get returns the value of key with the given size.
func (r *Redis) Get(ctx context.Context, key string, size int) ([]byte, error) {
	rk := r.Key(key)
	b, err := r.client.Get(ctx, rk).Bytes()
	switch {
	case err == nil && len(b) == size:
		return b, nil
	case err != nil && !errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("redis GET %q: %w", rk, err)
	}
	v := value.Bytes(r.name, key, size)
	if err := r.client.Set(ctx, rk, v, 0).Err(); err != nil {
		return nil, fmt.Errorf("redis SET %q: %w", rk, err)
	}
	return v, nil
}

// Close closes the connections.
func (r *Redis) Close() error { return r.client.Close() }
