package value

import (
	"encoding/hex"
	"testing"
)

// The worked example of docs/backends.md; a reimplementation in any language
// must give the same bytes.
func TestKnownVector(t *testing.T) {
	got := hex.EncodeToString(Bytes("catalog", "k1", 12))
	if got != knownHex {
		t.Fatalf("Bytes(catalog, k1, 12) = %s, want %s", got, knownHex)
	}
}

const knownHex = "c3173cc3b6b1515004bc6fa8"

func TestCheckAndPrefixes(t *testing.T) {
	for _, size := range []int{0, 1, 7, 8, 9, 1000, 23 << 10} {
		b := Bytes("ratings", "user:42", size)
		if len(b) != size || !Check(b, "ratings", "user:42") {
			t.Fatalf("size %d: Check failed on its own value", size)
		}
		if size > 0 {
			b[size-1] ^= 1
			if Check(b, "ratings", "user:42") {
				t.Fatalf("size %d: Check accepted a corrupted value", size)
			}
		}
	}
	// Different backend, key or size give different values.
	a := Bytes("a", "k", 64)
	for _, o := range [][]byte{Bytes("b", "k", 64), Bytes("a", "j", 64), Bytes("a", "k", 65)[:64]} {
		if string(a) == string(o) {
			t.Fatal("values collide across backend/key/size")
		}
	}
}

func BenchmarkFill23KB(b *testing.B) {
	buf := make([]byte, 23<<10)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		Fill(buf, "catalog", "key")
	}
}
