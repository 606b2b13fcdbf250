package safefile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/lib/safefile/probetest"
)

// within fails the test when f has not returned after a generous deadline:
// a reader that blocks (on a FIFO) would otherwise hang the test binary.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return within 60 s (blocked?)", what)
	}
}

// Every probe of the shared list: the wrong kind of file is refused by its
// kind or size, naming the path; hostile text is read when it is within the
// bound and refused by its size when it is not.
func TestProbes(t *testing.T) {
	const bound = 1 << 20
	for _, p := range probetest.Make(t) {
		t.Run(p.Name, func(t *testing.T) {
			var b []byte
			var err error
			within(t, "ReadFile", func() { b, err = safefile.ReadFile(p.Path, bound) })
			size := len(p.Text) * max(p.Count, 1)
			var want error
			switch {
			case p.Refused == "not_regular":
				want = safefile.ErrNotRegular
			case p.Refused == "too_large" || p.Kind == "content" && size > bound:
				want = safefile.ErrTooLarge
			case p.Refused == "missing":
				want = fs.ErrNotExist
			}
			if want == nil {
				if err != nil || len(b) != size {
					t.Fatalf("ReadFile: %d bytes (want %d), %v", len(b), size, err)
				}
				return
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), p.Path) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ReadFile: %v; want one line with %v naming %s", err, want, p.Path)
			}
			if p.Kind == "file" && p.Refused != "too_large" {
				var f *os.File
				within(t, "Open", func() { f, err = safefile.Open(p.Path) })
				if !errors.Is(err, want) {
					f.Close()
					t.Fatalf("Open: %v, want %v", err, want)
				}
			}
		})
	}
}

func TestKinds(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	if b, err := safefile.ReadFile(link, 1); err != nil || string(b) != "x" {
		t.Fatalf("a symlink to a regular file: %q, %v", b, err)
	}
	if _, err := safefile.ReadFile(ok, 0); !errors.Is(err, safefile.ErrTooLarge) {
		t.Fatalf("one byte over a bound of 0: %v", err)
	}
	for path, want := range map[string]string{dir: "a folder", "/dev/null": "a character device"} {
		if _, err := safefile.Open(path); err == nil || err.Error() != "open "+path+": "+want+", not a regular file" {
			t.Errorf("%s: %v", path, err)
		}
	}
}
