// Package cache talks to an application server's cache instances (memcached
// or Redis): the key mapping (Key), a small memcached text-protocol client
// with a bounded connection pool and context deadlines (Client), a Redis
// client with the same contract (RedisClient), both behind one interface
// (Store) and one circuit breaker, and a bounded background fill queue per
// partition (Filler).
package cache

import (
	"context"
	"errors"
	"net"
	"os"

	"github.com/redis/go-redis/v9"
)

// Store is one cache instance, memcached (*Client) or Redis (*RedisClient),
// as the app server uses it. Every operation goes through the instance's
// circuit breaker (breaker.go) and is bounded by the context's deadline and
// the client's Options.Timeout. Implementations are safe for concurrent use.
type Store interface {
	// GetMulti looks keys up and sets vals[i] to the value of keys[i], or
	// nil on a miss. vals must be at least as long as keys. Keys may
	// repeat. On error the values found so far are kept and the rest are
	// nil.
	GetMulti(ctx context.Context, keys []string, vals [][]byte) error
	// Set stores value under key without expiry. An instance that cannot
	// store the value for its size answers an error that wraps ErrTooLarge.
	Set(ctx context.Context, key string, value []byte) error
	// Limit is the instance's memory limit in bytes (memcached's
	// limit_maxbytes, Redis's maxmemory; 0 when a Redis has none).
	Limit(ctx context.Context) (int64, error)
	// BreakerOpenings is how many times the circuit breaker opened.
	BreakerOpenings() uint64
	// Bypassed reports whether the breaker is open (the instance is
	// bypassed).
	Bypassed() bool
	// Addr is the instance's address.
	Addr() string
	// Close closes the connections; operations after Close fail with
	// ErrClosed.
	Close() error
}

var (
	_ Store = (*Client)(nil)
	_ Store = (*RedisClient)(nil)
)

// ErrorKind classifies an error of a Store into a small fixed set, for
// metric labels, whichever the instance: timeout (a deadline, a socket
// timeout, no pooled connection in time), canceled, too_large (memcached's
// "object too large", Redis's OOM answer to a set), not_stored, closed,
// bypassed (the circuit breaker is open), server (an error answer of the
// instance), protocol (an answer the client cannot parse), key, conn
// (anything else: refused, reset, closed by the peer); "" for nil.
func ErrorKind(err error) string {
	var se *ServerError
	var pe *ProtocolError
	var ke *KeyError
	var re redis.Error
	var ne net.Error
	var dns *net.DNSError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &dns):
		return "resolve"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, redis.ErrPoolTimeout), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrNotStored):
		return "not_stored"
	case isClosed(err):
		return "closed"
	case errors.Is(err, ErrBreakerOpen):
		return "bypassed"
	case errors.As(err, &se), errors.As(err, &re):
		return "server"
	case errors.As(err, &pe):
		return "protocol"
	case errors.As(err, &ke):
		return "key"
	default:
		return "conn"
	}
}

func isClosed(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, redis.ErrClosed)
}
