package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Freeze stops p with SIGSTOP and waits until every thread of it is
// stopped (the signal is delivered asynchronously), so the process can no
// longer answer. The returned function resumes it.
func Freeze(t testing.TB, p *Process) (resume func()) {
	t.Helper()
	p.Signal(syscall.SIGSTOP)
	pid := p.Cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within 5 s", pid)
		}
		time.Sleep(time.Millisecond)
	}
	return func() { p.Signal(syscall.SIGCONT) }
}

func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		// The state follows the parenthesised command name.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
