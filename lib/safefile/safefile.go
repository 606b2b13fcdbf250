// Package safefile opens and reads the files an operator names (secrets,
// certificates, configurations, schedules, traces): regular files only, at
// most a bound, a clear error otherwise.
//
// The wrong kind of file fails at once instead of hanging or eating memory
// (docs/security.md, "Files"): a named pipe is opened without waiting for a
// writer, then refused, as are devices such as /dev/zero, sockets and
// folders; ReadFile reads at most its bound, refusing a larger file by its
// size before reading it (a 2 GB sparse file costs nothing). The Python
// twin is robinhood_common.files; both run the probes of
// tests/vectors/probes.json.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is the error (under an *os.PathError) of a path that is not
// a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is the error (under an *os.PathError) of a file larger than
// the reader's bound.
var ErrTooLarge = errors.New("file too large")

// kindError says what a path is instead of a regular file.
type kindError struct{ kind string }

func (e *kindError) Error() string        { return e.kind + ", not a regular file" }
func (e *kindError) Is(target error) bool { return target == ErrNotRegular }

// sizeError says how large a file is and how much is read.
type sizeError struct{ size, max int64 }

func (e *sizeError) Error() string {
	if e.size < 0 {
		return fmt.Sprintf("more than %d bytes, the most read here", e.max)
	}
	return fmt.Sprintf("%d bytes, more than the %d read here", e.size, e.max)
}
func (e *sizeError) Is(target error) bool { return target == ErrTooLarge }

// kind names a file mode that is not a regular file.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// Open opens path for reading when it is a regular file (symbolic links
// followed). Anything else is an *os.PathError wrapping ErrNotRegular that
// says what it is ("open /x: a named pipe (FIFO), not a regular file"),
// returned without blocking.
func Open(path string) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer; on a regular file it changes nothing.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: &kindError{kind(st.Mode())}}
	}
	return f, nil
}

// ReadFile reads the regular file at path (Open's rule) of at most max
// bytes. A larger file is an *os.PathError wrapping ErrTooLarge ("read /x:
// 2147483648 bytes, more than the 1048576 read here"), refused by its size
// before anything is read, and never read past max+1 bytes when it grows.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, &os.PathError{Op: "read", Path: path, Err: &sizeError{st.Size(), max}}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > max {
		return nil, &os.PathError{Op: "read", Path: path, Err: &sizeError{-1, max}}
	}
	return b, nil
}
