package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	"github.com/robinhoodcache/robinhood/workload/keystream"
)

// securedMemcached starts a memcached with TLS (memcached -Z) and ASCII
// authentication (memcached -Y, user alice) and returns its address and the
// credentials' files: the CA, the password file and a wrong password file.
func securedMemcached(t *testing.T) (addr, ca, password, wrong string) {
	t.Helper()
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := auth.WriteDev(secrets, nil, []string{"operator"}); err != nil {
		t.Fatal(err)
	}
	authFile, password, wrong := filepath.Join(dir, "memcached.auth"), filepath.Join(dir, "alice.password"), filepath.Join(dir, "wrong.password")
	for f, text := range map[string]string{authFile: "alice:s3cret-pw\n", password: "s3cret-pw\n", wrong: "guess\n"} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, addr = testutil.Memcached(t, 16, "-Y", authFile, "-Z",
		"-o", "ssl_chain_cert="+filepath.Join(secrets, auth.DevCert)+",ssl_key="+filepath.Join(secrets, auth.DevKey))
	return addr, filepath.Join(secrets, auth.DevCA), password, wrong
}

// lookupsOverTLS looks key up again and again over TLS as alice until stop
// is closed, and returns how many lookups memcached answered.
func lookupsOverTLS(t *testing.T, addr, ca, key string, stop <-chan struct{}) <-chan int {
	t.Helper()
	c, err := auth.NewClient(auth.ClientOptions{CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, c.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		defer conn.Close()
		br := bufio.NewReader(conn)
		n := 0
		say := func(cmd, want string) bool {
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := conn.Write([]byte(cmd)); err != nil {
				return false
			}
			line, err := br.ReadString('\n')
			return err == nil && strings.TrimSpace(line) == want
		}
		if !say("set auth 0 0 15\r\nalice s3cret-pw\r\n", "STORED") {
			done <- -1
			return
		}
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			if !say("get "+key+"\r\n", "END") {
				done <- -1
				return
			}
			n++
			// At most a thousand lookups a second: a load the watcher keeps up
			// with on a busy machine too (no skipped= gaps).
			time.Sleep(time.Millisecond)
		}
	}()
	return done
}

