package keystream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// parseARC reads "starting_block number_of_blocks ignored request_number".
// The key is the starting block in decimal without leading zeros
// ("3050771"), the size the block count × BlockBytes.
func (r *Reader) parseARC(b []byte) (Record, bool, error) {
	f := bytes.Fields(b)
	if len(f) != 4 {
		return Record{}, false, fmt.Errorf("%d fields, want 4: starting_block number_of_blocks ignored request_number", len(f))
	}
	block, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return Record{}, false, fmt.Errorf("field 1 %q is not a block number", f[0])
	}
	count, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil || count == 0 {
		return Record{}, false, fmt.Errorf("field 2 %q is not a block count", f[1])
	}
	if _, err := strconv.ParseInt(string(f[2]), 10, 64); err != nil {
		return Record{}, false, fmt.Errorf("field 3 %q is not an integer", f[2])
	}
	if _, err := strconv.ParseUint(string(f[3]), 10, 64); err != nil {
		return Record{}, false, fmt.Errorf("field 4 %q is not a request number", f[3])
	}
	size := int64(math.MaxInt64)
	if count <= math.MaxInt64/BlockBytes {
		size = int64(count) * BlockBytes
	}
	return Record{Key: strconv.FormatUint(block, 10), Size: r.clamp(size), HasSize: true}, true, nil
}

// parseKeySize reads "key [size]"; '#' at the start of a field starts a
// comment that runs to the end of the line.
func (r *Reader) parseKeySize(b []byte) (Record, bool, error) {
	f := bytes.Fields(b)
	for i, s := range f {
		if s[0] == '#' {
			f = f[:i]
			break
		}
	}
	switch len(f) {
	case 0:
		return Record{}, false, nil
	case 1:
		return Record{Key: Key(string(f[0]))}, true, nil
	case 2:
		size, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil || size < 0 {
			return Record{}, false, fmt.Errorf("field 2 %q is not a size in bytes", f[1])
		}
		return Record{Key: Key(string(f[0])), Size: r.clamp(size), HasSize: true}, true, nil
	}
	return Record{}, false, fmt.Errorf("%d fields, want \"key [size]\" (a '#' starts a comment)", len(f))
}

// fetch is one item_get line of a `watch fetchers` log.
type fetch struct {
	key     string // decoded
	hit     bool
	size    int64
	hasSize bool
}

// parseFetchLine reads one line of a `watch fetchers` log. ok is false for
// a line that is no fetch: the "OK" the watch command answers, and events of
// other types (other watchers: "ts=… type=item_store …").
func parseFetchLine(b []byte) (fetch, bool, error) {
	line := string(bytes.TrimSpace(b))
	switch {
	case line == "OK":
		return fetch{}, false, nil
	case line == "ERROR" || strings.HasPrefix(line, "CLIENT_ERROR") || strings.HasPrefix(line, "SERVER_ERROR"):
		return fetch{}, false, fmt.Errorf("memcached refused the watch command (%q): capture 'watch fetchers' (tracegen capture) from a memcached that has it", line)
	case strings.HasPrefix(line, "skipped="):
		return fetch{}, false, fmt.Errorf("%q: memcached dropped that many events because the watcher read too slowly, so the stream has a gap there; capture again (tracegen capture into a file on local disk), or delete this line to accept the gap", line)
	case !strings.HasPrefix(line, "ts="):
		return fetch{}, false, fmt.Errorf("not a 'watch fetchers' line: want \"ts=… gid=… type=item_get key=… status=…\", got %.80q", line)
	}
	var typ, key, status, size string
	var hasKey, hasStatus, hasSize bool
	for _, field := range bytes.Fields(b) {
		name, val, found := bytes.Cut(field, []byte{'='})
		if !found {
			return fetch{}, false, fmt.Errorf("field %.80q is not NAME=VALUE", field)
		}
		switch string(name) {
		case "type":
			if typ == "" {
				typ = string(val)
			}
		case "key":
			key, hasKey = string(val), true
		case "status":
			status, hasStatus = string(val), true
		case "size":
			size, hasSize = string(val), true
		}
	}
	if typ == "" {
		return fetch{}, false, errors.New("no type= field: not a 'watch fetchers' event")
	}
	if typ != "item_get" {
		return fetch{}, false, nil
	}
	if !hasKey || key == "" {
		return fetch{}, false, errors.New("an item_get event without a key= field")
	}
	if !hasStatus {
		return fetch{}, false, errors.New("an item_get event without a status= field")
	}
	dk, err := uriDecode(key)
	if err != nil {
		return fetch{}, false, fmt.Errorf("key=%.80s: %v", key, err)
	}
	ft := fetch{key: dk}
	switch status {
	case "found":
		ft.hit = true
	case "not_found", "flushed", "expired":
	default:
		return fetch{}, false, fmt.Errorf("status=%.40s is not found, not_found, flushed or expired", status)
	}
	if hasSize {
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n < 0 {
			return fetch{}, false, fmt.Errorf("size=%.40s is not a size in bytes", size)
		}
		// A miss line says size=0: only a hit's size is the object's.
		ft.size, ft.hasSize = n, ft.hit
	}
	return ft, true, nil
}

// parseFetch reads a fetchers line. The key is the key= field decoded as
// memcached encodes it (uriDecode) and made valid (Key); the size is the
// size= field of a hit; a miss (not_found, flushed, expired) takes the size
// of the key's latest hit before it, else of its first hit after it (the
// first pass, firstHitSizes), else has none.
func (r *Reader) parseFetch(b []byte) (Record, bool, error) {
	ft, ok, err := parseFetchLine(b)
	if err != nil || !ok {
		return Record{}, ok, err
	}
	rec := Record{Key: Key(ft.key)}
	if ft.hasSize {
		rec.Size, rec.HasSize = r.clamp(ft.size), true
		r.sizes.put(rec.Key, rec.Size, true)
	} else if s, known := r.sizes.get(rec.Key); known {
		rec.Size, rec.HasSize = s, true
	}
	return rec, true, nil
}

// firstHitSizes is the first pass over a fetchers log: the size of every
// key's first hit (keys as Key makes them, sizes clamped), in the first
// limit records (all of them when limit < 0), which it validates.
func firstHitSizes(path string, o Options, limit int64) (*sizeTable, error) {
	o.Format = Fetchers
	r, err := open(path, o)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	sizes := newSizeTable(o.SizeSlots)
	for records := int64(0); limit < 0 || records < limit; {
		b, err := r.readLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		ft, ok, err := parseFetchLine(b)
		if err != nil {
			return nil, &Error{File: path, Line: r.line, Err: err}
		}
		if !ok {
			continue
		}
		records++
		if ft.hasSize {
			sizes.put(Key(ft.key), r.clamp(ft.size), false)
		}
	}
	return sizes, nil
}

// uriDecode undoes memcached's uriencode (the logger's key encoding): every
// byte but letters, digits and "-._~" is written %XX (two hex digits).
// A '%' not followed by two hex digits is an error.
func uriDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			out = append(out, c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", fmt.Errorf("'%%' at byte %d is not followed by two hex digits (memcached writes a byte as %%XX)", i+1)
		}
		out = append(out, unhex(s[i+1])<<4|unhex(s[i+2]))
		i += 2
	}
	return string(out), nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
