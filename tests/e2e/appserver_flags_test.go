package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/dispatch"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// Bad command lines and topologies stop bin/appserver with exit status 2
// and one message naming the problem.
func TestAppserverRejectsBadConfiguration(t *testing.T) {
	bin := testutil.Binary(t, "./appserver/cmd/appserver")
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(`
backends: [{id: 0, name: a, type: kv, replicas: [{grpc: "127.0.0.1:1"}]}]
app_servers:
  - {id: app0, http: "127.0.0.1:0", cache_mode: none}
  - {id: app1, http: "127.0.0.1:0", cache_mode: none}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// An unknown dispatch policy is refused by every reader of the topology,
	// whichever app server it is for.
	badPolicy := filepath.Join(dir, "bad-policy.yaml")
	if err := os.WriteFile(badPolicy, []byte(`
backends: [{id: 0, name: a, type: kv, replicas: [{grpc: "127.0.0.1:1"}]}]
app_servers:
  - {id: app0, http: "127.0.0.1:0", cache_mode: none}
  - {id: app1, http: "127.0.0.1:0", cache_mode: none, dispatch: {policy: no-such-policy}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("backends: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown id", []string{"--topology", good, "--id", "app9"}, `--id "app9": no such application server in the topology (it has: app0, app1)`},
		{"no topology", []string{"--id", "app0"}, "--topology is required"},
		{"no id", []string{"--topology", good}, "--id is required"},
		{"missing file", []string{"--topology", filepath.Join(dir, "nope.yaml"), "--id", "app0"}, "nope.yaml: no such file"},
		{"invalid topology", []string{"--topology", bad, "--id", "app0"}, "backends: at least one backend is required"},
		{"bad log level", []string{"--topology", good, "--id", "app0", "--log-level", "loud"}, `--log-level "loud" is not one of debug, info, warn, error`},
		{"unknown dispatch policy", []string{"--topology", badPolicy, "--id", "app1"}, `app_servers[1].dispatch.policy: "no-such-policy" is not one of ` + strings.Join(dispatch.Names(), ", ")},
		{"another app server's unknown dispatch policy", []string{"--topology", badPolicy, "--id", "app0"}, `app_servers[1].dispatch.policy: "no-such-policy"`},
		{"bad pool size", []string{"--topology", good, "--id", "app0", "--memcached-conns", "0"}, "--memcached-conns 0 must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testutil.Start(t, bin, tc.args...)
			err, done := p.Wait(10 * time.Second)
			if !done {
				t.Fatal("still running after 10 s")
			}
			if code := p.Cmd.ProcessState.ExitCode(); code != 2 || err == nil {
				t.Fatalf("exit status %d, want 2; output:\n%s", code, p.Output())
			}
			if !strings.Contains(p.Output(), tc.msg) {
				t.Fatalf("output %q does not say %q", p.Output(), tc.msg)
			}
		})
	}
}
