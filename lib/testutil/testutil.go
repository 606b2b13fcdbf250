// Package testutil starts the real parts integration tests run against: our
// own binaries (built once per test process), memcached, Redis, on loopback
// and free ports, each stopped when its test ends.
package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testutil: go.mod not found above the working directory")
		}
		dir = parent
	}
}

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// Binary builds the main package at pkg (a path relative to the repository
// root, e.g. "./rbcserver/cmd/rbcserver") once per test process and returns
// the executable's path.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "robinhood-testbin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// Process is a child process started by a test.
type Process struct {
	Cmd  *exec.Cmd
	Name string
	log  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs bin with args. The process is sent SIGTERM (then SIGKILL after
// 5 s) when the test ends; its output is printed if the test failed.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	return StartEnv(t, nil, bin, args...)
}

// StartEnv is Start with env ("KEY=value") added to this process's
// environment.
func StartEnv(t testing.TB, env []string, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), Name: filepath.Base(bin), log: &syncBuffer{}, done: make(chan struct{})}
	if env != nil {
		p.Cmd.Env = append(os.Environ(), env...)
	}
	p.Cmd.Stdout = p.log
	p.Cmd.Stderr = p.log
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("--- output of %s %s ---\n%s", p.Name, strings.Join(args, " "), p.Output())
		}
	})
	return p
}

// Output returns what the process printed so far.
func (p *Process) Output() string { return p.log.String() }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to d for the process to end and returns its exit error.
func (p *Process) Wait(d time.Duration) (error, bool) {
	select {
	case <-p.done:
		return p.err, true
	case <-time.After(d):
		return nil, false
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) { _ = p.Cmd.Process.Signal(sig) }

// Stop terminates the process (SIGTERM, then SIGKILL after 5 s) and waits.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the process with SIGKILL and waits.
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// WaitTCP waits until addr accepts connections, failing the test after 15 s.
func WaitTCP(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s after 15 s", addr)
}

// WaitHTTP waits until GET url answers 200, failing the test after 15 s.
func WaitHTTP(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("GET %s did not answer 200 within 15 s", url)
}

// Memcached starts a memcached with a memory limit of mb megabytes on a free
// loopback port and returns its process and address. The test is skipped
// with a clear message when memcached is not installed (make test installs it).
func Memcached(t testing.TB, mb int, extra ...string) (*Process, string) {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		t.Fatalf("memcached is not installed: run 'make deps' (as root it installs Debian's memcached)")
	}
	addr := FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	args := append([]string{"-l", "127.0.0.1", "-p", port, "-U", "0", "-m", fmt.Sprint(mb), "-u", "root"}, extra...)
	p := Start(t, bin, args...)
	WaitTCP(t, addr)
	return p, addr
}

// Redis starts a redis-server without persistence on a free loopback port.
func Redis(t testing.TB) (*Process, string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed: run 'make deps' (as root it installs Debian's redis-server)")
	}
	addr := FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	p := Start(t, bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	WaitTCP(t, addr)
	return p, addr
}

// MemcachedStats returns the "stats" (or "stats <group>") of a memcached.
func MemcachedStats(t testing.TB, addr, group string) map[string]string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("memcached %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	cmd := "stats\r\n"
	if group != "" {
		cmd = "stats " + group + "\r\n"
	}
	if _, err := c.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if line == "END" {
			return out
		}
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "STAT" {
			out[f[1]] = f[2]
		}
	}
	t.Fatalf("memcached %s: stats ended early: %v", addr, sc.Err())
	return nil
}
