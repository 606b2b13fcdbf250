package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// A real `watch fetchers` log: a memcached on a free loopback port, a
// watcher connection reading what it prints while a client does cache-aside
// traffic (get, and set on a miss) over keys memcached must encode in the
// log; the captured log is imported as a backend's stream, whose keys and
// sizes come out as the client's.
func TestImportRealWatchFetchersLog(t *testing.T) {
	if _, err := exec.LookPath("memcached"); err != nil {
		t.Skip("memcached is not installed (make deps installs it)")
	}
	_, addr := testutil.Memcached(t, 64)

	watch, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if _, err := watch.Write([]byte("watch fetchers\r\n")); err != nil {
		t.Fatal(err)
	}
	// The watcher's lines, read by a goroutine this test owns: it ends when
	// the connection is closed (deferred above) and the test waits for it.
	lines := make(chan string, 1<<16)
	readerDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(watch)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		readerDone <- sc.Err()
	}()
	defer func() { watch.Close(); <-readerDone }()
	var log strings.Builder
	// await reads lines until one satisfies ok, failing after 10 s.
	await := func(what string, ok func(string) bool) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case l, open := <-lines:
				if !open {
					t.Fatalf("the watch connection closed before %s; log so far:\n%s", what, log.String())
				}
				log.WriteString(l + "\n")
				if ok(l) {
					return
				}
			case <-timeout:
				t.Fatalf("no %s within 10 s; log so far:\n%s", what, log.String())
			}
		}
	}
	await("OK from the watch command", func(l string) bool { return strings.TrimSpace(l) == "OK" })

	mc := memcache.New(addr)
	keys := []string{"user/42", "k%1", "caf\u00e9", "plain", "a.b-c_d~e", "long-" + strings.Repeat("x", 200)}
	sizeOf := func(k string) int { return 100 + 37*len(k) }
	var gets []string // the keys of every lookup, in order (a set's lookup too)
	for i := range 300 {
		k := keys[(i*i+i/7)%len(keys)]
		_, err := mc.Get(k)
		gets = append(gets, k)
		if err == memcache.ErrCacheMiss {
			if err := mc.Set(&memcache.Item{Key: k, Value: make([]byte, sizeOf(k))}); err != nil {
				t.Fatal(err)
			}
			gets = append(gets, k)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	// A last lookup marks the end of the traffic in the log.
	if _, err := mc.Get("the-end"); err != memcache.ErrCacheMiss {
		t.Fatalf("get the-end: %v", err)
	}
	gets = append(gets, "the-end")
	await("the last lookup in the log", func(l string) bool { return strings.Contains(l, " key=the-end ") })

	text := log.String()
	for _, want := range []string{"type=item_get key=user%2F42 status=not_found", "key=k%251 ", "key=caf%C3%A9 ", "key=a.b-c_d~e ", "status=found"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the log has no %q:\n%.3000s", want, text)
		}
	}
	path := filepath.Join(t.TempDir(), "fetchers.log")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "t.jsonl")
	code, _, stderr := tg("import", "--out", out, "--stream", "b1="+path, "--requests", "20", "--backend-names", "b1,b2",
		"--queries-per-request", "4", "--seed", "3")
	if code != 0 {
		t.Fatalf("import: %s", stderr)
	}
	if !strings.Contains(stderr, "format_b1=fetchers") {
		t.Fatalf("the format was not detected as fetchers: %s", stderr)
	}
	n := 0
	for _, r := range readTrace(t, out) {
		for _, q := range r.Layers[0] {
			if q.Backend != "b1" {
				continue
			}
			for j, k := range q.Keys {
				if k != gets[n] {
					t.Fatalf("b1 query %d: key %q, the client's lookup %d was %q", n, k, n, gets[n])
				}
				// Every key was set before its second lookup, so its first
				// miss takes the size of a later hit.
				if want := int64(sizeOf(k)); q.Sizes[j] != want {
					t.Fatalf("b1 query %d (%s): size %d, the client stored %d", n, k, q.Sizes[j], want)
				}
				n++
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d queries of b1 came from the log", n)
	}
	t.Logf("%d b1 queries from a log of %d lines, e.g.:\n%s", n, strings.Count(text, "\n"), strings.Join(strings.SplitN(text, "\n", 4)[:3], "\n"))
}
