package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A Redis partition's password_file is relative to the topology's folder, and
// Password reads its first line; an unreadable or empty file is an error that
// names the file and never shows a password.
func TestPartitionPasswordFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "redis-a"), []byte("pa ss\r\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "empty"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	topo := `rbc_server: {grpc: 127.0.0.1:1}
backends:
  - {id: 0, name: a, type: kv, replicas: [{grpc: 127.0.0.1:2}]}
  - {id: 1, name: b, type: kv, replicas: [{grpc: 127.0.0.1:3}]}
  - {id: 2, name: c, type: kv, replicas: [{grpc: 127.0.0.1:4}]}
app_servers:
  - id: app0
    http: 127.0.0.1:5
    cache_budget_mb: 192
    partitions:
      a: {redis: 127.0.0.1:6379, password_file: secrets/redis-a, user: app}
      b: {redis: 127.0.0.1:6380, password_file: secrets/empty}
      c: 127.0.0.1:11211
`
	path := filepath.Join(dir, "topology.yaml")
	if err := os.WriteFile(path, []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	tp, err := LoadTopology(path)
	if err != nil {
		t.Fatal(err)
	}
	a := tp.AppServers[0].Partitions["a"]
	if a.PasswordFile != filepath.Join(dir, "secrets", "redis-a") || a.User != "app" {
		t.Fatalf("partition a: password_file %q, user %q", a.PasswordFile, a.User)
	}
	if pw, err := a.Password(); err != nil || pw != "pa ss" {
		t.Fatalf("a.Password() = %q, %v; want the first line without its line break", pw, err)
	}
	if _, err := tp.AppServers[0].Partitions["b"].Password(); err == nil || !strings.Contains(err.Error(), "secrets/empty: the first line is empty") {
		t.Fatalf("empty password file: %v", err)
	}
	if pw, err := tp.AppServers[0].Partitions["c"].Password(); err != nil || pw != "" {
		t.Fatalf("memcached partition: %q, %v", pw, err)
	}
	missing := Partition{Redis: "127.0.0.1:1", PasswordFile: filepath.Join(dir, "nope")}
	if _, err := missing.Password(); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing password file: %v", err)
	}
}
