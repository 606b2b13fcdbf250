package cache

import (
	"strings"
	"testing"
	"testing/quick"
)

func legalMemcachedKey(k string) bool {
	return len(k) > 0 && len(k) <= MaxKeyLen && LegalKey(k)
}

func TestKeyDirect(t *testing.T) {
	for _, tc := range []struct{ backend, key, want string }{
		{"catalog", "k1", "catalog:k1"},
		{"ratings", "42", "ratings:42"},
		{"a", "ünïcode-ok", "a:ünïcode-ok"},
		{"a", strings.Repeat("x", MaxKeyLen-2), "a:" + strings.Repeat("x", MaxKeyLen-2)},
	} {
		if got := Key(tc.backend, tc.key); got != tc.want {
			t.Errorf("Key(%q, %q) = %q, want %q", tc.backend, tc.key, got, tc.want)
		}
	}
}

func TestKeyHashed(t *testing.T) {
	for _, tc := range []struct{ name, key string }{
		{"too long by one", strings.Repeat("x", MaxKeyLen-1)},
		{"space", "a b"},
		{"newline", "a\nb"},
		{"tab", "a\tb"},
		{"NUL", "a\x00b"},
		{"DEL", "a\x7fb"},
		{"starts with the hash marker", "#abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Key("a", tc.key)
			if !strings.HasPrefix(got, "a:#") || len(got) != len("a:#")+64 {
				t.Fatalf("Key(a, %q) = %q, want a:#<64 hex>", tc.key, got)
			}
			if !legalMemcachedKey(got) {
				t.Fatalf("hashed key %q is not a legal memcached key", got)
			}
		})
	}
	// The known SHA-256 of "a b", so the documented derivation is pinned.
	if got, want := Key("catalog", "a b"), "catalog:#c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65"; got != want {
		t.Fatalf("Key(catalog, \"a b\") = %q, want %q", got, want)
	}
}

// Properties: every mapped key is legal for memcached; the direct form is
// used exactly when it is legal and unambiguous; different keys of one
// backend map to different memcached keys.
func TestKeyProperties(t *testing.T) {
	backends := []string{"a", "catalog", strings.Repeat("b", 64)}
	legal := func(bi uint8, key string) bool {
		b := backends[int(bi)%len(backends)]
		if key == "" {
			return true
		}
		k := Key(b, key)
		if !legalMemcachedKey(k) {
			return false
		}
		isDirect := k == b+":"+key
		wantDirect := len(b)+1+len(key) <= MaxKeyLen && LegalKey(key) && key[0] != '#'
		return isDirect == wantDirect
	}
	if err := quick.Check(legal, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
	distinct := func(k1, k2 string) bool {
		if k1 == k2 || k1 == "" || k2 == "" {
			return true
		}
		return Key("catalog", k1) != Key("catalog", k2)
	}
	if err := quick.Check(distinct, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
	// A direct key that looks like a hashed one cannot collide with it.
	h := Key("catalog", "a b")
	if Key("catalog", strings.TrimPrefix(h, "catalog:")) == h {
		t.Fatal("a key spelled like a hashed key maps onto the hashed key")
	}
}

func FuzzKey(f *testing.F) {
	f.Add("k1")
	f.Add("a b")
	f.Add("#x")
	f.Fuzz(func(t *testing.T, key string) {
		if key == "" {
			return
		}
		if k := Key("catalog", key); !legalMemcachedKey(k) {
			t.Fatalf("Key(catalog, %q) = %q is not legal", key, k)
		}
	})
}
