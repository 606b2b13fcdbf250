// Package topology reads the one YAML file that describes a RobinHood
// deployment: the RBC server, the backends and their replicas, and the
// application servers with their cache partitions. Every component reads the
// part it needs from the same file (docs/topology.md).
//
// The `controller:` block of an application server belongs to the Python
// controller, which validates it; this package keeps it opaque.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxBackends bounds backend ids: ids are 0 … MaxBackends-1 (SPEC §3).
const MaxBackends = 1024

// MinPartitionMB is the smallest limit memcached accepts for cache_memlimit.
const MinPartitionMB = 8

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

// Topology is a whole deployment.
type Topology struct {
	RBCServer  RBCServer   `yaml:"rbc_server"`
	Backends   []Backend   `yaml:"backends"`
	AppServers []AppServer `yaml:"app_servers"`
}

// RBCServer holds the RBC server's addresses.
type RBCServer struct {
	GRPC string `yaml:"grpc"`
	HTTP string `yaml:"http"`
}

// Backend is one backend service with its replicas.
type Backend struct {
	ID       uint32    `yaml:"id"`
	Name     string    `yaml:"name"`
	Type     string    `yaml:"type"`
	Replicas []Replica `yaml:"replicas"`
}

// Replica is one process serving a backend.
type Replica struct {
	// GRPC is the BackendService address.
	GRPC string `yaml:"grpc"`
	// HTTP serves /metrics and the admin API (/admin/limits).
	HTTP string `yaml:"http"`
}

// Partition is one backend's memcached instance on an application server.
// In YAML it is either an address string or a mapping {addr, initial_mb}.
type Partition struct {
	Addr string `yaml:"addr"`
	// InitialMB is the configured allocation (what the static policy keeps).
	// Zero means an even share of the budget.
	InitialMB int `yaml:"initial_mb"`
}

// UnmarshalYAML accepts both the short (address) and the long form.
func (p *Partition) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&p.Addr)
	}
	type plain Partition
	var v plain
	if err := decodeStrict(n, &v); err != nil {
		return err
	}
	*p = Partition(v)
	return nil
}

// Duration is a time.Duration written as a Go duration string ("250ms").
type Duration time.Duration

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (use e.g. 500ms, 2s)", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// AppServer is one application server and its local cache.
type AppServer struct {
	ID            string               `yaml:"id"`
	HTTP          string               `yaml:"http"`
	CacheMode     string               `yaml:"cache_mode"`
	CacheBudgetMB int                  `yaml:"cache_budget_mb"`
	Partitions    map[string]Partition `yaml:"partitions"`
	SharedCache   string               `yaml:"shared_cache"`
	// RequestTimeout bounds a whole request (default 2s).
	RequestTimeout Duration `yaml:"request_timeout"`
	// BackendTimeout bounds one backend call (default 1s).
	BackendTimeout Duration `yaml:"backend_timeout"`
	// Controller is the controller's settings block; validated by the
	// controller, opaque here.
	Controller map[string]any `yaml:"controller"`
	// Extra application-server settings owned by later features.
	Dispatch map[string]any `yaml:"dispatch"`
}

