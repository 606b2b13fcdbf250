package testutil

import (
	"net"
	"os"
	"testing"
)

func TestMemcachedStarts(t *testing.T) {
	_, addr := Memcached(t, 16)
	st := MemcachedStats(t, addr, "settings")
	if st["maxbytes"] != "16777216" {
		t.Fatalf("maxbytes = %q, want 16777216", st["maxbytes"])
	}
}

func TestListenRangeIsBelowTheEphemeralRange(t *testing.T) {
	cases := []struct {
		text      string
		low, high int
	}{
		{"32768\t60999\n", 12768, 32768},
		{"40000 60999", 20000, 40000},
		{"15000 60999", 10000, 15000},
		{"10500 60999", 0, 0}, // no room for 1000 ports above the floor
		{"1024 65535", 0, 0},
		{"", 0, 0},
		{"x y", 0, 0},
	}
	for _, c := range cases {
		low, high := listenRange(c.text)
		if low != c.low || high != c.high {
			t.Errorf("listenRange(%q) = [%d, %d), want [%d, %d)", c.text, low, high, c.low, c.high)
		}
	}
}

func TestFreeAddrAvoidsTheEphemeralRangeAndRepeats(t *testing.T) {
	text, err := os.ReadFile(portRangeFile)
	if err != nil {
		t.Skipf("no %s: %v", portRangeFile, err)
	}
	low, high := listenRange(string(text))
	seen := map[string]bool{}
	for range 50 {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("FreeAddr gave %s twice", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("FreeAddr gave %s, which cannot be bound: %v", addr, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if high > 0 && (port < low || port >= high) {
			t.Fatalf("FreeAddr gave port %d, outside [%d, %d)", port, low, high)
		}
	}
}
