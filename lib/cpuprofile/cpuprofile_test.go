package cpuprofile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	stop, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	path := filepath.Join(t.TempDir(), "cpu.prof")
	if stop, err = Start(path); err != nil {
		t.Fatal(err)
	}
	// A second profile at once is refused, naming the flag; the first goes on.
	if _, err := Start(filepath.Join(t.TempDir(), "second.prof")); err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("a second profile: %v", err)
	}
	stop()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("the profile: %v %v", fi, err)
	}
	if _, err := Start(filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof")); err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("a file that cannot be made: %v", err)
	}
}