// Defaults for optional fields.
const (
	DefaultRequestTimeout = 2 * time.Second
	DefaultBackendTimeout = time.Second
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Load reads and validates a topology file.
func LoadTopology(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	t, err := ParseTopology(b)
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	return t, nil
}

// Parse decodes and validates a topology document. Unknown fields are errors.
func ParseTopology(b []byte) (*Topology, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var t Topology
	if err := dec.Decode(&t); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty document")
		}
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

// Validate checks the invariants every component relies on and fills in
// defaults.
func (t *Topology) Validate() error {
	if len(t.Backends) == 0 {
		return errors.New("backends: at least one backend is required")
	}
	ids := map[uint32]string{}
	names := map[string]bool{}
	for i := range t.Backends {
		b := &t.Backends[i]
		where := fmt.Sprintf("backends[%d]", i)
		if !nameRE.MatchString(b.Name) {
			return fmt.Errorf("%s.name: %q must be 1-64 characters of letters, digits, '_', '.', '-'", where, b.Name)
		}
		if b.ID >= MaxBackends {
			return fmt.Errorf("%s.id: %d is out of range (0..%d)", where, b.ID, MaxBackends-1)
		}
		if other, dup := ids[b.ID]; dup {
			return fmt.Errorf("%s.id: %d is already used by backend %q", where, b.ID, other)
		}
		if names[b.Name] {
			return fmt.Errorf("%s.name: %q is used twice", where, b.Name)
		}
		ids[b.ID] = b.Name
		names[b.Name] = true
		switch b.Type {
		case TypeKV, TypeSQL, TypeCompute:
		default:
			return fmt.Errorf("%s.type: %q is not one of kv, sql, compute", where, b.Type)
		}
		if len(b.Replicas) == 0 {
			return fmt.Errorf("%s.replicas: backend %q needs at least one replica", where, b.Name)
		}
		for j, r := range b.Replicas {
			if r.GRPC == "" {
				return fmt.Errorf("%s.replicas[%d].grpc: address is required", where, j)
			}
		}
	}
	seen := map[string]bool{}
	for i := range t.AppServers {
		a := &t.AppServers[i]
		where := fmt.Sprintf("app_servers[%d]", i)
		if !nameRE.MatchString(a.ID) {
			return fmt.Errorf("%s.id: %q must be 1-64 characters of letters, digits, '_', '.', '-'", where, a.ID)
		}
		if seen[a.ID] {
			return fmt.Errorf("%s.id: %q is used twice", where, a.ID)
		}
		seen[a.ID] = true
		if a.HTTP == "" {
			return fmt.Errorf("%s.http: address is required", where)
		}
		if a.RequestTimeout == 0 {
			a.RequestTimeout = Duration(DefaultRequestTimeout)
		}
		if a.BackendTimeout == 0 {
			a.BackendTimeout = Duration(DefaultBackendTimeout)
		}
		if a.RequestTimeout < 0 || a.BackendTimeout < 0 {
			return fmt.Errorf("%s: timeouts must be positive", where)
		}
		switch a.CacheMode {
		case CachePartitioned:
			for _, b := range t.Backends {
				if _, ok := a.Partitions[b.Name]; !ok {
					return fmt.Errorf("%s.partitions: no partition for backend %q (partitioned mode needs one per backend)", where, b.Name)
				}
			}
			sum := 0
			for _, name := range a.PartitionNames() {
				p := a.Partitions[name]
				if !names[name] {
					return fmt.Errorf("%s.partitions.%s: no backend is named %q", where, name, name)
				}
				if p.Addr == "" {
					return fmt.Errorf("%s.partitions.%s: address is required", where, name)
				}
				if p.InitialMB != 0 && p.InitialMB < MinPartitionMB {
					return fmt.Errorf("%s.partitions.%s.initial_mb: %d is below memcached's minimum of %d MB", where, name, p.InitialMB, MinPartitionMB)
				}
				sum += p.InitialMB
			}
			if a.CacheBudgetMB < MinPartitionMB*len(a.Partitions) {
				return fmt.Errorf("%s.cache_budget_mb: %d is too small for %d partitions of at least %d MB", where, a.CacheBudgetMB, len(a.Partitions), MinPartitionMB)
			}
			if sum > a.CacheBudgetMB {
				return fmt.Errorf("%s.partitions: initial_mb values sum to %d, more than cache_budget_mb %d", where, sum, a.CacheBudgetMB)
			}
		case CacheShared:
			if a.SharedCache == "" {
				return fmt.Errorf("%s.shared_cache: address is required in shared mode", where)
			}
			if a.CacheBudgetMB < MinPartitionMB {
				return fmt.Errorf("%s.cache_budget_mb: %d is below memcached's minimum of %d MB", where, a.CacheBudgetMB, MinPartitionMB)
			}
		case CacheNone:
		default:
			return fmt.Errorf("%s.cache_mode: %q is not one of partitioned, shared, none", where, a.CacheMode)
		}
	}
	return nil
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
