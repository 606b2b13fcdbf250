package keystream

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func compress(t *testing.T, text string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll returns every record of a stream, or the first error.
func readAll(t *testing.T, path string, o Options) ([]Record, error) {
	t.Helper()
	r, err := Open(path, o)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

func sized(key string, size int64) Record { return Record{Key: key, Size: size, HasSize: true} }

func same(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// wantErr checks that err is an *Error whose text is exactly msg.
func wantErr(t *testing.T, err error, msg string) {
	t.Helper()
	var ke *Error
	if !errors.As(err, &ke) {
		t.Fatalf("err %v (%T), want a keystream.Error %q", err, err, msg)
	}
	if err.Error() != msg {
		t.Fatalf("error\n  %s\nwant\n  %s", err, msg)
	}
}

const arcLines = "3050771 25 0 0\n2461851 8 0 1\r\n\n0003050771 8 252 2\n7 2048 0 3"

func TestARCRecords(t *testing.T) {
	p := write(t, "P2.lis", arcLines)
	got, err := readAll(t, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Leading zeros do not make another key; 2048 blocks (1 MiB) are capped
	// to the synthesizer's --max-size default, 512 KiB.
	same(t, got, []Record{sized("3050771", 12800), sized("2461851", 4096), sized("3050771", 4096), sized("7", 512<<10)})
	got, err = readAll(t, p, Options{MaxSize: 2000, MinSize: 600, Skip: 1})
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, []Record{sized("2461851", 2000), sized("3050771", 2000), sized("7", 2000)})
}

func TestARCErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct{ line, msg string }{
		{"1 2 3", "3 fields, want 4: starting_block number_of_blocks ignored request_number"},
		{"1 2 3 4 5", "5 fields, want 4: starting_block number_of_blocks ignored request_number"},
		{"-1 2 0 4", `field 1 "-1" is not a block number`},
		{"1 x 0 4", `field 2 "x" is not a block count`},
		{"1 0 0 4", `field 2 "0" is not a block count`},
		{"1 2 z 4", `field 3 "z" is not an integer`},
		{"1 2 0 -4", `field 4 "-4" is not a request number`},
	} {
		p := write(t, "P2.lis", "1 1 0 0\n\n"+tc.line+"\n")
		_, err := readAll(t, p, Options{})
		wantErr(t, err, p+":3: "+tc.msg)
	}
}

func TestZstdIsDetectedByItsMagicBytes(t *testing.T) {
	plain, err := readAll(t, write(t, "a.lis", arcLines), Options{})
	if err != nil {
		t.Fatal(err)
	}
	z := compress(t, arcLines)
	// Compressed under a name that says nothing: the magic bytes tell.
	p := filepath.Join(t.TempDir(), "stream")
	if err := os.WriteFile(p, z, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, plain)
}

func TestTruncatedOrCorruptZstdIsAnErrorNamingTheFile(t *testing.T) {
	var text strings.Builder
	for i := range 20000 {
		text.WriteString(strings.Repeat("1", i%7+1) + " 8 0 12\n")
	}
	z := compress(t, text.String())
	dir := t.TempDir()
	trunc := filepath.Join(dir, "cut.lis.zst")
	if err := os.WriteFile(trunc, z[:len(z)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := readAll(t, trunc, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), trunc+": the zstd stream is truncated or corrupt after line ") {
		t.Fatalf("truncated: %v", err)
	}
	bad := append([]byte(nil), z...)
	for i := len(bad) / 3; i < len(bad)/3+64; i++ {
		bad[i] ^= 0x5a
	}
	corrupt := filepath.Join(dir, "bad.lis.zst")
	if err := os.WriteFile(corrupt, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = readAll(t, corrupt, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), corrupt+": ") {
		t.Fatalf("corrupt: %v", err)
	}
	mislabelled := write(t, "plain.lis.zst", arcLines)
	_, err = readAll(t, mislabelled, Options{})
	wantErr(t, err, mislabelled+": the name ends in .zst but the file does not start with the zstd magic bytes 28 b5 2f fd: a corrupt or mislabelled file")
}

// What memcached 1.6.18 printed for `watch fetchers` (and `watch fetchers
// mutations`) under pymemcache traffic: set k1, set "k%2", get k1, get nope,
// get_many [k1, "k%2", nope2], …, a meta set of a binary key (base64 YmluAAE=).
const fetchersLog = "OK\r\n" +
	"ts=1795680830.559209 gid=2 type=item_get key=k1 status=not_found clsid=0 cfd=25 size=0\n" +
	"ts=1795680830.559826 gid=3 type=item_get key=k%252 status=not_found clsid=0 cfd=25 size=0\n" +
	"ts=1795680850.871095 gid=26 type=item_store key=aa status=stored cmd=set ttl=0 clsid=1 cfd=25 size=10\n" +
	"ts=1795680830.559830 gid=4 type=item_get key=k1 status=found clsid=4 cfd=25 size=100\n" +
	"ts=1795680830.559908 gid=5 type=item_get key=nope status=not_found clsid=0 cfd=25 size=0\n" +
	"ts=1795680830.559940 gid=7 type=item_get key=k%252 status=found clsid=17 cfd=25 size=3000\n" +
	"ts=1795680830.602319 gid=11 type=item_get key=k%2F2 status=found clsid=1 cfd=25 size=1\n" +
	"ts=1795680830.689519 gid=17 type=item_get key=k1 status=expired clsid=0 cfd=25 size=0\n" +
	"ts=1795680830.700000 gid=18 type=item_get key=k1 status=found clsid=4 cfd=25 size=150\n" +
	"ts=1795680830.710000 gid=19 type=item_get key=k1 status=not_found clsid=0 cfd=25 size=0\n" +
	"ts=1795680830.990411 gid=22 type=item_get key=bin%00%01 status=found clsid=1 cfd=26 size=2\n"

func TestFetchersRecords(t *testing.T) {
	p := write(t, "watch.log", fetchersLog)
	r, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Format() != Fetchers {
		t.Fatalf("detected %q", r.Format())
	}
	r.Close()
	got, err := readAll(t, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bin := Key("bin\x00\x01")
	same(t, got, []Record{
		sized("k1", 100),   // a miss before any hit: the key's first hit's size
		sized("k%2", 3000), // decoded as memcached encodes it
		sized("k1", 100),
		{Key: "nope"}, // never a hit: no size
		sized("k%2", 3000),
		sized("k/2", 1),
		sized("k1", 100), // expired: the latest hit before it
		sized("k1", 150),
		sized("k1", 150),
		sized(bin, 2), // a binary key, hashed
	})
	if !strings.HasPrefix(bin, "#") || len(bin) != 65 {
		t.Fatalf("binary key made %q", bin)
	}
}

func TestFetchersErrors(t *testing.T) {
	head := "OK\r\nts=1.2 gid=2 type=item_get key=a status=found clsid=1 cfd=5 size=3\n"
	for _, tc := range []struct{ line, msg string }{
		{"skipped=12", `"skipped=12": memcached dropped that many events because the watcher read too slowly, so the stream has a gap there; capture again (tracegen capture into a file on local disk), or delete this line to accept the gap`},
		{"hello world", `not a 'watch fetchers' line: want "ts=… gid=… type=item_get key=… status=…", got "hello world"`},
		{"ERROR", `memcached refused the watch command ("ERROR"): capture 'watch fetchers' (tracegen capture) from a memcached that has it`},
		{"ts=1.3 gid=3 type=item_get key=a%2 status=found size=1", `key=a%2: '%' at byte 2 is not followed by two hex digits (memcached writes a byte as %XX)`},
		{"ts=1.3 gid=3 type=item_get key=a%zz status=found size=1", `key=a%zz: '%' at byte 2 is not followed by two hex digits (memcached writes a byte as %XX)`},
		{"ts=1.3 gid=3 type=item_get key=a status=gone size=1", `status=gone is not found, not_found, flushed or expired`},
		{"ts=1.3 gid=3 type=item_get status=found size=1", `an item_get event without a key= field`},
		{"ts=1.3 gid=3 type=item_get key= status=found size=1", `an item_get event without a key= field`},
		{"ts=1.3 gid=3 type=item_get key=a size=1", `an item_get event without a status= field`},
		{"ts=1.3 gid=3 type=item_get key=a status=found size=-1", `size=-1 is not a size in bytes`},
		{"ts=1.3 gid=3 key=a status=found", `no type= field: not a 'watch fetchers' event`},
		{"ts=1.3 gid=3 type=item_get key=a status=found junk", `field "junk" is not NAME=VALUE`},
	} {
		p := write(t, "w.log", head+tc.line+"\n")
		_, err := readAll(t, p, Options{Format: Fetchers})
		wantErr(t, err, p+":3: "+tc.msg)
	}
}

func TestKeySizeRecords(t *testing.T) {
	p := write(t, "keys.txt", "# key size\nuser:1 300\n\n  user:2   # no size: synthesized\nuser:1 99999999 # capped\nuser:3 0\n")
	got, err := readAll(t, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, []Record{sized("user:1", 300), {Key: "user:2"}, sized("user:1", 512<<10), sized("user:3", 1)})
	for _, tc := range []struct{ line, msg string }{
		{"a 1 2", `3 fields, want "key [size]" (a '#' starts a comment)`},
		{"a -1", `field 2 "-1" is not a size in bytes`},
		{"a 1k", `field 2 "1k" is not a size in bytes`},
	} {
		p := write(t, "k.txt", "ok 1\n"+tc.line+"\n")
		_, err := readAll(t, p, Options{})
		wantErr(t, err, p+":2: "+tc.msg)
	}
}

func TestFormatIsDetectedOrGiven(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       Format
	}{
		{"x.lis", "a b\n", ARC}, // the name wins (the line is then an error)
		{"x.lis.zst", "", ARC},
		{"x.txt", "\n\n1 2 3 4\n", ARC},
		{"x.txt", "OK\r\n", Fetchers},
		{"x.txt", "ts=1 gid=1 type=item_get key=a status=found\n", Fetchers},
		{"x.txt", "1 2 3\n", KeySize},
		{"x.txt", "# comment\n1 2 3 4\n", KeySize},
		{"x.txt", "", KeySize},
	} {
		if got := Detect(tc.name, strings.SplitN(strings.TrimLeft(tc.text, "\n"), "\n", 2)[0]); got != tc.want {
			t.Errorf("Detect(%q, %q) = %q, want %q", tc.name, tc.text, got, tc.want)
		}
	}
	p := write(t, "keys.lis", "1 2 0 0\n")
	r, err := Open(p, Options{Format: KeySize})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if rec, err := r.Next(); r.Format() != KeySize || err == nil || rec.Key != "" {
		t.Fatalf("given keysize: %q %+v %v", r.Format(), rec, err)
	}
	_, err = Open(p, Options{Format: "lis"})
	wantErr(t, err, p+`: format "lis" is not one of arc, fetchers, keysize`)
	if _, err := ParseFormat("csv"); err == nil || err.Error() != `format "csv" is not one of arc, fetchers, keysize` {
		t.Fatalf("ParseFormat: %v", err)
	}
}

func TestSkip(t *testing.T) {
	p := write(t, "k.txt", "a 1\nb 2\nc 3\n")
	got, err := readAll(t, p, Options{Skip: 2})
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, []Record{sized("c", 3)})
	got, err = readAll(t, p, Options{Skip: 3})
	if err != nil || len(got) != 0 {
		t.Fatalf("skip all: %v %v", got, err)
	}
	_, err = readAll(t, p, Options{Skip: 4})
	wantErr(t, err, p+": skip=4: the stream has only 3 records")
}

func TestTooLongLineAndBinaryInputAreRefused(t *testing.T) {
	p := write(t, "k.txt", "a 1\n"+strings.Repeat("x", MaxLineBytes+1)+"\n")
	_, err := readAll(t, p, Options{})
	wantErr(t, err, p+":2: line longer than 65536 bytes: not a text key stream")
	p = write(t, "k.txt", "a 1\nb\x00c 2\n")
	_, err = readAll(t, p, Options{Format: KeySize})
	wantErr(t, err, p+":2: a NUL byte at column 2: not a text key stream (binary data?)")
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	// A device (an endless line) is not even opened: only a regular file is.
	if _, err = Open("/dev/zero", Options{}); err == nil || err.Error() != "open /dev/zero: a character device, not a regular file" {
		t.Fatalf("/dev/zero: %v", err)
	}
}

func TestKeyIsMadeValid(t *testing.T) {
	long := strings.Repeat("k", MaxKeyBytes+1)
	for _, k := range []string{long, "a b", "a\tb", "a\x7f", "#x", "\xff\xfe", ""} {
		h := Key(k)
		if !strings.HasPrefix(h, "#") || len(h) != 65 || Key(k) != h {
			t.Errorf("Key(%q) = %q, want a stable '#' + 64 hex digits", k, h)
		}
	}
	if Key(long) == Key(long[1:]+"j") {
		t.Error("two long keys hash alike")
	}
	for _, k := range []string{strings.Repeat("k", MaxKeyBytes), "user:1/é", "a#b"} {
		if Key(k) != k {
			t.Errorf("Key(%q) changed a valid key", k)
		}
	}
}
