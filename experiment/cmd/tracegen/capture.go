package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// watchCommand is what capture asks memcached for: one line per lookup,
// the log `tracegen import --stream BACKEND=FILE,format=fetchers` reads.
const watchCommand = "watch fetchers"

// maxWatchLine bounds one line from memcached, as the key stream reader
// bounds a line of the log (workload/keystream).
const maxWatchLine = 64 << 10

// captureOptions is a parsed `tracegen capture` command line.
type captureOptions struct {
	addr     string
	user     string
	password string
	tls      *tls.Config // nil: plain text
	timeout  time.Duration
}

// captureStats counts what a capture wrote.
type captureStats struct {
	lines   int64 // every line, the watch command's OK included
	lookups int64 // type=item_get lines
	gaps    int64 // skipped=N lines
	skipped int64 // the sum of their N: events memcached dropped
}

func cmdCapture(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("capture", "tracegen capture --memcached HOST:PORT --duration D [--out FILE] [--user USER --password-file FILE] [--tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]]", stderr)
	var o captureOptions
	var tlsOpts auth.ClientOptions
	fs.StringVar(&o.addr, "memcached", "", "the memcached to watch, HOST:PORT (required)")
	duration := fs.Duration("duration", 0, "how long to capture, e.g. 10m (required); SIGINT or SIGTERM ends the capture early and keeps what it has")
	out := fs.String("out", "-", "the log: - for stdout (each line as memcached prints it), or a file, written beside it and renamed at the end")
	fs.StringVar(&o.user, "user", "", "memcached's ASCII authentication (memcached -Y): the user, with --password-file")
	passwordFile := fs.String("password-file", "", "memcached's ASCII authentication: a file (mode 0600) whose first line is --user's password")
	fs.StringVar(&tlsOpts.CA, "tls-ca", "", "speak TLS (memcached -Z) and verify the server against this CA bundle (PEM file)")
	fs.StringVar(&tlsOpts.Cert, "tls-cert", "", "with --tls-ca: the client certificate to present (PEM file, with --tls-key), for a memcached that verifies its clients")
	fs.StringVar(&tlsOpts.Key, "tls-key", "", "the private key of --tls-cert (PEM file, mode 0600)")
	fs.StringVar(&tlsOpts.ServerName, "tls-server-name", "", "with --tls-ca: the name the server's certificate must hold (default: --memcached's host)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound on connecting, the TLS handshake, authenticating and the answer to the watch command")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	host, port, hostPortErr := net.SplitHostPort(o.addr)
	switch {
	case o.addr == "":
		return errors.New("give --memcached HOST:PORT, the memcached to watch")
	case hostPortErr != nil || host == "" || port == "":
		return fmt.Errorf("--memcached %q is not HOST:PORT", o.addr)
	case *duration <= 0:
		return fmt.Errorf("give --duration D, a positive length of time such as 10m (got %v)", *duration)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v must be positive", o.timeout)
	case (o.user == "") != (*passwordFile == ""):
		return errors.New("--user and --password-file go together (memcached's ASCII authentication, memcached -Y)")
	case tlsOpts.CA == "" && (tlsOpts.Cert != "" || tlsOpts.Key != "" || tlsOpts.ServerName != ""):
		return errors.New("--tls-cert, --tls-key and --tls-server-name need --tls-ca (the CA that signed memcached's certificate)")
	}
	if err := checkOut(*out); err != nil {
		return err
	}
	if err := o.credentials(*passwordFile, tlsOpts); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var st captureStats
	var ended string
	start := time.Now()
	capture := func(w io.Writer, flush func() error) error {
		conn, br, err := openWatch(ctx, o)
		if err != nil {
			return err
		}
		defer conn.Close()
		end := time.Now().Add(*duration)
		log.Info("capturing", "memcached", o.addr, "command", watchCommand, "until", end.Format(time.RFC3339), "out", *out)
		st.lines++
		if _, err := w.Write([]byte("OK\r\n")); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		ended, err = captureLines(ctx, conn, br, w, flush, end, &st)
		return err
	}
	_, err := writeOut(*out, stdout, nil, func(w io.Writer) (int64, error) {
		bw := bufio.NewWriterSize(w, 1<<16)
		flush := func() error { return nil } // a file is renamed into place whole
		if *out == "-" {
			flush = bw.Flush // a reader of stdout sees each line as it comes
		}
		err := capture(bw, flush)
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		return st.lines, err
	})
	if err != nil {
		return err
	}
	log.Info("capture written", "out", *out, "lines", st.lines, "lookups", st.lookups, "ended", ended,
		"seconds", time.Since(start).Round(time.Millisecond).Seconds())
	// The log is written; what makes it less than was asked fails the command.
	return shortCapture(o.addr, st, ended, *duration, *out)
}

