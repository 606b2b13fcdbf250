// Package e2e runs the request path end to end with real processes:
// memcached partitions, bin/backend replicas, bin/rbcserver and
// bin/appserver, all on loopback.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Backends of the stack: catalog is slow by its limits (extra latency),
// ratings is fast.
const (
	slowBackend = "catalog"
	slowID      = 0
	fastBackend = "ratings"
	fastID      = 1
)

type stack struct {
	t       *testing.T
	app     map[string]string // app id → base URL; app0 partitioned, app1 shared
	rbcGRPC string
	rbcHTTP string
	rbc     *testutil.Process
	// partition[backend] is app0's memcached for backend; shared is app1's.
	partition map[string]string
	shared    string
	admin     map[string]string // backend → base URL of its HTTP side
	client    *http.Client
}

func startStack(t *testing.T) *stack {
	t.Helper()
	backendBin := testutil.Binary(t, "./backends/cmd/backend")
	appBin := testutil.Binary(t, "./appserver/cmd/appserver")

	s := &stack{t: t, app: map[string]string{}, partition: map[string]string{}, admin: map[string]string{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}}
	t.Cleanup(s.client.CloseIdleConnections)
	for _, b := range []string{slowBackend, fastBackend} {
		_, s.partition[b] = testutil.Memcached(t, 16)
	}
	_, s.shared = testutil.Memcached(t, 16)

	s.rbcGRPC, s.rbcHTTP = testutil.FreeAddr(t), testutil.FreeAddr(t)
	s.startRBC()

	grpcAddr := map[string]string{}
	for _, b := range []string{slowBackend, fastBackend} {
		grpcAddr[b] = testutil.FreeAddr(t)
		httpAddr := testutil.FreeAddr(t)
		s.admin[b] = "http://" + httpAddr
		args := []string{"--name", b, "--grpc-addr", grpcAddr[b], "--http-addr", httpAddr, "--workers", "8"}
		if b == slowBackend {
			args = append(args, "--type", "sql", "--rows", "2000", "--db", filepath.Join(t.TempDir(), "catalog.db"), "--extra-latency-ms", "100")
		} else {
			args = append(args, "--type", "kv")
		}
		testutil.Start(t, backendBin, args...)
	}
	appHTTP := map[string]string{"app0": testutil.FreeAddr(t), "app1": testutil.FreeAddr(t)}
	topo := fmt.Sprintf(`rbc_server: {grpc: %q, http: %q}
backends:
  - {id: %d, name: %s, type: sql, replicas: [{grpc: %q, http: %q}]}
  - {id: %d, name: %s, type: kv, replicas: [{grpc: %q, http: %q}]}
app_servers:
  - id: app0
    http: %q
    cache_mode: partitioned
    cache_budget_mb: 32
    request_timeout: 5s
    backend_timeout: 3s
    partitions: {%s: %q, %s: %q}
    controller: {min_partition_mb: 16}
  - id: app1
    http: %q
    cache_mode: shared
    cache_budget_mb: 16
    shared_cache: %q
`, s.rbcGRPC, s.rbcHTTP,
		slowID, slowBackend, grpcAddr[slowBackend], strings.TrimPrefix(s.admin[slowBackend], "http://"),
		fastID, fastBackend, grpcAddr[fastBackend], strings.TrimPrefix(s.admin[fastBackend], "http://"),
		appHTTP["app0"], slowBackend, s.partition[slowBackend], fastBackend, s.partition[fastBackend],
		appHTTP["app1"], s.shared)
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	for id, addr := range appHTTP {
		testutil.Start(t, appBin, "--topology", path, "--id", id)
		s.app[id] = "http://" + addr
	}
	for _, b := range []string{slowBackend, fastBackend} {
		testutil.WaitHTTP(t, s.admin[b]+"/healthz")
	}
	for _, u := range s.app {
		testutil.WaitHTTP(t, u+"/healthz")
	}
	return s
}

