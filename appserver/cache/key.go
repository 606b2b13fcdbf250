package cache

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxKeyLen is memcached's key length limit in bytes.
const MaxKeyLen = 250

// HashMarker starts the key part of a hashed memcached key
// ("<backend>:#<hex>").
const HashMarker = '#'

// Key maps a query's key to its memcached key.
//
// The memcached key is "<backend>:<key>" when that is a legal memcached key:
// at most MaxKeyLen bytes, no space, control byte (0x00-0x20) or DEL (0x7f),
// and the key does not itself start with HashMarker. Otherwise it is
// "<backend>:#<hex>", where <hex> is the lowercase hex SHA-256 of the key's
// bytes (64 characters). Because direct keys never start with '#', a direct
// key and a hashed key never collide; two hashed keys collide only if SHA-256
// does. backend must be a legal topology name (1-64 characters of letters,
// digits, '_', '.', '-'), so the hashed form is always legal (≤ 130 bytes).
func Key(backend, key string) string {
	if direct(backend, key) {
		return backend + ":" + key
	}
	sum := sha256.Sum256([]byte(key))
	buf := make([]byte, 0, len(backend)+2+hex.EncodedLen(len(sum)))
	buf = append(buf, backend...)
	buf = append(buf, ':', HashMarker)
	buf = hex.AppendEncode(buf, sum[:])
	return string(buf)
}

// direct reports whether "<backend>:<key>" can be used as is.
func direct(backend, key string) bool {
	if len(backend)+1+len(key) > MaxKeyLen {
		return false
	}
	if len(key) > 0 && key[0] == HashMarker {
		return false
	}
	return LegalKey(key)
}

// LegalKey reports whether s contains only bytes memcached's text protocol
// allows in a key (no space, no control bytes, no DEL). It does not check
// the length.
func LegalKey(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// ItemOverhead is the per-item space memcached adds to key and value
// (item header, CAS, terminators): 59 bytes measured on memcached 1.6.18
// with CAS on, rounded up.
const ItemOverhead = 64

// Fits reports whether a value of n bytes under key fits in a memcached
// whose item size limit (-I, stats settings item_size_max) is itemMax.
func Fits(key string, n, itemMax int) bool {
	return n+len(key)+ItemOverhead <= itemMax
}
