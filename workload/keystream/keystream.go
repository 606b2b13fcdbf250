// Package keystream reads real key streams — one stream of (key, size)
// records, in order — from a file in one of three formats: the ARC paper's
// block traces (arc), memcached's own `watch fetchers` log (fetchers) or a
// plain `key size` list (keysize), each possibly Zstandard-compressed.
// `tracegen import` puts such streams into a synthesized trace's queries
// (docs/workloads.md, "Real key streams").
//
// Every line is bounded (MaxLineBytes), so a file that is not a text key
// stream (/dev/zero, a binary file) is refused after a bounded read; every
// error names the file and, where it has one, the 1-based line.
package keystream

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// MaxLineBytes bounds one line of a key stream (without its newline). A
// longer line is an error: the file is not a text key stream.
const MaxLineBytes = 64 << 10

// MaxKeyBytes is memcached's key length limit; a longer key is hashed (Key).
const MaxKeyBytes = 250

// BlockBytes is the size of one block of the ARC traces.
const BlockBytes = 512

// Format names a key-stream format.
type Format string

// The formats (docs/workloads.md, "Real key streams").
const (
	// ARC is the ARC paper's .lis format: "starting_block number_of_blocks
	// ignored request_number" a line; key the starting block, size the
	// blocks × BlockBytes.
	ARC Format = "arc"
	// Fetchers is memcached's `watch fetchers` log: one
	// "ts=… gid=… type=item_get key=… status=… clsid=… cfd=… [size=…]" line
	// per item lookup.
	Fetchers Format = "fetchers"
	// KeySize is a plain list, "key [size]" a line, '#' comments.
	KeySize Format = "keysize"
)

// Formats are the known formats, in the order error messages list them.
var Formats = []Format{ARC, Fetchers, KeySize}

// ParseFormat returns the named format; "" is "" (detect). An unknown name
// is an error listing the known ones.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return "", nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("format %q is not one of %s", s, formatList())
}

func formatList() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// Record is one entry of a stream.
type Record struct {
	// Key is a valid memcached key (Key): at most MaxKeyBytes bytes of valid
	// UTF-8 without spaces, control bytes or DEL.
	Key string
	// Size is the object's size in bytes, within [Options.MinSize,
	// Options.MaxSize], when HasSize; a record without one leaves the size to
	// the caller (tracegen import synthesizes it).
	Size    int64
	HasSize bool
}

// Options configure a Reader.
type Options struct {
	// Format is the file's format; "" detects it (Detect).
	Format Format
	// Skip is the number of records skipped at the stream's start.
	Skip int64
	// MinSize and MaxSize bound the sizes (0: synth.DefaultMinSize and
	// synth.DefaultMaxSize, 1 B and 512 KiB, the synthesizer's --min-size
	// and --max-size; memcached's item limit is 1 MB). Sizes outside are
	// raised or capped to them. MaxSize is at most 2^32 - 1.
	MinSize, MaxSize int64
	// Needed, when set, is how many records after Skip the caller reads at
	// most: the fetchers format's first pass (each key's first hit) reads
	// no further than them. It is called once, by Open, only for that
	// format. nil: the first pass reads the whole stream.
	Needed func() (int64, error)
	// SizeSlots bounds the keys whose sizes a fetchers stream remembers
	// (0: DefaultSizeSlots; sizeTable says what a full table costs).
	SizeSlots int
}

// Error is an error in a stream file: at a line (Line ≥ 1) or in the file
// as a whole (Line 0).
type Error struct {
	File string
	Line int64
	Err  error
}

// Error is "FILE:LINE: what" (or "FILE: what").
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// zstdMagic starts every Zstandard frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// maxWindow bounds the memory a Zstandard stream may ask for (its window).
const maxWindow = 64 << 20

// Reader reads the records of one stream file, in order. It is not safe for
// concurrent use; Close releases the file and the decompressor.
type Reader struct {
	path    string
	opts    Options
	format  Format
	f       *os.File
	zr      *zstd.Decoder // nil for an uncompressed file
	br      *bufio.Reader
	line    int64
	count   int64  // records read, the skipped ones included
	pending []byte // a line read for detection, not yet parsed
	// sizes (fetchers) is the keys' known sizes: the first hit's from the
	// first pass, then the latest hit's as the stream goes; bounded
	// (sizeTable).
	sizes *sizeTable
}

