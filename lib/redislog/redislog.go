// Package redislog sends go-redis's own log lines (connection trouble) to a
// slog.Logger at warn level, as structured lines, instead of go-redis's
// default unstructured stderr logger. The backend (a kv backend on Redis)
// and the app server (Redis partitions) use it.
package redislog

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// Use makes log the logger of every go-redis client in the process.
func Use(log *slog.Logger) { redis.SetLogger(logger{log}) }

type logger struct{ log *slog.Logger }

func (l logger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
