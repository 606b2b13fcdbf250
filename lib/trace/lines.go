package trace

import (
	"bufio"
	"fmt"
	"io"
)

// MaxLineBytes bounds one trace line (without its newline): 8 MiB, the
// application server's largest request body (appserver's
// DefaultMaxBodyBytes), since a line is the body of one request. Readers of
// trace files refuse a longer line instead of buffering it, so a file that is
// not a trace (/dev/zero, a binary file) costs a bounded amount of memory.
const MaxLineBytes = 8 << 20

// LineTooLongError is a line longer than MaxLineBytes.
type LineTooLongError struct {
	// Line is the 1-based number of the line.
	Line int64
}

// Error names the line and says the input is not a trace.
func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("line %d: longer than %d bytes (8 MiB): not a trace (one JSON request per line)", e.Line, MaxLineBytes)
}

// LineReader reads a trace's lines, each at most MaxLineBytes long. It is
// not safe for concurrent use.
type LineReader struct {
	br   *bufio.Reader
	buf  []byte
	line int64
}

// NewLineReader reads lines from r through a 1 MiB buffer.
func NewLineReader(r io.Reader) *LineReader {
	return &LineReader{br: bufio.NewReaderSize(r, 1<<20)}
}

// Next returns the next line without its "\n" (or "\r\n"), valid until the
// following call, and io.EOF after the last one (a last line without a
// newline is a line). A line longer than MaxLineBytes is a
// *LineTooLongError, after reading at most MaxLineBytes plus the buffer of
// it; other errors are the underlying reader's.
func (l *LineReader) Next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		part, err := l.br.ReadSlice('\n')
		if len(l.buf)+len(part) > MaxLineBytes+2 { // +2: the "\r\n" is not the line's
			l.line++
			return nil, &LineTooLongError{Line: l.line}
		}
		l.buf = append(l.buf, part...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		if err == io.EOF && len(l.buf) == 0 {
			return nil, io.EOF
		}
		l.line++
		b := l.buf
		if n := len(b); n > 0 && b[n-1] == '\n' {
			b = b[:n-1]
			if n := len(b); n > 0 && b[n-1] == '\r' {
				b = b[:n-1]
			}
		}
		if len(b) > MaxLineBytes {
			return nil, &LineTooLongError{Line: l.line}
		}
		return b, nil
	}
}

// Line is the 1-based number of the line Next returned last.
func (l *LineReader) Line() int64 { return l.line }