// A capture into a file from a memcached with TLS and authentication: the
// duration ends it, the file appears whole at --out, and the key stream
// reader tracegen import uses reads its lookups.
func TestCaptureWithTLSAndAuthenticationWritesTheFile(t *testing.T) {
	addr, ca, password, _ := securedMemcached(t)
	stop := make(chan struct{})
	traffic := lookupsOverTLS(t, addr, ca, "secured/key", stop)
	out := filepath.Join(t.TempDir(), "fetchers.log")
	code, stdout, stderr := tg("capture", "--memcached", addr, "--duration", "2s", "--out", out,
		"--tls-ca", ca, "--user", "alice", "--password-file", password)
	close(stop)
	if n := <-traffic; n < 0 {
		t.Fatal("the TLS client's lookups failed")
	}
	if code != 0 || stdout != "" {
		t.Fatalf("capture: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "ended=duration") {
		t.Fatalf("the capture did not say its duration ended it: %s", stderr)
	}
	text, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(text, []byte("OK\r\n")) {
		t.Fatalf("the log does not start with the watch command's OK: %.200q", text)
	}
	r, err := keystream.Open(out, keystream.Options{MinSize: 1, MaxSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if rec.Key != "secured/key" {
			t.Fatalf("record %d: key %q, want secured/key", n, rec.Key)
		}
		n++
	}
	if r.Format() != keystream.Fetchers || n == 0 {
		t.Fatalf("format %s with %d records; the log:\n%.500s", r.Format(), n, text)
	}
	if want := fmt.Sprintf("lookups=%d ", n); !strings.Contains(stderr, want) {
		t.Fatalf("the capture's log line does not count %s: %s", want, stderr)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*tmp*"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

// What cannot be captured is one line naming what was wrong, exit status 1,
// and nothing at --out.
func TestCaptureRefusalsAreOneLineAndWriteNothing(t *testing.T) {
	addr, ca, password, wrong := securedMemcached(t)
	_, plain := testutil.Memcached(t, 16)
	// A server that answers the watch command with ERROR, as a proxy or a
	// memcached without it does.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					_, _ = c.Write([]byte("ERROR\r\n"))
				}
			}()
		}
	}()
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared.password")
	if err := os.WriteFile(shared, []byte("s3cret-pw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "fetchers.log")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memcached", addr, "--tls-ca", ca}, `refused "watch fetchers" with "CLIENT_ERROR unauthenticated": it asks for ASCII authentication (memcached -Y), give --user and --password-file`},
		{[]string{"--memcached", addr, "--tls-ca", ca, "--user", "alice", "--password-file", wrong}, `refused --user alice and --password-file: "CLIENT_ERROR authentication failure"`},
		{[]string{"--memcached", addr, "--user", "alice", "--password-file", password}, "does it speak TLS? then give --tls-ca"},
		{[]string{"--memcached", plain, "--tls-ca", ca}, "TLS:"},
		{[]string{"--memcached", l.Addr().String()}, `refused "watch fetchers" with "ERROR": it does not know the watch command`},
		{[]string{"--memcached", addr, "--tls-ca", ca, "--user", "alice", "--password-file", shared}, "--password-file: " + shared + " is readable by group or others"},
		{[]string{"--memcached", addr, "--user", "alice"}, "--user and --password-file go together"},
		{[]string{"--memcached", addr, "--tls-cert", ca}, "need --tls-ca"},
		{[]string{"--memcached", "localhost"}, `--memcached "localhost" is not HOST:PORT`},
		{[]string{}, "give --memcached HOST:PORT"},
	} {
		args := append([]string{"capture", "--duration", "1h", "--timeout", "30s", "--out", out}, c.args...)
		code, stdout, stderr := tg(args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and one line with %q", c.args, code, stdout, stderr, c.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 { // shared.password alone
			t.Fatalf("%v left files in --out's folder: %v", c.args, entries)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memcached", plain}, "give --duration D"},
		{[]string{"--memcached", plain, "--duration", "1h", "--out", filepath.Join(dir, "no", "such", "f.log")}, "does not exist"},
	} {
		code, _, stderr := tg(append([]string{"capture"}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// fakeWatch serves one watch: it answers OK, writes lines, and closes the
// connection.
func fakeWatch(t *testing.T, lines string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			_, _ = c.Write([]byte("OK\r\n" + lines))
		}
	}()
	return l.Addr().String()
}

// A capture that memcached cuts short (it closes the connection, or it
// drops events for a slow watcher: skipped= lines) writes what came, and
// fails saying what the log lacks.
func TestCaptureCutShortKeepsTheLogAndFails(t *testing.T) {
	get := func(k string) string {
		return "ts=1.0 gid=1 type=item_get key=" + k + " status=found clsid=1 cfd=9 size=10\n"
	}
	for _, c := range []struct {
		name, lines string
		want        []string
	}{
		{"closed", get("a") + get("b"), []string{"closed the connection after 2 lookups, before --duration 1h0m0s ended"}},
		{"gaps", get("a") + "skipped=7\n" + get("b") + "skipped=3\n", []string{"closed the connection after 2 lookups",
			"memcached dropped 10 events (2 skipped= lines: the capture read too slowly)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "fetchers.log")
			code, _, stderr := tg("capture", "--memcached", fakeWatch(t, c.lines), "--duration", "1h", "--out", out)
			last := stderr[strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n")+1:]
			if code != 1 || !strings.HasPrefix(last, "tracegen capture: ") {
				t.Fatalf("exit %d, stderr %q; want exit 1 and an error line", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Fatalf("the error %q does not say %q", last, w)
				}
			}
			if text, err := os.ReadFile(out); err != nil || string(text) != "OK\r\n"+c.lines {
				t.Fatalf("the log holds %q (%v), want what came: %q", text, err, "OK\r\n"+c.lines)
			}
		})
	}
}