// Open opens a stream file, detects its format unless given, and skips
// Options.Skip records. Errors name the file (and line).
func Open(path string, o Options) (*Reader, error) {
	if o.MinSize <= 0 {
		o.MinSize = synth.DefaultMinSize
	}
	if o.MaxSize <= 0 {
		o.MaxSize = synth.DefaultMaxSize
	}
	if o.MaxSize < o.MinSize {
		return nil, &Error{File: path, Err: fmt.Errorf("max size %d is below min size %d", o.MaxSize, o.MinSize)}
	}
	if o.MaxSize > math.MaxUint32 {
		return nil, &Error{File: path, Err: fmt.Errorf("max size %d is above %d", o.MaxSize, uint32(math.MaxUint32))}
	}
	if o.SizeSlots <= 0 {
		o.SizeSlots = DefaultSizeSlots
	}
	if o.Skip < 0 {
		return nil, &Error{File: path, Err: fmt.Errorf("skip=%d is negative", o.Skip)}
	}
	if _, err := ParseFormat(string(o.Format)); err != nil {
		return nil, &Error{File: path, Err: err}
	}
	r, err := open(path, o)
	if err != nil {
		return nil, err
	}
	if r.format == Fetchers {
		limit := int64(-1)
		if o.Needed != nil {
			n, err := o.Needed()
			if err != nil {
				r.Close()
				return nil, err
			}
			limit = o.Skip + n
		}
		if r.sizes, err = firstHitSizes(path, o, limit); err != nil {
			r.Close()
			return nil, err
		}
	}
	for r.count < o.Skip {
		if _, err := r.next(); err != nil {
			n := r.count
			r.Close()
			if err == io.EOF {
				return nil, &Error{File: path, Err: fmt.Errorf("skip=%d: the stream has only %d records", o.Skip, n)}
			}
			return nil, err
		}
	}
	return r, nil
}

