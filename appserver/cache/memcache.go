package cache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxConns = 64
	DefaultTimeout  = time.Second
)

// maxKeysPerGet bounds the keys of one "get" command line; longer multi-gets
// are split into several pipelined commands.
const maxKeysPerGet = 100

const bufSize = 16 << 10

// Errors returned by Client (and, ErrTooLarge and ErrClosed, by
// RedisClient). Network errors are returned as they are.
var (
	// ErrTooLarge is an instance's refusal to store a value for its size:
	// memcached's "SERVER_ERROR object too large for cache"; RedisClient
	// wraps Redis's OOM answer to a set in it.
	ErrTooLarge = errors.New("cache: value too large for the cache")
	// ErrNotStored is memcached's NOT_STORED answer to a set.
	ErrNotStored = errors.New("memcached: not stored")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("cache: client closed")
)

// ProtocolError is an answer the client cannot parse; Client closes the
// connection it came from.
type ProtocolError struct{ Line string }

func (e *ProtocolError) Error() string { return fmt.Sprintf("cache: unexpected answer %q", e.Line) }

// ServerError is an ERROR, CLIENT_ERROR or SERVER_ERROR answer.
type ServerError struct{ Line string }

func (e *ServerError) Error() string { return "memcached: " + e.Line }

// KeyError reports a key that memcached would reject; use Key to map keys.
type KeyError struct{ Key string }

func (e *KeyError) Error() string { return fmt.Sprintf("memcached: illegal key %q", e.Key) }

// Options configure a Client or a RedisClient.
type Options struct {
	// MaxConns bounds the open connections (busy and idle); callers wait
	// for a free one, up to their context's deadline. Idle connections are
	// kept open for reuse. Default DefaultMaxConns.
	MaxConns int
	// Timeout bounds one operation (dial included) when the context has no
	// earlier deadline. Default DefaultTimeout.
	Timeout time.Duration
	// Username and Password authenticate a RedisClient's connections (AUTH;
	// an empty Username is Redis's default user). memcached has no
	// authentication here: a Client ignores them.
	Username, Password string
}

// Client is a memcached text-protocol client for one memcached instance.
// It is safe for concurrent use.
type Client struct {
	addr    string
	timeout time.Duration
	// slots holds one token per open connection: a caller takes a token to
	// dial and gives it back when the connection is closed.
	slots  chan struct{}
	idle   chan *conn
	dialer net.Dialer
	closed atomic.Bool
	brk    breaker
}

type conn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// NewClient returns a client for the memcached at addr. It does not connect.
func NewClient(addr string, opt Options) *Client {
	if opt.MaxConns <= 0 {
		opt.MaxConns = DefaultMaxConns
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	return &Client{
		addr:    addr,
		timeout: opt.Timeout,
		slots:   make(chan struct{}, opt.MaxConns),
		idle:    make(chan *conn, opt.MaxConns),
		brk:     newBreaker(),
	}
}

// BreakerOpenings is how many times the circuit breaker opened.
func (c *Client) BreakerOpenings() uint64 { return c.brk.openings() }

// Bypassed reports whether the breaker is open (the instance is bypassed).
func (c *Client) Bypassed() bool { return c.brk.bypassed() }

// Addr returns the memcached address.
func (c *Client) Addr() string { return c.addr }

// Close closes the idle connections; connections in use are closed when
// their operation ends. Operations after Close fail with ErrClosed.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.drainIdle()
	return nil
}

func (c *Client) drainIdle() {
	for {
		select {
		case cn := <-c.idle:
			_ = cn.nc.Close()
			<-c.slots
		default:
			return
		}
	}
}

func (c *Client) acquire(ctx context.Context, deadline time.Time) (*conn, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	select {
	case cn := <-c.idle:
		return cn, nil
	default:
	}
	// Wait for an idle connection or a free slot, then dial; both within
	// the operation's deadline.
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	select {
	case cn := <-c.idle:
		return cn, nil
	case c.slots <- struct{}{}:
		nc, err := c.dialer.DialContext(dctx, "tcp", c.addr)
		if err != nil {
			<-c.slots
			return nil, err
		}
		return &conn{nc: nc, r: bufio.NewReaderSize(nc, bufSize), w: bufio.NewWriterSize(nc, bufSize)}, nil
	case <-dctx.Done():
		return nil, dctx.Err()
	}
}

