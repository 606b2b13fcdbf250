package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// A real `watch fetchers` log: a memcached on a free loopback port, and
// `tracegen capture` writing to stdout what memcached prints while a client
// does cache-aside traffic (get, and set on a miss) over keys memcached must
// encode in the log; each line comes out as memcached prints it, SIGINT ends
// the capture keeping what it has, and the captured log imported as a
// backend's stream gives the client's keys and sizes.
func TestCaptureThenImportARealWatchFetchersLog(t *testing.T) {
	if _, err := exec.LookPath("memcached"); err != nil {
		t.Skip("memcached is not installed (make deps installs it)")
	}
	_, addr := testutil.Memcached(t, 64)

	cmd := exec.Command(testutil.Binary(t, "./experiment/cmd/tracegen"), "capture", "--memcached", addr, "--duration", "1h")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer // read once the process has ended
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // a no-op once it has ended
	// The capture's lines, read by a goroutine this test owns: it ends when
	// the process closes its stdout, and then waits for the process.
	lines := make(chan string, 1<<16)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	// end signals the capture and waits for it; a test failure kills it.
	end := func(sig os.Signal) error {
		_ = cmd.Process.Signal(sig)
		for range lines {
		}
		return <-exited
	}
	var log strings.Builder
	// await reads lines until one satisfies ok, failing after 60 s.
	await := func(what string, ok func(string) bool) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, open := <-lines:
				if !open {
					err := <-exited
					t.Fatalf("the capture ended (%v) before %s: %s; log so far:\n%s", err, what, stderr.String(), log.String())
				}
				log.WriteString(l + "\n")
				if ok(l) {
					return
				}
			case <-timeout:
				err := end(os.Kill)
				t.Fatalf("no %s within 60 s (%v): %s; log so far:\n%s", what, err, stderr.String(), log.String())
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
	if err := end(os.Interrupt); err != nil || !strings.Contains(stderr.String(), "ended=signal") {
		t.Fatalf("the capture after SIGINT: %v, %s; want exit 0 and ended=signal", err, stderr.String())
	}

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
	code, _, errText := tg("import", "--out", out, "--stream", "b1="+path, "--requests", "20", "--backend-names", "b1,b2",
		"--queries-per-request", "4", "--seed", "3")
	if code != 0 {
		t.Fatalf("import: %s", errText)
	}
	if !strings.Contains(errText, "format_b1=fetchers") {
		t.Fatalf("the format was not detected as fetchers: %s", errText)
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
