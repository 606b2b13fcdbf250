// Package config reads the configuration contract: the topology file every
// component starts from and the experiment file of the testbed and the
// simulator. Both are defined once, in schema/ (JSON Schema with CEL
// rules); this package validates a document against it, fills in its
// defaults, and decodes the result into typed values. The Python reader
// (robinhood_common) does the same from the same files, with the same
// errors (tests/config holds the cases both are tested on).
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/lib/safefile"
	"github.com/robinhoodcache/robinhood/schema"
)

// Cache modes of an application server.
const (
	CachePartitioned = "partitioned"
	CacheShared      = "shared"
	CacheNone        = "none"
)

// Backend types.
const (
	TypeKV      = "kv"
	TypeSQL     = "sql"
	TypeCompute = "compute"
)

// Topology is a whole deployment (docs/topology.md).
type Topology struct {
	RBCServer  RBCServer   `json:"rbc_server"`
	Backends   []Backend   `json:"backends"`
	AppServers []AppServer `json:"app_servers"`
	Auth       *Auth       `json:"auth,omitempty"`
	TLS        *TLS        `json:"tls,omitempty"`
	// SLO is the deployment's request P99 objective, when the file gives one.
	SLO *SLO `json:"slo,omitempty"`
}

// Auth is the topology's auth block: the servers' token file and the
// callers' own (docs/security.md). Paths are as written in the file;
// LoadTopology makes relative ones relative to the topology's folder.
type Auth struct {
	Tokens string `json:"tokens"`
	Token  string `json:"token"`
}

// TLS is the topology's tls block.
type TLS struct {
	CA         string `json:"ca"`
	Cert       string `json:"cert"`
	Key        string `json:"key"`
	ClientAuth bool   `json:"client_auth"`
}

// RBCServer is the RBC server: its addresses and the settings of its
// window.
type RBCServer struct {
	GRPC           string   `json:"grpc"`
	HTTP           string   `json:"http"`
	Window         Duration `json:"window"`
	StatsRetention Duration `json:"stats_retention"`
	RingSize       int      `json:"ring_size"`
	LowPct         float64  `json:"low_pct"`
	HighPct        float64  `json:"high_pct"`
}

// Backend is one backend service with its replicas.
type Backend struct {
	ID       uint32          `json:"id"`
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Replicas []Replica       `json:"replicas"`
	Limits   Limits          `json:"limits"`
	Seed     uint64          `json:"seed"`
	KV       *KVOptions      `json:"kv,omitempty"`
	SQL      *SQLOptions     `json:"sql,omitempty"`
	Compute  *ComputeOptions `json:"compute,omitempty"`
}

// Replica is one process serving a backend.
type Replica struct {
	// GRPC is the BackendService address.
	GRPC string `json:"grpc"`
	// HTTP serves /metrics, /healthz and the admin API.
	HTTP string `json:"http"`
}

// KVOptions are the options of a kv backend.
type KVOptions struct {
	Redis    string `json:"redis"`
	MaxBytes int64  `json:"max_bytes"`
}

// SQLOptions are the options of a sql backend.
type SQLOptions struct {
	DB   string `json:"db"`
	Rows int    `json:"rows"`
}

// ComputeOptions are the options of a compute backend.
type ComputeOptions struct {
	MatrixSize int `json:"matrix_size"`
}

// Partition is one backend's cache instance on an application server: a
// memcached (Addr) or a Redis (Redis); the schema admits exactly one.
type Partition struct {
	Addr  string `json:"addr,omitempty"`
	Redis string `json:"redis,omitempty"`
	// PasswordFile (Redis only) holds the password to authenticate with,
	// User the ACL user (empty: the default user).
	PasswordFile string `json:"password_file,omitempty"`
	User         string `json:"user,omitempty"`
	// InitialMB is the configured allocation; 0 means an even share of the
	// rest of the budget.
	InitialMB int `json:"initial_mb"`
}

// MaxPasswordFileBytes bounds a partition's password_file.
const MaxPasswordFileBytes = 64 << 10

