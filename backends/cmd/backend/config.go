package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/backends/compute"
	"github.com/robinhoodcache/robinhood/backends/sqldb"
)

// Backend types.
const (
	typeKV      = "kv"
	typeSQL     = "sql"
	typeCompute = "compute"
)

// DefaultMaxBytes bounds the in-memory kv store.
const DefaultMaxBytes = 256 << 20

// config is the validated command line.
type config struct {
	Type, Name         string
	GRPCAddr, HTTPAddr string
	Limits             capacity.Limits
	Seed               uint64
	Redis              string
	MaxBytes           int64
	DB                 string
	Rows               int
	MatrixSize         int
	LogLevel           slog.Level
	ShutdownTimeout    time.Duration
}

// Same rule as topology backend names: they end up in metric labels and in
// the default database path.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Flags that only make sense for one type.
var typeFlags = map[string]string{
	"redis":       typeKV,
	"max-bytes":   typeKV,
	"db":          typeSQL,
	"rows":        typeSQL,
	"matrix-size": typeCompute,
}

// errFlagSyntax reports a command line the flag package rejected (and
// explained) itself.
var errFlagSyntax = errors.New("invalid command line")

// parseConfig parses and validates args. Errors name the flag and the value.
func parseConfig(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: backend --type kv|sql|compute --name NAME [flags]\n\n"+
			"A backend service: gRPC robinhood.v1.BackendService with a capacity model\n"+
			"(workers, rate, injected latency) and an admin API (docs/backends.md).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	def := capacity.DefaultLimits()
	fs.StringVar(&c.Type, "type", "", "backend type: kv, sql or compute (required)")
	fs.StringVar(&c.Name, "name", "", "backend name, as in the topology and traces (required; 1-64 of A-Z a-z 0-9 _ . -)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", "127.0.0.1:7100", "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:7200", "HTTP listen address (admin API, /healthz, /metrics)")
	fs.IntVar(&c.Limits.Workers, "workers", def.Workers, "initial workers: queries in service at once (≥ 1)")
	fs.Float64Var(&c.Limits.Rate, "rate", def.Rate, "initial rate limit in queries/s (token bucket; 0 = unlimited)")
	fs.Float64Var(&c.Limits.ExtraLatencyMs, "extra-latency-ms", def.ExtraLatencyMs, "initial extra service time per query, ms")
	fs.Float64Var(&c.Limits.HiccupProb, "hiccup-prob", def.HiccupProb, "initial probability that a query hiccups, [0, 1]")
	fs.Float64Var(&c.Limits.HiccupMs, "hiccup-ms", def.HiccupMs, "initial length of a hiccup, ms")
	fs.IntVar(&c.Limits.QueueLimit, "queue-limit", def.QueueLimit, "initial queue bound: batches arriving while this many queries wait are rejected (0 = unbounded)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the hiccup draws")
	fs.StringVar(&c.Redis, "redis", "", "kv: keep values in this Redis (host:port) instead of in memory")
	fs.Int64Var(&c.MaxBytes, "max-bytes", DefaultMaxBytes, "kv (in memory): bound on stored bytes; least recently used keys are evicted")
	fs.StringVar(&c.DB, "db", "", "sql: database file (default: $TMPDIR/robinhood-backend-<name>/backend.db); built on first start, reused while valid")
	fs.IntVar(&c.Rows, "rows", sqldb.DefaultRows, "sql: number of items in the database")
	fs.IntVar(&c.MatrixSize, "matrix-size", compute.DefaultMatrixSize, "compute: n of the n×n matrix multiply per query")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM/SIGINT, how long queued and in-service queries may finish")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, errFlagSyntax // the flag package has printed the error and the usage
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	switch c.Type {
	case typeKV, typeSQL, typeCompute:
	case "":
		return c, errors.New("--type is required: kv, sql or compute")
	default:
		return c, fmt.Errorf("--type: %q is not a backend type (want kv, sql or compute)", c.Type)
	}
	if !nameRE.MatchString(c.Name) {
		if c.Name == "" {
			return c, errors.New("--name is required")
		}
		return c, fmt.Errorf("--name: %q must be 1-64 characters of letters, digits, '_', '.', '-'", c.Name)
	}
	var typeErr error
	fs.Visit(func(f *flag.Flag) {
		if want, ok := typeFlags[f.Name]; ok && want != c.Type && typeErr == nil {
			typeErr = fmt.Errorf("--%s applies only to --type %s, not %s", f.Name, want, c.Type)
		}
	})
	if typeErr != nil {
		return c, typeErr
	}
	for _, a := range []struct{ flag, v string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if err := checkAddr(a.v); err != nil {
			return c, fmt.Errorf("--%s: %q: %v", a.flag, a.v, err)
		}
	}
	if c.GRPCAddr == c.HTTPAddr {
		return c, fmt.Errorf("--grpc-addr and --http-addr are both %q; they need different ports", c.GRPCAddr)
	}
	if err := c.Limits.Validate(); err != nil {
		var fe *capacity.FieldError
		if errors.As(err, &fe) {
			return c, fmt.Errorf("--%s: %s, got %s", strings.ReplaceAll(fe.Field, "_", "-"), fe.Reason, fe.Value)
		}
		return c, err
	}
	if c.Redis != "" {
		if err := checkAddr(c.Redis); err != nil {
			return c, fmt.Errorf("--redis: %q: %v", c.Redis, err)
		}
	}
	if c.MaxBytes < 0 {
		return c, fmt.Errorf("--max-bytes: must be ≥ 0, got %d", c.MaxBytes)
	}
	if c.Rows < 1 || c.Rows > sqldb.MaxRows {
		return c, fmt.Errorf("--rows: must be in [1, %d], got %d", sqldb.MaxRows, c.Rows)
	}
	if c.MatrixSize < 1 || c.MatrixSize > compute.MaxMatrixSize {
		return c, fmt.Errorf("--matrix-size: must be in [1, %d], got %d", compute.MaxMatrixSize, c.MatrixSize)
	}
	if err := c.LogLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return c, fmt.Errorf("--log-level: %q is not debug, info, warn or error", *logLevel)
	}
	if c.ShutdownTimeout <= 0 {
		return c, fmt.Errorf("--shutdown-timeout: must be positive, got %v", c.ShutdownTimeout)
	}
	if c.Type == typeSQL && c.DB == "" {
		c.DB = sqldb.DefaultPath(c.Name)
	}
	return c, nil
}

func checkAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return errors.New("want host:port")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is not a number in [0, 65535]", port)
	}
	return nil
}
