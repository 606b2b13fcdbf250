package cache

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// The cost of one 4-key lookup of ~2 KB values through RedisClient against a
// bare go-redis MGET on the same Redis (what appbench's loops compare):
//
//	go test -run '^$' -bench RedisGet -benchtime 20000x ./appserver/cache/
func BenchmarkRedisGetMulti(b *testing.B) {
	_, addr := testutil.Redis(b)
	keys := make([]string, 4)
	for i := range keys {
		keys[i] = fmt.Sprintf("b:%d", i)
	}
	own := NewRedisClient(addr, Options{MaxConns: 4})
	defer own.Close()
	for i, k := range keys {
		if err := own.Set(context.Background(), k, value.Bytes("b", k, 1000+700*i)); err != nil {
			b.Fatal(err)
		}
	}
	raw := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, PoolSize: 4,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer raw.Close()
	b.Run("RedisClient", func(b *testing.B) {
		vals := make([][]byte, len(keys))
		for range b.N {
			if err := own.GetMulti(context.Background(), keys, vals); err != nil || vals[3] == nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-redis", func(b *testing.B) {
		for range b.N {
			if res, err := raw.MGet(context.Background(), keys...).Result(); err != nil || res[3] == nil {
				b.Fatal(err)
			}
		}
	})
}