func (s *stack) startRBC() {
	s.rbc = testutil.Start(s.t, testutil.Binary(s.t, "./rbcserver/cmd/rbcserver"),
		"--grpc-addr", s.rbcGRPC, "--http-addr", s.rbcHTTP, "--window", "10m")
	testutil.WaitHTTP(s.t, "http://"+s.rbcHTTP+"/healthz")
}

type appResponse struct {
	LatencyUs       int64                     `json:"latency_us"`
	BlockingBackend string                    `json:"blocking_backend"`
	Status          string                    `json:"status"`
	Backends        map[string]backendSummary `json:"backends"`
	Error           string                    `json:"error"`
}

type backendSummary struct {
	Queries int       `json:"queries"`
	Hits    int       `json:"hits"`
	Misses  int       `json:"misses"`
	Errors  int       `json:"errors"`
	Values  []*string `json:"values"`
}

// post sends one trace line to an app server (with ?values=1).
func (s *stack) post(app, body string) (int, appResponse) {
	s.t.Helper()
	resp, err := s.client.Post(s.app[app]+"/v1/request?values=1", "application/json", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	var r appResponse
	if err := json.Unmarshal(b, &r); err != nil {
		s.t.Fatalf("%s answered %d with non-JSON %q", app, resp.StatusCode, b)
	}
	return resp.StatusCode, r
}

// metric reads one series from a /metrics page (0 when absent).
func (s *stack) metric(baseURL, series string) float64 {
	s.t.Helper()
	return testutil.Metric(s.t, baseURL, series)
}

// rbc reads the RBC server's snapshot over the last 10 minutes.
func (s *stack) rbcSnapshot() *pb.GetRBCResponse {
	s.t.Helper()
	resp, err := s.client.Get("http://" + s.rbcHTTP + "/v1/rbc?window_seconds=600")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("/v1/rbc: %d %s", resp.StatusCode, b)
	}
	var r pb.GetRBCResponse
	if err := protojson.Unmarshal(b, &r); err != nil {
		s.t.Fatalf("/v1/rbc: %v\n%s", err, b)
	}
	return &r
}

func blockingOf(r *pb.GetRBCResponse, id uint32) *pb.BackendRBC {
	for _, b := range r.Backends {
		if b.Backend == id {
			return b
		}
	}
	return &pb.BackendRBC{Backend: id}
}

// mcGet reads one key straight from a memcached (text protocol).
func mcGet(t *testing.T, addr, key string) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "get %s\r\n", key)
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if line == "END\r\n" {
		return nil
	}
	f := strings.Fields(line)
	if len(f) < 4 || f[0] != "VALUE" || f[1] != key {
		t.Fatalf("memcached answered %q", line)
	}
	n, _ := strconv.Atoi(f[3])
	data := make([]byte, n+2)
	if _, err := io.ReadFull(r, data); err != nil {
		t.Fatal(err)
	}
	return data[:n]
}

// waitCached waits for the app server's background fill of key.
func waitCached(t *testing.T, addr, key string) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v := mcGet(t, addr, key); v != nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not in memcached %s after 10 s", key, addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func checkValues(t *testing.T, r appResponse, backend string, keys []string, sizes []int) {
	t.Helper()
	vals := r.Backends[backend].Values
	if len(vals) != len(keys) {
		t.Fatalf("%s: %d values for %d keys", backend, len(vals), len(keys))
	}
	for i, v := range vals {
		if v == nil {
			t.Fatalf("%s %s: no value", backend, keys[i])
		}
		b, err := base64.StdEncoding.DecodeString(*v)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != sizes[i] || !bytes.Equal(b, value.Bytes(backend, keys[i], sizes[i])) {
			t.Fatalf("%s %s: the app server served %d bytes that are not the documented value", backend, keys[i], len(b))
		}
	}
}

