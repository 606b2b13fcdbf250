package sim

import "github.com/robinhoodcache/robinhood/lib/slabcache"

// Cache is one memcached instance's contents (lib/slabcache, which the
// oracle's model shares).
type Cache = slabcache.Cache

// NewCache is slabcache.NewCache.
func NewCache(limitBytes int64) *Cache { return slabcache.NewCache(limitBytes) }

// NewScaledCache is slabcache.NewScaledCache.
func NewScaledCache(limitBytes, page int64) *Cache { return slabcache.NewScaledCache(limitBytes, page) }
