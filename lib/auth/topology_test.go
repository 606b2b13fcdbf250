package auth

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// topocheck reads the files a topology names as the components do: good
// ones pass, a FIFO or /dev/zero fails naming the field and file (without
// blocking), and one that is not on this machine is only listed.
func TestCheckTopologyFiles(t *testing.T) {
	dir := t.TempDir()
	if err := WriteDev(dir, nil, []string{"app0", "operator"}); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	topo := func(tlsCA, token string) *config.Topology {
		t.Helper()
		path := filepath.Join(dir, "t.yaml")
		doc := "backends: [{id: 0, name: a, type: kv, replicas: [{grpc: 127.0.0.1:7100}]}]\n" +
			"app_servers: [{id: app0, http: 127.0.0.1:8080, cache_budget_mb: 64, partitions: {a: 127.0.0.1:11211}}]\n" +
			"auth: {tokens: tokens, token: " + token + "}\n" +
			"tls: {ca: " + tlsCA + ", cert: cert.pem, key: key.pem, client_auth: true}\n"
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		tp, err := config.LoadTopology(path)
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	if problems, absent := CheckTopologyFiles(topo("ca.pem", `"{id}.token"`)); len(problems) != 0 || len(absent) != 0 {
		t.Fatalf("devcerts' files: %v, absent %v", problems, absent)
	}
	for ca, want := range map[string]string{fifo: "tls.ca: open " + fifo + ": a named pipe (FIFO), not a regular file",
		"/dev/zero": "tls.ca: open /dev/zero: a character device, not a regular file",
		"key.pem":   "tls.ca: " + filepath.Join(dir, "key.pem") + " holds no PEM certificate"} {
		problems, _ := CheckTopologyFiles(topo(ca, `"{id}.token"`))
		if len(problems) != 1 || problems[0].Error() != want {
			t.Errorf("tls.ca %s: %v, want %q", ca, problems, want)
		}
	}
	problems, absent := CheckTopologyFiles(topo("ca.pem", `"elsewhere/{id}.token"`))
	if len(problems) != 0 || len(absent) != 2 || !strings.HasSuffix(absent[0], "elsewhere/operator.token") {
		t.Fatalf("absent token files: %v, absent %v", problems, absent)
	}
}

// The mode check is for secret files: a named pipe or a device (/dev/zero
// is 0666) is left to the reader, which refuses it for what it is, without
// blocking and without a warning about its mode.
func TestAFIFOIsRefusedForWhatItIs(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "tokens")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := CheckSecretFile(fifo); err != nil {
		t.Fatalf("CheckSecretFile: %v", err)
	}
	_, err := LoadTokens(fifo)
	if err == nil || err.Error() != "token file: open "+fifo+": a named pipe (FIFO), not a regular file" {
		t.Fatalf("LoadTokens: %v", err)
	}
}