func queryJSON(backend string, keys []string, sizes []int, cacheable int) string {
	ks, _ := json.Marshal(keys)
	ss, _ := json.Marshal(sizes)
	cs := make([]int, len(keys))
	for i := range cs {
		cs[i] = cacheable
	}
	c, _ := json.Marshal(cs)
	return fmt.Sprintf(`%q: {"S": %s, "U": %s, "C": %s}`, backend, ss, ks, c)
}

func TestRequestPath(t *testing.T) {
	s := startStack(t)

	t.Run("bad input is rejected before anything is fetched or cached", func(t *testing.T) {
		served := map[string]float64{}
		for b, u := range s.admin {
			served[b] = s.metric(u, fmt.Sprintf(`backend_queries_served_total{backend=%q}`, b))
		}
		stats := map[string]map[string]string{}
		for b, addr := range s.partition {
			stats[b] = testutil.MemcachedStats(t, addr, "")
		}
		for _, tc := range []struct{ name, body, msg string }{
			{"unknown backend", `{"t": 1, "d": [{"ratings": {"S": [10], "U": ["k"], "C": [1]}, "reviews": {"S": [10], "U": ["k"], "C": [1]}}]}`,
				`d[0].reviews: unknown backend "reviews" (the topology has: catalog, ratings)`},
			{"mismatched S/U/C", `{"t": 1, "d": [{"ratings": {"S": [10, 20], "U": ["k", "j"], "C": [1]}}]}`,
				"d[0].ratings: S, U and C must have the same length (got 2, 2, 1)"},
			{"negative size", `{"t": 1, "d": [{"ratings": {"S": [-5], "U": ["k"], "C": [1]}}]}`,
				"d[0].ratings.S[0]: size -5 is negative"},
			{"size above 64 MiB", `{"t": 1, "d": [{"catalog": {"S": [10, 67108865], "U": ["k", "j"], "C": [1, 1]}}]}`,
				"d[0].catalog.S[1]: size 67108865 exceeds the 67108864-byte limit"},
			{"malformed JSON", `{"t": 1, "d": [{"ratings": {"S": [10], "U": ["k"], "C": [1]}`, "malformed JSON"},
		} {
			code, r := s.post("app0", tc.body)
			if code != http.StatusBadRequest || !strings.Contains(r.Error, tc.msg) {
				t.Errorf("%s: got %d %q, want 400 with %q", tc.name, code, r.Error, tc.msg)
			}
		}
		for b, u := range s.admin {
			if got := s.metric(u, fmt.Sprintf(`backend_queries_served_total{backend=%q}`, b)); got != served[b] {
				t.Errorf("backend %s served %v queries for bad requests", b, got-served[b])
			}
		}
		for b, addr := range s.partition {
			after := testutil.MemcachedStats(t, addr, "")
			for _, st := range []string{"cmd_get", "cmd_set"} {
				if after[st] != stats[b][st] {
					t.Errorf("partition %s: %s went from %s to %s", b, st, stats[b][st], after[st])
				}
			}
		}
	})

	t.Run("values served and cached are the documented bytes and the second request hits", func(t *testing.T) {
		catKeys, catSizes := []string{"item-1", "item 2"}, []int{512, 100_000}
		ratKeys, ratSizes := []string{"r1", "r2", "r3"}, []int{64, 2048, 7}
		body := fmt.Sprintf(`{"t": 1, "d": [{%s, %s}]}`, queryJSON(slowBackend, catKeys, catSizes, 1), queryJSON(fastBackend, ratKeys, ratSizes, 1))
		code, r := s.post("app0", body)
		if code != http.StatusOK || r.Status != "ok" || r.Backends[slowBackend].Misses != 2 || r.Backends[fastBackend].Misses != 3 {
			t.Fatalf("first request: %d %+v", code, r)
		}
		checkValues(t, r, slowBackend, catKeys, catSizes)
		checkValues(t, r, fastBackend, ratKeys, ratSizes)

		// memcached keys per docs/appserver.md: "<backend>:<key>", or
		// "<backend>:#<sha256 hex of key>" for keys memcached cannot take.
		hashed := sha256.Sum256([]byte("item 2"))
		want := map[string][]byte{
			"catalog:item-1": value.Bytes(slowBackend, "item-1", 512),
			"catalog:#" + hex.EncodeToString(hashed[:]): value.Bytes(slowBackend, "item 2", 100_000),
		}
		for i, k := range ratKeys {
			want["ratings:"+k] = value.Bytes(fastBackend, k, ratSizes[i])
		}
		for key, v := range want {
			backend, _, _ := strings.Cut(key, ":")
			if got := waitCached(t, s.partition[backend], key); !bytes.Equal(got, v) {
				t.Fatalf("memcached %s holds %d bytes under %s that are not the documented value", backend, len(got), key)
			}
		}
		if v := mcGet(t, s.partition[fastBackend], "catalog:item-1"); v != nil {
			t.Fatal("a catalog value landed in the ratings partition")
		}

		code, r = s.post("app0", body)
		if code != http.StatusOK || r.Backends[slowBackend].Hits != 2 || r.Backends[fastBackend].Hits != 3 {
			t.Fatalf("second request: %d %+v, want all hits", code, r)
		}
		checkValues(t, r, slowBackend, catKeys, catSizes)
		checkValues(t, r, fastBackend, ratKeys, ratSizes)
		if got := s.metric(s.app["app0"], `appserver_cache_hits_total{backend="ratings"}`); got < 3 {
			t.Fatalf("appserver_cache_hits_total{ratings} = %v", got)
		}
	})

	t.Run("shared mode", func(t *testing.T) {
		body := fmt.Sprintf(`{"t": 1, "d": [{%s, %s}]}`, queryJSON(slowBackend, []string{"s1"}, []int{300}, 1), queryJSON(fastBackend, []string{"s1"}, []int{400}, 1))
		code, r := s.post("app1", body)
		if code != http.StatusOK || r.Backends[slowBackend].Misses != 1 || r.Backends[fastBackend].Misses != 1 {
			t.Fatalf("first request: %d %+v", code, r)
		}
		// Both backends' "s1" share the one memcached under their prefixes.
		if got := waitCached(t, s.shared, "catalog:s1"); !bytes.Equal(got, value.Bytes(slowBackend, "s1", 300)) {
			t.Fatal("shared memcached: wrong catalog:s1")
		}
		if got := waitCached(t, s.shared, "ratings:s1"); !bytes.Equal(got, value.Bytes(fastBackend, "s1", 400)) {
			t.Fatal("shared memcached: wrong ratings:s1")
		}
		code, r = s.post("app1", body)
		if code != http.StatusOK || r.Backends[slowBackend].Hits != 1 || r.Backends[fastBackend].Hits != 1 {
			t.Fatalf("second request: %d %+v, want hits", code, r)
		}
		checkValues(t, r, fastBackend, []string{"s1"}, []int{400})
	})

	t.Run("the slow backend blocks and the RBC server counts say so", func(t *testing.T) {
		const n = 30
		for i := range n {
			// Uncacheable, so every query goes to its backend.
			body := fmt.Sprintf(`{"t": %d, "d": [{%s, %s}]}`, i,
				queryJSON(slowBackend, []string{fmt.Sprintf("b%d", i)}, []int{256}, 0),
				queryJSON(fastBackend, []string{fmt.Sprintf("b%d", i), fmt.Sprintf("c%d", i)}, []int{256, 256}, 0))
			code, r := s.post("app0", body)
			if code != http.StatusOK || r.BlockingBackend != slowBackend {
				t.Fatalf("request %d: %d, blocking %q, want catalog (100 ms extra latency)", i, code, r.BlockingBackend)
			}
			if r.LatencyUs < 100_000 {
				t.Fatalf("request %d: latency %d µs is below catalog's 100 ms", i, r.LatencyUs)
			}
		}
		// Every request recorded so far reaches the RBC server within a
		// batch interval or two; its per-backend counts then equal the app
		// servers' own blocking counters.
		recorded := func(b string) float64 {
			return s.metric(s.app["app0"], fmt.Sprintf(`appserver_blocking_total{backend=%q}`, b)) +
				s.metric(s.app["app1"], fmt.Sprintf(`appserver_blocking_total{backend=%q}`, b))
		}
		var snap *pb.GetRBCResponse
		deadline := time.Now().Add(15 * time.Second)
		for {
			snap = s.rbcSnapshot()
			if float64(snap.WindowRequests) == recorded(slowBackend)+recorded(fastBackend) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("RBC server has %d requests, the app servers recorded %v", snap.WindowRequests, recorded(slowBackend)+recorded(fastBackend))
			}
			time.Sleep(100 * time.Millisecond)
		}
		slow, fast := blockingOf(snap, slowID), blockingOf(snap, fastID)
		if float64(slow.WindowBlocking) != recorded(slowBackend) || float64(fast.WindowBlocking) != recorded(fastBackend) {
			t.Fatalf("RBC window_blocking catalog %d ratings %d; app servers recorded %v and %v",
				slow.WindowBlocking, fast.WindowBlocking, recorded(slowBackend), recorded(fastBackend))
		}
		if slow.WindowBlocking < n || slow.WindowBlocking <= fast.WindowBlocking {
			t.Fatalf("RBC window_blocking: catalog %d, ratings %d; want catalog ≥ %d and ahead", slow.WindowBlocking, fast.WindowBlocking, n)
		}
		if slow.BlockingCount == 0 || slow.BlockingCount < fast.BlockingCount {
			t.Fatalf("RBC band blocking_count: catalog %d, ratings %d; want catalog ahead", slow.BlockingCount, fast.BlockingCount)
		}
		if got := s.metric(s.app["app0"], "appserver_rbc_records_sent_total"); got == 0 {
			t.Fatal("appserver_rbc_records_sent_total is 0")
		}
	})

	t.Run("the statistics service sums what the app servers measured", func(t *testing.T) {
		conn, err := grpc.NewClient(s.rbcGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := pb.NewRBCServiceClient(conn)
		hits := func(b string) float64 {
			return s.metric(s.app["app0"], fmt.Sprintf(`appserver_cache_hits_total{backend=%q}`, b)) +
				s.metric(s.app["app1"], fmt.Sprintf(`appserver_cache_hits_total{backend=%q}`, b))
		}
		var resp *pb.GetStatsResponse
		deadline := time.Now().Add(15 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err = client.GetStats(ctx, &pb.GetStatsRequest{WindowSeconds: 600})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			var got float64
			for _, b := range resp.GetBackends() {
				got += float64(b.GetCacheHits())
			}
			if got == hits(slowBackend)+hits(fastBackend) && got > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GetStats hits %v, app servers counted %v", got, hits(slowBackend)+hits(fastBackend))
			}
			time.Sleep(100 * time.Millisecond)
		}
		byID := map[uint32]*pb.BackendSummary{}
		for _, b := range resp.GetBackends() {
			byID[b.GetBackend()] = b
		}
		slow, fast := byID[slowID], byID[fastID]
		if slow == nil || fast == nil || slow.GetQueries() == 0 {
			t.Fatalf("backends %v", resp.GetBackends())
		}
		// catalog answers in 100 ms and more; its P99 query latency says so, ratings' is far below.
		if slow.GetP99QueryLatencyUs() < 98_000 || fast.GetP99QueryLatencyUs() >= slow.GetP99QueryLatencyUs() {
			t.Fatalf("P99 query latency: catalog %d µs, ratings %d µs", slow.GetP99QueryLatencyUs(), fast.GetP99QueryLatencyUs())
		}
		if resp.GetRbc().GetWindowRequests() == 0 || len(resp.GetAppServers()) != 2 {
			t.Fatalf("rbc %v, app servers %d", resp.GetRbc(), len(resp.GetAppServers()))
		}
		if lim := slow.GetPartitionLimitBytes(); lim != 16<<20 {
			t.Fatalf("catalog partition limit %d (app0's partition is 16 MB; app1 is shared)", lim)
		}
		// app0's shadow model of its catalog partition counts every cacheable
		// query's stack distance (an online miss-ratio curve); app1's
		// shared cache has none. The model runs beside the request path, so
		// its counts may trail the hits by a query or two, never lead them.
		var counted uint64
		for _, c := range slow.GetDistanceCount() {
			counted += c
		}
		if counted == 0 || counted > slow.GetCacheHits()+slow.GetCacheMisses() {
			t.Fatalf("catalog's distance histogram counts %d queries, its partitions had %d cacheable ones",
				counted, slow.GetCacheHits()+slow.GetCacheMisses())
		}
	})

	t.Run("a backend whose rate is lowered shows higher latency under the same load", func(t *testing.T) {
		load := func(round string) time.Duration {
			const workers, perWorker = 4, 12
			var mu sync.Mutex
			var lat []time.Duration
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWorker {
						body := fmt.Sprintf(`{"t": 1, "d": [{%s}]}`, queryJSON(fastBackend, []string{fmt.Sprintf("%s-%d-%d", round, w, i)}, []int{128}, 0))
						code, r := s.post("app0", body)
						if code != http.StatusOK {
							t.Errorf("%s: %d %+v", round, code, r)
							return
						}
						mu.Lock()
						lat = append(lat, time.Duration(r.LatencyUs)*time.Microsecond)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			slices.Sort(lat)
			return lat[len(lat)/2]
		}
		before := load("before")
		setLimits(t, s.admin[fastBackend], `{"rate": 25}`)
		defer setLimits(t, s.admin[fastBackend], `{"rate": 0}`)
		after := load("after")
		// Four closed-loop clients against 25 queries/s queue for about
		// 4/25 s = 160 ms each; unlimited, a query takes about 1 ms.
		if after < 5*before || after < 20*time.Millisecond {
			t.Fatalf("median latency %v at rate 25/s vs %v unlimited; want a clear rise", after, before)
		}
		t.Logf("median request latency: %v unlimited, %v at rate 25/s", before, after)
	})

	t.Run("with the RBC server stopped requests succeed and drops are counted", func(t *testing.T) {
		s.rbc.Stop()
		dropped := s.metric(s.app["app0"], "appserver_rbc_records_dropped_total")
		for i := range 10 {
			body := fmt.Sprintf(`{"t": 1, "d": [{%s}]}`, queryJSON(fastBackend, []string{"r1"}, []int{64}, 1))
			if code, r := s.post("app0", body); code != http.StatusOK || r.Status != "ok" {
				t.Fatalf("request %d with the RBC server down: %d %+v", i, code, r)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for s.metric(s.app["app0"], "appserver_rbc_records_dropped_total") < dropped+10 {
			if time.Now().After(deadline) {
				t.Fatalf("dropped went from %v to %v, want +10", dropped, s.metric(s.app["app0"], "appserver_rbc_records_dropped_total"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got := s.metric(s.app["app0"], "appserver_rbc_connected"); got != 0 {
			t.Fatalf("appserver_rbc_connected = %v with the RBC server down", got)
		}

		// The RBC server comes back on the same address: reporting resumes.
		s.startRBC()
		deadline = time.Now().Add(20 * time.Second)
		for {
			body := fmt.Sprintf(`{"t": 1, "d": [{%s}]}`, queryJSON(fastBackend, []string{"r1"}, []int{64}, 1))
			if code, _ := s.post("app0", body); code != http.StatusOK {
				t.Fatalf("request after the restart: %d", code)
			}
			if s.rbcSnapshot().WindowRequests > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the restarted RBC server received nothing within 20 s")
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

func setLimits(t *testing.T, adminURL, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, adminURL+"/admin/limits", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /admin/limits %s: %d %s", body, resp.StatusCode, b)
	}
}