// open opens the file, undoes its compression and settles its format.
func open(path string, o Options) (*Reader, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	r := &Reader{path: path, opts: o, format: o.Format, f: f}
	raw := bufio.NewReaderSize(f, 64<<10)
	head, err := raw.Peek(len(zstdMagic))
	if err != nil && err != io.EOF {
		f.Close()
		return nil, &Error{File: path, Err: err}
	}
	if bytes.Equal(head, zstdMagic) {
		r.zr, err = zstd.NewReader(raw, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxWindow))
		if err != nil {
			f.Close()
			return nil, &Error{File: path, Err: fmt.Errorf("the zstd stream cannot be read: %v", err)}
		}
		r.br = bufio.NewReaderSize(r.zr, MaxLineBytes+2)
	} else {
		if strings.HasSuffix(path, ".zst") {
			f.Close()
			return nil, &Error{File: path, Err: errors.New("the name ends in .zst but the file does not start with the zstd magic bytes 28 b5 2f fd: a corrupt or mislabelled file")}
		}
		r.br = bufio.NewReaderSize(raw, MaxLineBytes+2)
	}
	if r.format == "" {
		if err := r.detect(); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// Detect is the rule Open follows without Options.Format: a name ending in
// .lis (or .lis.zst) is arc; otherwise the first line that is not blank
// decides — "OK", "ts=…" or "skipped=…" (what `watch fetchers` prints) is
// fetchers, four fields that are all unsigned decimal integers arc, anything
// else keysize.
func Detect(name string, firstLine string) Format {
	base := strings.TrimSuffix(filepath.Base(name), ".zst")
	if strings.HasSuffix(base, ".lis") {
		return ARC
	}
	line := strings.TrimSpace(firstLine)
	if line == "OK" || strings.HasPrefix(line, "ts=") || strings.HasPrefix(line, "skipped=") {
		return Fetchers
	}
	if f := strings.Fields(line); len(f) == 4 {
		digits := true
		for _, s := range f {
			for i := 0; i < len(s); i++ {
				digits = digits && s[i] >= '0' && s[i] <= '9'
			}
		}
		if digits {
			return ARC
		}
	}
	return KeySize
}

func (r *Reader) detect() error {
	for {
		b, err := r.readLine()
		if err == io.EOF {
			r.format = Detect(r.path, "")
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(b)) > 0 {
			r.pending = append([]byte(nil), b...)
			r.format = Detect(r.path, string(b))
			return nil
		}
	}
}

// Format is the stream's format, given or detected.
func (r *Reader) Format() Format { return r.format }

// Count is the number of records read so far, the skipped ones included.
func (r *Reader) Count() int64 { return r.count }

// SizeTable is, for a fetchers stream, how many keys' sizes it remembers
// and whether some key was not remembered (the table is bounded: sizeTable);
// the misses of such a key have no size.
func (r *Reader) SizeTable() (keys int, full bool) {
	if r.sizes == nil {
		return 0, false
	}
	return r.sizes.n, r.sizes.full
}

// Close releases the file and the decompressor.
func (r *Reader) Close() error {
	if r.zr != nil {
		r.zr.Close()
		r.zr = nil
	}
	return r.f.Close()
}

// Next returns the next record, io.EOF after the last. Any other error is
// an *Error naming the file and line.
func (r *Reader) Next() (Record, error) { return r.next() }

func (r *Reader) next() (Record, error) {
	for {
		var b []byte
		if r.pending != nil {
			b, r.pending = r.pending, nil
		} else {
			var err error
			if b, err = r.readLine(); err != nil {
				return Record{}, err
			}
		}
		rec, ok, err := r.parse(b)
		if err != nil {
			return Record{}, &Error{File: r.path, Line: r.line, Err: err}
		}
		if ok {
			r.count++
			return rec, nil
		}
	}
}

// readLine returns the next line without its newline (valid until the next
// call), io.EOF at the end; a line over MaxLineBytes, a NUL byte or a
// broken zstd stream is an *Error.
func (r *Reader) readLine() ([]byte, error) {
	b, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.line++
		return nil, &Error{File: r.path, Line: r.line, Err: fmt.Errorf("line longer than %d bytes: not a text key stream", MaxLineBytes)}
	}
	if err != nil && err != io.EOF {
		if r.zr != nil {
			return nil, &Error{File: r.path, Err: fmt.Errorf("the zstd stream is truncated or corrupt after line %d: %v", r.line, err)}
		}
		return nil, &Error{File: r.path, Err: err}
	}
	if len(b) == 0 {
		return nil, io.EOF
	}
	r.line++
	b = bytes.TrimSuffix(b, []byte{'\n'})
	b = bytes.TrimSuffix(b, []byte{'\r'})
	if len(b) > MaxLineBytes {
		return nil, &Error{File: r.path, Line: r.line, Err: fmt.Errorf("line longer than %d bytes: not a text key stream", MaxLineBytes)}
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return nil, &Error{File: r.path, Line: r.line, Err: fmt.Errorf("a NUL byte at column %d: not a text key stream (binary data?)", i+1)}
	}
	return b, nil
}

// parse turns a line into a record; ok is false for a line that is not one
// (blank, a comment, a non-fetch event).
func (r *Reader) parse(b []byte) (Record, bool, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return Record{}, false, nil
	}
	switch r.format {
	case ARC:
		return r.parseARC(b)
	case Fetchers:
		return r.parseFetch(b)
	default:
		return r.parseKeySize(b)
	}
}

// clamp bounds a size to [MinSize, MaxSize].
func (r *Reader) clamp(size int64) int64 { return min(max(size, r.opts.MinSize), r.opts.MaxSize) }

// Key makes a key valid for memcached, deterministically: a key of at most
// MaxKeyBytes bytes, of valid UTF-8 without spaces, control bytes or DEL,
// that does not start with '#', is itself; any other is "#" followed by the
// lowercase hex SHA-256 of its bytes (65 bytes). Since kept keys never start
// with '#', a kept key and a hashed one never collide. (Invalid UTF-8 is
// hashed because the trace writer would replace it, merging keys.)
func Key(k string) string {
	ok := len(k) > 0 && len(k) <= MaxKeyBytes && k[0] != '#' && utf8.ValidString(k)
	for i := 0; ok && i < len(k); i++ {
		ok = k[i] > ' ' && k[i] != 0x7f
	}
	if ok {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "#" + hex.EncodeToString(sum[:])
}
