// Package value derives the bytes a backend returns for a query. Values are a
// pure function of (backend name, key, size), so a cache entry, a backend
// response and a test can all be checked against the same derivation:
//
//  1. seed = FNV-1a 64-bit hash of the bytes  name 0x00 key 0x00 decimal(size)
//  2. state = seed; for each 8-byte word: state += 0x9E3779B97F4A7C15, then
//     z = state; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
//     z = (z ^ z>>27) * 0x94D049BB133111EB; z ^= z>>31   (SplitMix64)
//  3. the value is the words written little-endian, concatenated, cut to size.
//
// docs/backends.md repeats this with a worked example.
package value

import (
	"encoding/binary"
	"strconv"

	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// Seed is step 1 of the derivation.
func Seed(backend, key string, size int) uint64 {
	h := hashing.FNV1aSep(hashing.FNV1aAdd(hashing.FNVOffset, backend))
	h = hashing.FNV1aSep(hashing.FNV1aAdd(h, key))
	var buf [20]byte
	return hashing.FNV1aAdd(h, string(strconv.AppendInt(buf[:0], int64(size), 10)))
}

// Bytes returns the value of key at backend, size bytes long.
func Bytes(backend, key string, size int) []byte {
	out := make([]byte, size)
	Fill(out, backend, key)
	return out
}

// Fill writes the value of (backend, key, len(dst)) into dst.
func Fill(dst []byte, backend, key string) {
	state := Seed(backend, key, len(dst))
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], hashing.SplitMix64(&state))
	}
	if i < len(dst) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], hashing.SplitMix64(&state))
		copy(dst[i:], tail[:])
	}
}

// Check reports whether b is the value of (backend, key, len(b)).
func Check(b []byte, backend, key string) bool {
	state := Seed(backend, key, len(b))
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(w[:], hashing.SplitMix64(&state))
		n := 8
		if rest := len(b) - i; rest < n {
			n = rest
		}
		for j := 0; j < n; j++ {
			if b[i+j] != w[j] {
				return false
			}
		}
	}
	return true
}
