package sim

import (
	"fmt"
	"math"
	"strings"
)

// keyIDs interns one backend's keys, for every app server: dense ids from 0
// in the order of first use, which caches (cacheID adds the backend) and
// shadow models name a key by: no string hashing on the hot path, no
// memory for the garbage collector to scan (docs/simulator.md, "Speed").
type keyIDs struct {
	byKey map[string]int32
}

func newKeyIDs() *keyIDs { return &keyIDs{byKey: map[string]int32{}} }

// id is key's id, interning it on first use.
func (k *keyIDs) id(key string) int32 {
	if id, ok := k.byKey[key]; ok {
		return id
	}
	if len(k.byKey) >= math.MaxInt32 {
		panic(fmt.Sprintf("sim: more than %d distinct keys of one backend", math.MaxInt32))
	}
	id := int32(len(k.byKey))
	k.byKey[strings.Clone(key)] = id // not the request's buffer, which it would keep alive
	return id
}

// cacheID names key id of backend b in a cache: unique across backends, as
// the shared cache's "backend:key" is.
func cacheID(b uint32, id int32) uint64 { return uint64(b)<<32 | uint64(uint32(id)) }
