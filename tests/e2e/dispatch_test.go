package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/dispatch"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// Every registered dispatch policy (lib/dispatch's registry, whatever it
// holds) runs in a real bin/appserver against a real backend of two bin/backend
// replicas, and answers every request with the documented values; its
// copies are counted by the app server's dispatch metrics. One more app
// server runs d-hedge with a budget, and its duplicates stay within it.
func TestEveryDispatchPolicyThroughTheAppServer(t *testing.T) {
	backendBin := testutil.Binary(t, "./backends/cmd/backend")
	appBin := testutil.Binary(t, "./appserver/cmd/appserver")
	var reps []string
	var admins []string
	for range 2 {
		g, h := testutil.FreeAddr(t), testutil.FreeAddr(t)
		// A little latency, so that delayed duplicates (d-hedge, singler)
		// have something to hedge.
		testutil.Start(t, backendBin, "--type", "kv", "--name", "kv", "--grpc-addr", g, "--http-addr", h,
			"--workers", "16", "--extra-latency-ms", "2", "--hiccup-prob", "0.2", "--hiccup-ms", "20")
		reps = append(reps, fmt.Sprintf("{grpc: %q, http: %q}", g, h))
		admins = append(admins, "http://"+h)
	}
	type app struct{ id, policy, dispatch, url string }
	var apps []app
	for i, name := range dispatch.Names() {
		apps = append(apps, app{id: fmt.Sprintf("app%d", i), policy: name, dispatch: fmt.Sprintf("{policy: %s}", name)})
	}
	const budget = 0.2
	apps = append(apps, app{id: "budgeted", policy: "d-hedge",
		dispatch: fmt.Sprintf("{policy: d-hedge, delay: 1ms, budget: %g, budget_window: 1h}", budget)})
	var topo strings.Builder
	fmt.Fprintf(&topo, "backends:\n  - {id: 0, name: kv, type: kv, replicas: [%s]}\napp_servers:\n", strings.Join(reps, ", "))
	for i := range apps {
		addr := testutil.FreeAddr(t)
		apps[i].url = "http://" + addr
		fmt.Fprintf(&topo, "  - {id: %s, http: %q, cache_mode: none, request_timeout: 10s, backend_timeout: 5s, dispatch: %s}\n",
			apps[i].id, addr, apps[i].dispatch)
	}
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte(topo.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range admins {
		testutil.WaitHTTP(t, a+"/healthz")
	}
	for _, a := range apps {
		testutil.Start(t, appBin, "--topology", path, "--id", a.id)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for _, a := range apps {
		testutil.WaitHTTP(t, a.url+"/healthz")
		const n = 60
		for i := range n {
			keys := []string{fmt.Sprintf("%s-%d-a", a.id, i), fmt.Sprintf("%s-%d-b", a.id, i)}
			sizes := []int{100 + i, 2000}
			body := fmt.Sprintf(`{"t": 0, "d": [{%s}]}`, queryJSON("kv", keys, sizes, 0))
			resp, err := client.Post(a.url+"/v1/request?values=1", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var r appResponse
			if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode != 200 || r.Status != "ok" || r.BlockingBackend != "kv" {
				t.Fatalf("%s (%s): %d %s", a.id, a.policy, resp.StatusCode, b)
			}
			checkValues(t, r, "kv", keys, sizes)
		}
		// Labels as /metrics prints them: sorted.
		lbl := fmt.Sprintf(`backend="kv",policy=%q`, a.policy)
		pol := fmt.Sprintf(`,policy=%q}`, a.policy)
		first := testutil.Metric(t, a.url, `appserver_dispatch_copies_total{backend="kv",kind="first"`+pol)
		extra := testutil.Metric(t, a.url, `appserver_dispatch_copies_total{backend="kv",kind="extra"`+pol)
		wins := testutil.Metric(t, a.url, `appserver_dispatch_wins_total{backend="kv",copy="first"`+pol) +
			testutil.Metric(t, a.url, `appserver_dispatch_wins_total{backend="kv",copy="later"`+pol)
		if first != n || wins != n {
			t.Fatalf("%s (%s): %v first copies and %v answered batches for %d requests", a.id, a.policy, first, wins, n)
		}
		t.Logf("%s: %v duplicates, %v denied, extra ratio %v", a.policy, extra,
			testutil.Metric(t, a.url, `appserver_dispatch_denied_total{`+lbl+`}`), testutil.Metric(t, a.url, `appserver_dispatch_extra_ratio{`+lbl+`}`))
		if a.id == "budgeted" {
			// Each duplicate was allowed only if, counting it, the
			// duplicates in the window (1 h: the whole test) were at most
			// budget × the batches in it.
			denied := testutil.Metric(t, a.url, `appserver_dispatch_denied_total{`+lbl+`}`)
			ratio := testutil.Metric(t, a.url, `appserver_dispatch_extra_ratio{`+lbl+`}`)
			if extra > budget*n || ratio > budget || denied == 0 || extra == 0 {
				t.Fatalf("d-hedge with budget %g: %v duplicates, %v denied for %d batches, ratio %v", budget, extra, denied, n, ratio)
			}
		}
	}
}