// release returns cn to the pool when reusable, or closes it.
func (c *Client) release(cn *conn, reusable bool) {
	if reusable && !c.closed.Load() {
		select {
		case c.idle <- cn:
			if c.closed.Load() {
				c.drainIdle()
			}
			return
		default:
		}
	}
	_ = cn.nc.Close()
	<-c.slots
}

// deadline is the earlier of the context's deadline and now + Timeout.
func (c *Client) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(c.timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// start takes a connection for one operation with its deadline set.
func (c *Client) start(ctx context.Context) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dl := c.deadline(ctx)
	cn, err := c.acquire(ctx, dl)
	if err != nil {
		return nil, err
	}
	if err := cn.nc.SetDeadline(dl); err != nil {
		c.release(cn, false)
		return nil, err
	}
	return cn, nil
}

func checkKey(k string) error {
	if len(k) == 0 || len(k) > MaxKeyLen || !LegalKey(k) {
		return &KeyError{Key: k}
	}
	return nil
}

// GetMulti looks keys up and sets vals[i] to the value of keys[i], or nil on
// a miss. vals must be at least as long as keys. Keys may repeat. On error
// the values found so far are kept and the rest are nil.
func (c *Client) GetMulti(ctx context.Context, keys []string, vals [][]byte) error {
	return c.brk.guard(func() error { return c.getMulti(ctx, keys, vals) })
}

func (c *Client) getMulti(ctx context.Context, keys []string, vals [][]byte) error {
	vals = vals[:len(keys)]
	for i := range vals {
		vals[i] = nil
	}
	if len(keys) == 0 {
		return nil
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	cn, err := c.start(ctx)
	if err != nil {
		return err
	}
	err = cn.getMulti(keys, vals)
	c.release(cn, err == nil)
	return err
}

func (cn *conn) getMulti(keys []string, vals [][]byte) error {
	for start := 0; start < len(keys); start += maxKeysPerGet {
		end := min(start+maxKeysPerGet, len(keys))
		_, _ = cn.w.WriteString("get")
		for _, k := range keys[start:end] {
			_ = cn.w.WriteByte(' ')
			_, _ = cn.w.WriteString(k)
		}
		_, _ = cn.w.WriteString("\r\n")
	}
	if err := cn.w.Flush(); err != nil {
		return err
	}
	for start := 0; start < len(keys); start += maxKeysPerGet {
		end := min(start+maxKeysPerGet, len(keys))
		if err := cn.readValues(keys[start:end], vals[start:end]); err != nil {
			return err
		}
	}
	return nil
}

// readValues reads the answer to one get command. memcached answers the
// hits in the order the keys were asked, so keys are matched in one pass.
func (cn *conn) readValues(keys []string, vals [][]byte) error {
	next := 0
	for {
		line, err := cn.readLine()
		if err != nil {
			return err
		}
		if string(line) == "END" {
			return nil
		}
		key, n, err := parseValueLine(line)
		if err != nil {
			return err
		}
		j := next
		for j < len(keys) && keys[j] != string(key) {
			j++
		}
		if j == len(keys) {
			return &ProtocolError{Line: string(line)}
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(cn.r, data); err != nil {
			return err
		}
		if data[n] != '\r' || data[n+1] != '\n' {
			return &ProtocolError{Line: "value not terminated by CRLF"}
		}
		vals[j] = data[:n:n]
		next = j + 1
	}
}

// readLine returns the next line without its CRLF; the slice is valid until
// the next read.
func (cn *conn) readLine() ([]byte, error) {
	line, err := cn.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, &ProtocolError{Line: string(line[:64]) + "…"}
		}
		return nil, err
	}
	line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
	if bytes.HasPrefix(line, []byte("SERVER_ERROR")) || bytes.HasPrefix(line, []byte("CLIENT_ERROR")) || string(line) == "ERROR" {
		return nil, &ServerError{Line: string(line)}
	}
	return line, nil
}