// checkOut: --out is - or a regular file (or none yet) in a folder that
// exists.
func checkOut(out string) error {
	if out == "-" {
		return nil
	}
	if st, err := os.Stat(out); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("--out %s is not a regular file", out)
	}
	if st, err := os.Stat(filepath.Dir(out)); err != nil || !st.IsDir() {
		return fmt.Errorf("--out %s: the folder %s does not exist", out, filepath.Dir(out))
	}
	return nil
}

// credentials sets o's password (from --password-file, checked as a secret
// file) and TLS configuration (with --tls-ca).
func (o *captureOptions) credentials(passwordFile string, tlsOpts auth.ClientOptions) error {
	if passwordFile != "" {
		if err := auth.CheckSecretFile(passwordFile); err != nil {
			return fmt.Errorf("--password-file: %v", err)
		}
		pw, err := config.Partition{PasswordFile: passwordFile}.Password()
		if err != nil {
			if inner := errors.Unwrap(err); inner != nil {
				err = inner
			}
			return fmt.Errorf("--password-file: %v", err)
		}
		o.password = pw
	}
	if tlsOpts.CA != "" {
		c, err := auth.NewClient(tlsOpts)
		if err != nil {
			return err
		}
		o.tls = c.TLSConfig()
	}
	return nil
}

// shortCapture is the error of a capture that holds less than was asked:
// memcached closed the connection before the end, or dropped events.
func shortCapture(addr string, st captureStats, ended string, duration time.Duration, out string) error {
	var short []string
	if ended == "closed" {
		short = append(short, fmt.Sprintf("memcached %s closed the connection after %d lookups, before --duration %v ended: %s holds what came before",
			addr, st.lookups, duration, out))
	}
	if st.gaps > 0 {
		short = append(short, fmt.Sprintf("memcached dropped %d events (%d skipped= lines: the capture read too slowly), so %s has gaps that tracegen import refuses: capture again (to a local disk), or delete those lines to accept the gaps",
			st.skipped, st.gaps, out))
	}
	if len(short) > 0 {
		return errors.New(strings.Join(short, "; "))
	}
	return nil
}

