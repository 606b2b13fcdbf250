package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/backends/server"
	"github.com/robinhoodcache/robinhood/backends/sqldb"
	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
)

// config is the validated command line.
type settings struct {
	Type, Name         string
	GRPCAddr, HTTPAddr string
	Limits             capacity.Limits
	Seed               uint64
	Redis              string
	MaxBytes           int64
	MaxBatchBytes      int64
	DB                 string
	Rows               int
	MatrixSize         int
	LogLevel           slog.Level
	ShutdownTimeout    time.Duration
	Security           auth.ServerOptions
}

// errFlagSyntax reports a command line the flag package rejected (and
// explained) itself.
var errFlagSyntax = errors.New("invalid command line")

// backendDef is the schema definition of a topology backend.
const backendDef = "topology.schema.yaml#/$defs/backend"

// parseConfig parses and validates args. Every setting of a topology
// backend (its type, limits, seed and type options) comes from the
// topology with --topology/--id, or from the flags of the same name; a
// flag overrides the file. Both are validated by the schema's rules, and
// errors name the field (and the flag, when one set it).
func parseConfig(args []string, out io.Writer) (settings, error) {
	var c settings
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: backend --topology FILE --id NAME [--replica I] [flags]\n"+
			"       backend --type kv|sql|compute --name NAME [flags]\n\n"+
			"A backend service: gRPC robinhood.v1.BackendService with a capacity model\n"+
			"(workers, rate, injected latency) and an admin API (docs/backends.md).\n"+
			"Defaults are the topology schema's (docs/topology.md).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	def := config.DefaultLimits()
	topoPath := fs.String("topology", "", "topology `file`: start as backend --id of it (type, limits, options, addresses of replica --replica); flags override")
	id := fs.String("id", "", "with --topology: the backend's name")
	replica := fs.Int("replica", 0, "with --topology: which replica of the backend this process is (its addresses and seed + replica)")
	typ := fs.String("type", "", "backend type: kv, sql or compute (backends[].type)")
	name := fs.String("name", "", "backend name, as in the topology and traces (backends[].name)")
	grpcAddr := fs.String("grpc-addr", "", "gRPC listen address (default: the replica's grpc address in the topology, else 127.0.0.1:7100)")
	httpAddr := fs.String("http-addr", "", "HTTP listen address: admin API, /healthz, /metrics (default: the replica's http address, else 127.0.0.1:7200)")
	// One flag per limit field (config.LimitTable), named and described there.
	limitFloats, limitInts := make([]float64, len(config.LimitTable)), make([]int, len(config.LimitTable))
	for i, f := range config.LimitTable {
		if f.Int {
			fs.IntVar(&limitInts[i], f.Flag(), int(f.Get(def)), "initial "+f.Help+" (limits."+f.Name+")")
		} else {
			fs.Float64Var(&limitFloats[i], f.Flag(), f.Get(def), "initial "+f.Help+" (limits."+f.Name+")")
		}
	}
	seed := fs.Uint64("seed", 1, "seed of the hiccup draws (seed)")
	redis := fs.String("redis", "", "kv: keep values in this Redis (host:port) instead of in memory (kv.redis)")
	maxBytes := fs.Int64("max-bytes", 0, "kv, in memory: bound on stored bytes; least recently used keys are evicted (kv.max_bytes; default 256 MiB)")
	db := fs.String("db", "", "sql: database file, built on first start, reused while valid (sql.db; default $TMPDIR/robinhood-backend-NAME/backend.db)")
	rows := fs.Int("rows", 0, "sql: number of items in the database (sql.rows; default 100000)")
	fs.Int64Var(&c.MaxBatchBytes, "max-batch-bytes", server.DefaultMaxBatchBytes, "bound on the bytes one batch may ask for in all; a larger one is refused before anything is allocated")
	matrix := fs.Int("matrix-size", 0, "compute: n of the n×n matrix multiply per query (compute.matrix_size; default 96)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM/SIGINT, how long queued and in-service queries may finish")
	c.Security.Register(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, errFlagSyntax // the flag package has printed the error and the usage
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	if c.MaxBatchBytes <= 0 || c.MaxBatchBytes > server.MaxResponseBytes {
		return c, fmt.Errorf("--max-batch-bytes: %d is not in (0, %d]", c.MaxBatchBytes, int64(server.MaxResponseBytes))
	}
	set := config.SetFlags(fs)

	// The backend's block: from the topology, or made from the flags.
	var block map[string]any
	where := "backend"
	var rep map[string]any
	if *topoPath != "" {
		if *id == "" {
			return c, errors.New("--id is required with --topology: the backend's name")
		}
		var t *config.Topology
		var err error
		if block, where, rep, t, err = topologyBlock(*topoPath, *id, *replica); err != nil {
			return c, err
		}
		c.Security = c.Security.FromTopology(t, set)
	} else {
		if set["id"] || set["replica"] {
			return c, errors.New("--id and --replica need --topology")
		}
		if *typ == "" {
			return c, errors.New("--type is required (kv, sql or compute), or --topology FILE --id NAME")
		}
		if *name == "" {
			return c, errors.New("--name is required, or --topology FILE --id NAME")
		}
		block = map[string]any{"id": int64(0), "replicas": []any{map[string]any{"grpc": "127.0.0.1:0"}}}
	}
	var ov config.Overrides
	limits, _ := block["limits"].(map[string]any)
	if limits == nil {
		limits = map[string]any{}
		block["limits"] = limits
	}
	opts := func(kind string) map[string]any {
		m, _ := block[kind].(map[string]any)
		if m == nil {
			m = map[string]any{}
			block[kind] = m
		}
		return m
	}
	for _, f := range []struct {
		flag, field string
		v           any
		into        func() map[string]any
		prefix      string
	}{
		{"type", "type", *typ, nil, ""},
		{"name", "name", *name, nil, ""},
		{"seed", "seed", int64(*seed), nil, ""},
		{"redis", "redis", *redis, func() map[string]any { return opts("kv") }, ".kv"},
		{"max-bytes", "max_bytes", *maxBytes, func() map[string]any { return opts("kv") }, ".kv"},
		{"db", "db", *db, func() map[string]any { return opts("sql") }, ".sql"},
		{"rows", "rows", int64(*rows), func() map[string]any { return opts("sql") }, ".sql"},
		{"matrix-size", "matrix_size", int64(*matrix), func() map[string]any { return opts("compute") }, ".compute"},
	} {
		if !set[f.flag] {
			continue
		}
		if f.into == nil {
			ov.Set(block, where, f.field, f.flag, f.v)
		} else {
			ov.Set(f.into(), where+f.prefix, f.field, f.flag, f.v)
		}
	}
	for i, f := range config.LimitTable {
		if !set[f.Flag()] {
			continue
		}
		var v any = limitFloats[i]
		if f.Int {
			v = int64(limitInts[i])
		}
		ov.Set(limits, where+".limits", f.Name, f.Flag(), v)
	}
	for _, kind := range []string{"kv", "sql", "compute"} {
		if m, ok := block[kind].(map[string]any); ok && len(m) == 0 {
			delete(block, kind)
		}
	}
	norm, err := config.Default().Read(backendDef, block, where)
	if err != nil {
		return c, ov.Annotate(err)
	}
	b := norm.(map[string]any)
	backendType, ok := b["type"].(string)
	if !ok {
		return c, fmt.Errorf("%s.type: bin/backend needs the backend's data path: kv, sql or compute (or --type)", where)
	}
	c.Type, c.Name = backendType, b["name"].(string)
	if c.Limits, err = config.ReadLimits(b["limits"].(map[string]any), where+".limits"); err != nil {
		return c, err
	}
	c.Seed = uint64(b["seed"].(int64)) + uint64(*replica)
	c.typeOptions(b, where)

	if err := c.listenAddrs(rep, set, *grpcAddr, *httpAddr); err != nil {
		return c, err
	}
	if err := c.LogLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return c, fmt.Errorf("--log-level: %q is not debug, info, warn or error", *logLevel)
	}
	if c.ShutdownTimeout <= 0 {
		return c, fmt.Errorf("--shutdown-timeout: must be positive, got %v", c.ShutdownTimeout)
	}
	if err := c.Security.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// topologyBlock finds backend id in a topology file: its block (a document),
// where it is ("backends[i]"), the replica's block, and the typed topology.
func topologyBlock(path, id string, replica int) (block map[string]any, where string, rep map[string]any, t *config.Topology, err error) {
	doc, err := config.ReadTopologyDoc(path)
	if err != nil {
		return nil, "", nil, nil, err
	}
	var names []string
	for i, b := range doc["backends"].([]any) {
		bm := b.(map[string]any)
		names = append(names, bm["name"].(string))
		if bm["name"] == id {
			block, where = bm, "backends["+strconv.Itoa(i)+"]"
		}
	}
	if block == nil {
		return nil, "", nil, nil, fmt.Errorf("--id: %s is not a backend of %s (it has: %v)", config.Quote(id), path, names)
	}
	reps, _ := block["replicas"].([]any)
	if len(reps) == 0 {
		return nil, "", nil, nil, fmt.Errorf("%s: backend %s has no replicas: bin/backend serves one of them (an external backend is not started here)", where, id)
	}
	if replica < 0 || replica >= len(reps) {
		return nil, "", nil, nil, fmt.Errorf("--replica: %d is not a replica of backend %s (it has %d)", replica, id, len(reps))
	}
	if t, err = config.TopologyFrom(doc); err != nil {
		return nil, "", nil, nil, fmt.Errorf("topology %s: %w", path, err)
	}
	return block, where, reps[replica].(map[string]any), t, nil
}

// typeOptions reads the options of c.Type from the normalized backend block
// b (the schema's defaults where the block has none).
func (c *settings) typeOptions(b map[string]any, where string) {
	optsOf := func(kind string) map[string]any {
		m, _ := b[kind].(map[string]any)
		if m == nil {
			n, err := config.Default().Read("topology.schema.yaml#/$defs/"+kind+"_options", map[string]any{}, where+"."+kind)
			if err != nil {
				panic(err)
			}
			m = n.(map[string]any)
		}
		return m
	}
	switch c.Type {
	case config.TypeKV:
		o := optsOf("kv")
		c.Redis, _ = o["redis"].(string)
		c.MaxBytes = o["max_bytes"].(int64)
	case config.TypeSQL:
		o := optsOf("sql")
		c.DB, _ = o["db"].(string)
		c.Rows = int(o["rows"].(int64))
		if c.DB == "" {
			c.DB = sqldb.DefaultPath(c.Name)
		}
	case config.TypeCompute:
		c.MatrixSize = int(optsOf("compute")["matrix_size"].(int64))
	}
}

// listenAddrs sets the listen addresses: the flag, else the replica's
// addresses, else the defaults of a single local backend.
func (c *settings) listenAddrs(rep map[string]any, set map[string]bool, grpcAddr, httpAddr string) error {
	c.GRPCAddr, c.HTTPAddr = "127.0.0.1:7100", "127.0.0.1:7200"
	if rep != nil {
		c.GRPCAddr, _ = rep["grpc"].(string)
		if h, _ := rep["http"].(string); h != "" {
			c.HTTPAddr = h
		}
	}
	if set["grpc-addr"] {
		c.GRPCAddr = grpcAddr
	}
	if set["http-addr"] {
		c.HTTPAddr = httpAddr
	}
	for _, a := range []struct{ flag, v string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if !config.IsAddress(a.v) {
			return fmt.Errorf("--%s: %s is not a host:port address (port 0-65535)", a.flag, config.Quote(a.v))
		}
	}
	if c.GRPCAddr == c.HTTPAddr {
		return fmt.Errorf("--grpc-addr and --http-addr are both %q; they need different ports", c.GRPCAddr)
	}
	return nil
}
