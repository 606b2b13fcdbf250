package testutil

import "testing"

func TestMemcachedStarts(t *testing.T) {
	_, addr := Memcached(t, 16)
	st := MemcachedStats(t, addr, "settings")
	if st["maxbytes"] != "16777216" {
		t.Fatalf("maxbytes = %q, want 16777216", st["maxbytes"])
	}
}
