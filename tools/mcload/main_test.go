package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

func TestLoadAgainstMemcached(t *testing.T) {
	_, addr := testutil.Memcached(t, 16)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{
		"--addr", addr, "--fill", "--keys", "200", "--value-size", "100",
		"--rate", "2000", "--workers", "2", "--duration", "300ms", "--report", "1h",
	}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	m := regexp.MustCompile(`gets=(\d+) rate=\d+/s hit_ratio=([0-9.]+) sets=\d+ errors=0\n$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("unexpected output %q", out.String())
	}
	gets, _ := strconv.Atoi(m[1])
	if gets == 0 || gets > 2000 {
		t.Fatalf("gets=%d: want some, and at most the rate allows in 300ms plus slack", gets)
	}
	// Every key was filled and the cache holds them all: every get hits.
	if m[2] != "1.000" {
		t.Fatalf("hit ratio %s after --fill, want 1.000", m[2])
	}
	if st := testutil.MemcachedStats(t, addr, ""); st["curr_items"] != "200" {
		t.Fatalf("curr_items %s, want 200", st["curr_items"])
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--rate", "-1"}, {"--workers", "0"}, {"--keys", "0"}, {"--value-size", "0"}, {"--bogus"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