// openWatch connects to memcached (TLS when o.tls is set), authenticates
// when it asks for it and credentials were given, and sends the watch
// command; the reader is left after its OK. Every step is bounded by
// o.timeout; an error is one line naming memcached and what to do.
func openWatch(ctx context.Context, o captureOptions) (net.Conn, *bufio.Reader, error) {
	d := &net.Dialer{Timeout: o.timeout}
	var conn net.Conn
	var err error
	if o.tls != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: o.tls}).DialContext(ctx, "tcp", o.addr)
		if err != nil {
			return nil, nil, fmt.Errorf("memcached %s: TLS: %v", o.addr, err)
		}
	} else if conn, err = d.DialContext(ctx, "tcp", o.addr); err != nil {
		return nil, nil, fmt.Errorf("memcached %s: %v", o.addr, err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	if err := conn.SetDeadline(time.Now().Add(o.timeout)); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(conn, maxWatchLine)
	ask := func(what, cmd string) (string, error) {
		if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
			return "", fmt.Errorf("memcached %s: sending %s: %v", o.addr, what, err)
		}
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return "", fmt.Errorf("memcached %s answered %s with a line longer than %d KiB: is it memcached?", o.addr, what, maxWatchLine>>10)
		case (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && o.tls == nil:
			return "", fmt.Errorf("memcached %s closed the connection instead of answering %s (does it speak TLS? then give --tls-ca)", o.addr, what)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return "", fmt.Errorf("memcached %s did not answer %s within --timeout %v", o.addr, what, o.timeout)
		case err != nil:
			return "", fmt.Errorf("memcached %s: reading the answer to %s: %v", o.addr, what, err)
		}
		return string(bytes.TrimSpace(line)), nil
	}
	watch := strconv.Quote(watchCommand)
	ans, err := ask(watch, watchCommand)
	if err != nil {
		return nil, nil, err
	}
	// memcached -Y refuses every command before a "set" whose data is
	// "USER PASSWORD". Credentials are sent only to a memcached that asked
	// for them: elsewhere that set would store the password as an item.
	if ans == "CLIENT_ERROR unauthenticated" && o.user != "" {
		data := o.user + " " + o.password
		res, err := ask("the credentials of --user "+o.user, fmt.Sprintf("set robinhood-capture-auth 0 0 %d\r\n%s", len(data), data))
		if err != nil {
			return nil, nil, err
		}
		if res != "STORED" {
			return nil, nil, fmt.Errorf("memcached %s refused --user %s and --password-file: %q (check them against its auth file, memcached -Y)", o.addr, o.user, res)
		}
		if ans, err = ask(watch, watchCommand); err != nil {
			return nil, nil, err
		}
	}
	if ans != "OK" {
		hint := ""
		switch {
		case ans == "CLIENT_ERROR unauthenticated":
			hint = ": it asks for ASCII authentication (memcached -Y), give --user and --password-file"
		case ans == "ERROR":
			hint = ": it does not know the watch command (memcached before 1.5, or a proxy in front of it)"
		case strings.HasPrefix(ans, "WATCHER_TOO_MANY"):
			hint = ": it has as many watchers as it allows, end one of them"
		}
		return nil, nil, fmt.Errorf("memcached %s refused %s with %.200q%s", o.addr, watch, ans, hint)
	}
	ok = true
	return conn, br, nil
}

// captureLines copies memcached's watch lines to w until end, ctx's end
// (a signal) or memcached closing the connection, and says which ("duration",
// "signal", "closed"). Only whole lines are written; flush is called each
// time no more input is buffered, so a reader of w sees each line as it comes.
func captureLines(ctx context.Context, conn net.Conn, br *bufio.Reader, w io.Writer, flush func() error, end time.Time, st *captureStats) (string, error) {
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return "", err
	}
	if err := conn.SetReadDeadline(end); err != nil {
		return "", err
	}
	stopWaking := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stopWaking()
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			return "", fmt.Errorf("memcached sent a line longer than %d KiB (%.80q…): not a watch log", maxWatchLine>>10, line)
		case errors.Is(err, os.ErrDeadlineExceeded):
			if ctx.Err() != nil {
				return "signal", nil
			}
			return "duration", nil
		case errors.Is(err, io.EOF):
			return "closed", nil
		default:
			return "", fmt.Errorf("reading from memcached: %v", err)
		}
		if _, err := w.Write(line); err != nil {
			return "", err
		}
		st.lines++
		switch {
		case bytes.Contains(line, []byte(" type=item_get ")):
			st.lookups++
		case bytes.HasPrefix(line, []byte("skipped=")):
			st.gaps++
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(line[len("skipped="):])), 10, 64)
			st.skipped += n
		}
		if br.Buffered() == 0 {
			if err := flush(); err != nil {
				return "", err
			}
		}
	}
}