// Password reads the partition's password: the first line of PasswordFile
// without its line break; "" when the partition has none. An unreadable or
// empty file is an error naming it (never the password).
func (p Partition) Password() (string, error) {
	if p.PasswordFile == "" {
		return "", nil
	}
	b, err := safefile.ReadFile(p.PasswordFile, MaxPasswordFileBytes)
	if err != nil {
		return "", fmt.Errorf("password_file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", fmt.Errorf("password_file %s: the first line is empty", p.PasswordFile)
	}
	return line, nil
}

// Dispatch is the dispatch policy of an app server and its parameters
// (validated by the policy: lib/dispatch).
type Dispatch struct {
	Policy string
	// Params are the block's other fields.
	Params map[string]any
}

// UnmarshalJSON splits the policy name from its parameters.
func (d *Dispatch) UnmarshalJSON(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	d.Policy, _ = m["policy"].(string)
	delete(m, "policy")
	d.Params = m
	return nil
}

// AllocationPolicy is the controller's allocation policy and its
// parameters (validated by the controller).
type AllocationPolicy struct {
	Name   string
	Params map[string]any
}

// UnmarshalJSON splits the policy name from its parameters.
func (p *AllocationPolicy) UnmarshalJSON(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	p.Name, _ = m["name"].(string)
	delete(m, "name")
	p.Params = m
	return nil
}

// Controller is an app server's controller block. The controller is
// Python; Go components only carry it.
type Controller struct {
	Policy           AllocationPolicy `json:"policy"`
	Interval         Duration         `json:"interval"`
	MinPartitionMB   int              `json:"min_partition_mb"`
	Metrics          string           `json:"metrics"`
	DryRun           bool             `json:"dry_run"`
	RBCTimeout       Duration         `json:"rbc_timeout"`
	ShrinkBudget     Duration         `json:"shrink_budget"`
	UsedSource       string           `json:"used_source"`
	MemcachedTimeout Duration         `json:"memcached_timeout"`
	Run              *Run             `json:"run,omitempty"`
}

// Run is the experiment run a controller is part of (set by the testbed).
type Run struct {
	Seconds   Duration `json:"seconds,omitempty"`
	StartFile string   `json:"start_file,omitempty"`
	Trace     string   `json:"trace,omitempty"`
	Scenario  string   `json:"scenario,omitempty"`
	Topology  string   `json:"topology,omitempty"`
	Oracle    string   `json:"oracle,omitempty"`
}

// AppServer is one application server and its cache.
type AppServer struct {
	ID             string               `json:"id"`
	HTTP           string               `json:"http"`
	CacheMode      string               `json:"cache_mode"`
	CacheBudgetMB  int                  `json:"cache_budget_mb"`
	Partitions     map[string]Partition `json:"partitions"`
	SharedCache    string               `json:"shared_cache"`
	RequestTimeout Duration             `json:"request_timeout"`
	BackendTimeout Duration             `json:"backend_timeout"`
	Dispatch       Dispatch             `json:"dispatch"`
	Controller     Controller           `json:"controller"`
}

// Cache stores of a partition.
const (
	StoreMemcached = "memcached"
	StoreRedis     = "redis"
)

// Store is what the partition is: StoreMemcached or StoreRedis.
func (p Partition) Store() string {
	if p.Redis != "" {
		return StoreRedis
	}
	return StoreMemcached
}

// Endpoint is the partition's address, whichever its store.
func (p Partition) Endpoint() string {
	if p.Redis != "" {
		return p.Redis
	}
	return p.Addr
}

// Duration is a time.Duration written as a Go duration string ("250ms").
type Duration time.Duration

// UnmarshalJSON parses a duration string (already validated by the schema).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (%s)", s, DurationHint)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// D is the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// decode turns a normalized document into a typed value; the field names
// must match the schema's exactly (unknown fields are an error, so a
// schema property missing from the Go type is caught by the tests).
// Decode decodes a document the contract normalized (Contract.Read) into
// the Go type that mirrors its schema; a field the type lacks is an error.
func Decode(norm any, out any) error { return decode(norm, out) }

func decode(norm any, out any) error {
	b, err := json.Marshal(norm)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("config: the schema and the Go types disagree: %w", err)
	}
	return nil
}

// LoadTopology reads and validates a topology file. The paths of its auth
// and tls blocks become relative to the file's folder.
func LoadTopology(path string) (*Topology, error) {
	doc, err := ReadTopologyDoc(path)
	if err != nil {
		return nil, err
	}
	t, err := TopologyFrom(doc)
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	return t, nil
}

// ParseTopology decodes and validates a topology document.
func ParseTopology(b []byte) (*Topology, error) {
	doc, err := ParseYAML(b, "topology")
	if err != nil {
		return nil, err
	}
	return TopologyFrom(doc)
}

