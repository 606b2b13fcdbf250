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

// blockFlag is a flag that sets a field of the backend's block, or of its
// type's options (kind), as the topology's field of the same name does.
type blockFlag struct {
	flag, field, kind, help string
	zero                    any // the flag's type and default: string, int, int64 or uint64
}

var blockFlags = []blockFlag{
	{"type", "type", "", "backend type: kv, sql or compute (backends[].type)", ""},
	{"name", "name", "", "backend name, as in the topology and traces (backends[].name)", ""},
	{"seed", "seed", "", "seed of the hiccup draws (seed)", uint64(1)},
	{"redis", "redis", "kv", "kv: keep values in this Redis (host:port) instead of in memory (kv.redis)", ""},
	{"max-bytes", "max_bytes", "kv", "kv, in memory: bound on stored bytes; least recently used keys are evicted (kv.max_bytes; default 256 MiB)", int64(0)},
	{"db", "db", "sql", "sql: database file, built on first start, reused while valid (sql.db; default $TMPDIR/robinhood-backend-NAME/backend.db)", ""},
	{"rows", "rows", "sql", "sql: number of items in the database (sql.rows; default 100000)", 0},
	{"matrix-size", "matrix_size", "compute", "compute: n of the n×n matrix multiply per query (compute.matrix_size; default 96)", 0},
}

// flagValues registers the block's flags and every limit's
// (config.LimitTable, named and described there); the functions give a
// flag's value as the block holds it.
func flagValues(fs *flag.FlagSet) (block map[string]func() any, limit []func() any) {
	block = map[string]func() any{}
	for _, f := range blockFlags {
		switch z := f.zero.(type) {
		case string:
			p := fs.String(f.flag, z, f.help)
			block[f.flag] = func() any { return *p }
		case int:
			p := fs.Int(f.flag, z, f.help)
			block[f.flag] = func() any { return int64(*p) }
		case int64:
			p := fs.Int64(f.flag, z, f.help)
			block[f.flag] = func() any { return *p }
		case uint64:
			p := fs.Uint64(f.flag, z, f.help)
			block[f.flag] = func() any { return int64(*p) }
		}
	}
	def := config.DefaultLimits()
	for _, f := range config.LimitTable {
		if f.Int {
			p := fs.Int(f.Flag(), int(f.Get(def)), "initial "+f.Help+" (limits."+f.Name+")")
			limit = append(limit, func() any { return int64(*p) })
		} else {
			p := fs.Float64(f.Flag(), f.Get(def), "initial "+f.Help+" (limits."+f.Name+")")
			limit = append(limit, func() any { return *p })
		}
	}
	return block, limit
}

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
	topoPath := fs.String("topology", "", "topology `file`: start as backend --id of it (type, limits, options, addresses of replica --replica); flags override")
	id := fs.String("id", "", "with --topology: the backend's name")
	replica := fs.Int("replica", 0, "with --topology: which replica of the backend this process is (its addresses and seed + replica)")
	grpcAddr := fs.String("grpc-addr", "", "gRPC listen address (default: the replica's grpc address in the topology, else 127.0.0.1:7100)")
	httpAddr := fs.String("http-addr", "", "HTTP listen address: admin API, /healthz, /metrics (default: the replica's http address, else 127.0.0.1:7200)")
	blockVals, limitVals := flagValues(fs)
	fs.Int64Var(&c.MaxBatchBytes, "max-batch-bytes", server.DefaultMaxBatchBytes, "bound on the bytes one batch may ask for in all; a larger one is refused before anything is allocated")
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
	block, where, rep, err := c.backendBlock(*topoPath, *id, *replica, set, blockVals)
	if err != nil {
		return c, err
	}
	ov := overrideBlock(block, where, set, blockVals, limitVals)
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

// backendBlock is the backend's block, where it is and its replica's
// block: from the topology (whose security settings c takes, where no
// flag set them), or made from the flags.
func (c *settings) backendBlock(topoPath, id string, replica int, set map[string]bool, vals map[string]func() any) (block map[string]any, where string, rep map[string]any, err error) {
	if topoPath != "" {
		if id == "" {
			return nil, "", nil, errors.New("--id is required with --topology: the backend's name")
		}
		var t *config.Topology
		if block, where, rep, t, err = topologyBlock(topoPath, id, replica); err != nil {
			return nil, "", nil, err
		}
		c.Security = c.Security.FromTopology(t, set)
		return block, where, rep, nil
	}
	if set["id"] || set["replica"] {
		return nil, "", nil, errors.New("--id and --replica need --topology")
	}
	if vals["type"]() == "" {
		return nil, "", nil, errors.New("--type is required (kv, sql or compute), or --topology FILE --id NAME")
	}
	if vals["name"]() == "" {
		return nil, "", nil, errors.New("--name is required, or --topology FILE --id NAME")
	}
	return map[string]any{"id": int64(0), "replicas": []any{map[string]any{"grpc": "127.0.0.1:0"}}}, "backend", nil, nil
}

// overrideBlock sets the fields of the block that flags set (the block's,
// its type options' and its limits'), keeping which flag set what.
func overrideBlock(block map[string]any, where string, set map[string]bool, vals map[string]func() any, limitVals []func() any) *config.Overrides {
	var ov config.Overrides
	limits, _ := block["limits"].(map[string]any)
	if limits == nil {
		limits = map[string]any{}
		block["limits"] = limits
	}
	for _, f := range blockFlags {
		if !set[f.flag] {
			continue
		}
		if f.kind == "" {
			ov.Set(block, where, f.field, f.flag, vals[f.flag]())
			continue
		}
		m, _ := block[f.kind].(map[string]any)
		if m == nil {
			m = map[string]any{}
			block[f.kind] = m
		}
		ov.Set(m, where+"."+f.kind, f.field, f.flag, vals[f.flag]())
	}
	for i, f := range config.LimitTable {
		if set[f.Flag()] {
			ov.Set(limits, where+".limits", f.Name, f.Flag(), limitVals[i]())
		}
	}
	for _, kind := range []string{"kv", "sql", "compute"} {
		if m, ok := block[kind].(map[string]any); ok && len(m) == 0 {
			delete(block, kind)
		}
	}
	return &ov
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
