package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/robinhoodcache/robinhood/lib/testutil"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// TestRequestsSurviveFaults drives an app server with steady load while its
// dependencies fail one after another, on real processes: a backend replica
// killed and restarted, the other replica hung (SIGSTOP), its memcached
// partition hung, the RBC server killed and restarted, then hung. With two
// replicas, the retry on another replica, the cache circuit breaker and the
// statistics pipeline off the request path, no request may fail, and
// reporting must resume after the RBC server returns.
func TestRequestsSurviveFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes, about 30 s")
	}
	rbcBin := testutil.Binary(t, "./rbcserver/cmd/rbcserver")
	backendBin := testutil.Binary(t, "./backends/cmd/backend")
	appBin := testutil.Binary(t, "./appserver/cmd/appserver")
	mcProc, mc := testutil.Memcached(t, 16)
	rbcGRPC, rbcHTTP := testutil.FreeAddr(t), testutil.FreeAddr(t)
	repGRPC := []string{testutil.FreeAddr(t), testutil.FreeAddr(t)}
	repHTTP := []string{testutil.FreeAddr(t), testutil.FreeAddr(t)}
	appHTTP := testutil.FreeAddr(t)
	topo := fmt.Sprintf(`rbc_server: {grpc: %q, http: %q, window: 10m}
backends:
  - {id: 0, name: ratings, type: kv, replicas: [{grpc: %q, http: %q}, {grpc: %q, http: %q}], limits: {workers: 16}}
app_servers:
  - {id: app0, http: %q, cache_mode: partitioned, cache_budget_mb: 16, partitions: {ratings: %q},
     request_timeout: 3s, backend_timeout: 250ms, controller: {min_partition_mb: 8}}
`, rbcGRPC, rbcHTTP, repGRPC[0], repHTTP[0], repGRPC[1], repHTTP[1], appHTTP, mc)
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	startRBC := func() *testutil.Process {
		p := testutil.Start(t, rbcBin, "--topology", path)
		testutil.WaitHTTP(t, "http://"+rbcHTTP+"/healthz")
		return p
	}
	startReplica := func(i int) *testutil.Process {
		p := testutil.Start(t, backendBin, "--topology", path, "--id", "ratings", "--replica", fmt.Sprint(i))
		testutil.WaitHTTP(t, "http://"+repHTTP[i]+"/healthz")
		return p
	}
	rbc := startRBC()
	replicas := []*testutil.Process{startReplica(0), startReplica(1)}
	testutil.Start(t, appBin, "--topology", path, "--id", "app0")
	testutil.WaitHTTP(t, "http://"+appHTTP+"/healthz")

	// Load: four loops, half of the keys new (misses reach a replica), half
	// from a small hot set (hits).
	var sent, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				keys := []string{fmt.Sprintf("hot%d", rng.IntN(50)), fmt.Sprintf("w%d-%d", w, n)}
				body := fmt.Sprintf(`{"t": 1, "d": [{%s}]}`, queryJSON("ratings", keys, []int{200, 300}, 1))
				t0 := time.Now()
				resp, err := client.Post("http://"+appHTTP+"/v1/request", "application/json", strings.NewReader(body))
				d := time.Since(t0)
				sent.Add(1)
				if d.Microseconds() > slowest.Load() {
					slowest.Store(d.Microseconds())
				}
				msg := ""
				if err != nil {
					msg = err.Error()
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						msg = fmt.Sprintf("%d %s", resp.StatusCode, b)
					}
				}
				if msg != "" {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, msg)
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	step := func(what string, d time.Duration) {
		before, fb := sent.Load(), failed.Load()
		time.Sleep(d)
		t.Logf("%-40s %5d requests, %d failed, slowest so far %v", what, sent.Load()-before, failed.Load()-fb,
			time.Duration(slowest.Load())*time.Microsecond)
		if sent.Load() == before {
			t.Fatalf("%s: no request completed in %v", what, d)
		}
	}
	step("baseline", time.Second)

	replicas[0].Kill()
	step("replica 0 killed", 3*time.Second)
	replicas[0] = startReplica(0)
	step("replica 0 restarted", 2*time.Second)

	replicas[1].Signal(syscall.SIGSTOP)
	step("replica 1 hung", 3*time.Second)
	replicas[1].Signal(syscall.SIGCONT)
	step("replica 1 resumed", time.Second)

	mcProc.Signal(syscall.SIGSTOP)
	step("memcached hung", 3*time.Second)
	mcProc.Signal(syscall.SIGCONT)
	step("memcached resumed", time.Second)

	rbc.Kill()
	step("RBC server killed", 2*time.Second)
	rbc = startRBC()
	restarted := time.Now()
	conn, err := grpc.NewClient(rbcGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		r, err := pb.NewRBCServiceClient(conn).GetRBC(ctx, &pb.GetRBCRequest{})
		if err == nil && r.GetWindowRequests() > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no records reached the restarted RBC server within 10 s (%v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("reporting resumed %v after the RBC server's restart", time.Since(restarted).Round(10*time.Millisecond))
	rbc.Signal(syscall.SIGSTOP)
	step("RBC server hung", 2*time.Second)
	rbc.Signal(syscall.SIGCONT)
	step("RBC server resumed", time.Second)

	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", f, sent.Load(), failures[:min(3, len(failures))])
	}
	t.Logf("%d requests, none failed", sent.Load())
}