// TopologyFrom validates a decoded document (for example one with flag
// overrides applied) and returns the typed topology.
func TopologyFrom(doc any) (*Topology, error) {
	norm, err := Default().Read(schema.Topology, doc, "")
	if err != nil {
		return nil, err
	}
	var t Topology
	if err := decode(norm, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ReadTopologyDoc reads a topology file into its normalized document (for
// components that apply flag overrides before validating again).
func ReadTopologyDoc(path string) (map[string]any, error) {
	b, err := ReadConfigFile(path)
	var cerr *Error
	if errors.As(err, &cerr) {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	doc, err := ParseYAML(b, "topology")
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	norm, err := Default().Read(schema.Topology, doc, "")
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	m := norm.(map[string]any)
	resolveFiles(m, filepath.Dir(path))
	return m, nil
}

// fileFields are the blocks and fields of a topology that name files.
var fileFields = map[string][]string{"auth": {"tokens", "token"}, "tls": {"ca", "cert", "key"}}

// resolveFiles makes the relative file paths of a normalized topology
// relative to dir, the topology file's folder: the auth and tls blocks' and
// every partition's password_file.
func resolveFiles(doc map[string]any, dir string) {
	rel := func(b map[string]any, f string) {
		if p, ok := b[f].(string); ok && p != "" && !filepath.IsAbs(p) {
			b[f] = filepath.Join(dir, p)
		}
	}
	for block, fields := range fileFields {
		if b, ok := doc[block].(map[string]any); ok {
			for _, f := range fields {
				rel(b, f)
			}
		}
	}
	apps, _ := doc["app_servers"].([]any)
	for _, a := range apps {
		app, _ := a.(map[string]any)
		parts, _ := app["partitions"].(map[string]any)
		for _, p := range parts {
			if part, ok := p.(map[string]any); ok {
				rel(part, "password_file")
			}
		}
	}
}

// PartitionNames returns the partition (backend) names in sorted order.
func (a *AppServer) PartitionNames() []string {
	out := make([]string, 0, len(a.Partitions))
	for n := range a.Partitions {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// BackendByName returns the backend with the given name.
func (t *Topology) BackendByName(name string) (*Backend, bool) {
	for i := range t.Backends {
		if t.Backends[i].Name == name {
			return &t.Backends[i], true
		}
	}
	return nil, false
}

// BackendByID returns the backend with the given id.
func (t *Topology) BackendByID(id uint32) (*Backend, bool) {
	for i := range t.Backends {
		if t.Backends[i].ID == id {
			return &t.Backends[i], true
		}
	}
	return nil, false
}

// AppServer returns the application server with the given id.
func (t *Topology) AppServer(id string) (*AppServer, bool) {
	for i := range t.AppServers {
		if t.AppServers[i].ID == id {
			return &t.AppServers[i], true
		}
	}
	return nil, false
}

// PartitionedAppServer is the app server with this id whose cache is
// partitioned, or the first partitioned one when id is ""; nil when there
// is none.
func (t *Topology) PartitionedAppServer(id string) *AppServer {
	for i := range t.AppServers {
		a := &t.AppServers[i]
		if a.CacheMode == CachePartitioned && (id == "" || a.ID == id) {
			return a
		}
	}
	return nil
}

// AppServerIDs lists the app server ids, for messages.
func (t *Topology) AppServerIDs() []string {
	out := make([]string, len(t.AppServers))
	for i, a := range t.AppServers {
		out[i] = a.ID
	}
	return out
}

// BackendNames lists the backend names, for messages.
func (t *Topology) BackendNames() []string {
	out := make([]string, len(t.Backends))
	for i, b := range t.Backends {
		out[i] = b.Name
	}
	return out
}

// RBCServerDef is the schema definition of the rbc_server block.
const RBCServerDef = schema.Topology + "#/$defs/rbc_server"

// ReadRBCSettings validates an rbc_server block (a subset of its fields;
// the rest take the schema's defaults), with path as the error prefix.
func ReadRBCSettings(doc map[string]any, path string) (RBCServer, error) {
	norm, err := Default().Read(RBCServerDef, doc, path)
	if err != nil {
		return RBCServer{}, err
	}
	var r RBCServer
	return r, decode(norm, &r)
}

// InitialAllocationMB is the configured allocation of a partitioned app
// server in MB: initial_mb where given, the partitions without it share the
// rest of the budget evenly, the extra MBs to the names that sort first (the
// same rule as robinhood_common.split.fill_rest; tests/vectors/split.json
// holds the cases both are tested on).
func (a *AppServer) InitialAllocationMB() map[string]int {
	out := map[string]int{}
	var free []string
	used := 0
	for _, n := range a.PartitionNames() {
		if mb := a.Partitions[n].InitialMB; mb > 0 {
			out[n] = mb
			used += mb
		} else {
			free = append(free, n)
		}
	}
	if len(free) > 0 {
		rest := max(a.CacheBudgetMB-used, 0)
		base, extra := rest/len(free), rest%len(free)
		for i, n := range free {
			out[n] = base
			if i < extra {
				out[n]++
			}
		}
	}
	return out
}