// parseValueLine parses "VALUE <key> <flags> <bytes> [<cas>]".
func parseValueLine(line []byte) (key []byte, n int, err error) {
	rest, ok := bytes.CutPrefix(line, []byte("VALUE "))
	if !ok {
		return nil, 0, &ProtocolError{Line: string(line)}
	}
	key, rest, _ = bytes.Cut(rest, []byte{' '})
	_, rest, _ = bytes.Cut(rest, []byte{' '}) // flags
	size, _, _ := bytes.Cut(rest, []byte{' '})
	v, perr := strconv.Atoi(string(size))
	if perr != nil || v < 0 || len(key) == 0 {
		return nil, 0, &ProtocolError{Line: string(line)}
	}
	return key, v, nil
}

// Set stores value under key (flags 0, no expiry) and waits for memcached's
// answer.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	return c.brk.guard(func() error { return c.set(ctx, key, value) })
}

func (c *Client) set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	cn, err := c.start(ctx)
	if err != nil {
		return err
	}
	err = cn.set(key, value)
	// A SERVER_ERROR answer (too large, out of memory) leaves the
	// connection in a known state; anything else closes it.
	var se *ServerError
	reusable := err == nil || errors.Is(err, ErrNotStored) || errors.Is(err, ErrTooLarge) ||
		(errors.As(err, &se) && bytes.HasPrefix([]byte(se.Line), []byte("SERVER_ERROR")))
	c.release(cn, reusable)
	return err
}

func (cn *conn) set(key string, value []byte) error {
	var num [20]byte
	_, _ = cn.w.WriteString("set ")
	_, _ = cn.w.WriteString(key)
	_, _ = cn.w.WriteString(" 0 0 ")
	_, _ = cn.w.Write(strconv.AppendInt(num[:0], int64(len(value)), 10))
	_, _ = cn.w.WriteString("\r\n")
	_, _ = cn.w.Write(value)
	_, _ = cn.w.WriteString("\r\n")
	if err := cn.w.Flush(); err != nil {
		return err
	}
	line, err := cn.readLine()
	if err != nil {
		var se *ServerError
		if errors.As(err, &se) && se.Line == "SERVER_ERROR object too large for cache" {
			return ErrTooLarge
		}
		return err
	}
	switch string(line) {
	case "STORED":
		return nil
	case "NOT_STORED":
		return ErrNotStored
	default:
		return &ProtocolError{Line: string(line)}
	}
}

// Stats returns memcached's general statistics (`stats`): name → value.
func (c *Client) Stats(ctx context.Context) (map[string]string, error) {
	var out map[string]string
	err := c.brk.guard(func() error {
		var err error
		out, err = c.stats(ctx)
		return err
	})
	return out, err
}

func (c *Client) stats(ctx context.Context) (map[string]string, error) {
	cn, err := c.start(ctx)
	if err != nil {
		return nil, err
	}
	out, err := cn.stats()
	c.release(cn, err == nil)
	return out, err
}

func (cn *conn) stats() (map[string]string, error) {
	_, _ = cn.w.WriteString("stats\r\n")
	if err := cn.w.Flush(); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for {
		line, err := cn.readLine()
		if err != nil {
			return nil, err
		}
		if string(line) == "END" {
			return out, nil
		}
		f := bytes.Fields(line)
		if len(f) != 3 || string(f[0]) != "STAT" {
			return nil, &ProtocolError{Line: string(line)}
		}
		out[string(f[1])] = string(f[2])
	}
}

// Limit is memcached's memory limit in bytes (limit_maxbytes of `stats`).
func (c *Client) Limit(ctx context.Context) (int64, error) {
	st, err := c.Stats(ctx)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(st["limit_maxbytes"], 10, 64)
	if err != nil {
		return 0, &ProtocolError{Line: "STAT limit_maxbytes " + st["limit_maxbytes"]}
	}
	return v, nil
}
