// Package hashing holds the project's non-cryptographic hashes, written
// once: 64-bit FNV-1a for strings, and the finishing mixes that spread its
// bits. Traces, key costs, cached values, MRC samples and simulator results
// depend on these exact functions, so they never change: the golden values
// in hashing_test.go hold them.
//
// Which to use: FNV1a (with Fmix64 when the high bits or a threshold test
// matter) to hash a string; Mix64 to scramble an integer (a rank, an id, a
// seed) into a well-mixed one; SplitMix64 for a stream of values from a
// seed.
package hashing

// The FNV-1a 64 parameters, and SplitMix64's increment (2^64 / φ).
const (
	FNVOffset = 14695981039346656037
	FNVPrime  = 1099511628211
	Golden    = 0x9E3779B97F4A7C15
)

// FNV1a is the 64-bit FNV-1a hash of s.
func FNV1a(s string) uint64 { return FNV1aAdd(FNVOffset, s) }

// FNV1aAdd continues an FNV-1a hash h over s.
func FNV1aAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= FNVPrime
	}
	return h
}

// FNV1aSep continues an FNV-1a hash h over one zero byte: the separator
// between the parts of a composite key ("backend\x00key").
func FNV1aSep(h uint64) uint64 { return h * FNVPrime }

// Fmix64 is MurmurHash3's 64-bit finalizer: every input bit reaches every
// output bit (FNV's own low bits are too regular for short keys).
func Fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Fmix64Half is the first half of Fmix64 (one multiply): enough to spread
// FNV's low bits into the high ones for a threshold test. The simulator's
// spatial sample uses it; kept as it is so that its samples, and every
// result drawn from them, stay the same.
func Fmix64Half(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// SplitMixFinal is SplitMix64's finalizer alone: a bijective 64-bit mix.
func SplitMixFinal(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// Mix64 is SplitMix64's output for state x: SplitMixFinal(x + Golden), a
// bijective hash of an integer.
func Mix64(x uint64) uint64 { return SplitMixFinal(x + Golden) }

// SplitMix64 advances the generator's state and returns its next value.
func SplitMix64(state *uint64) uint64 {
	*state += Golden
	return SplitMixFinal(*state)
}
