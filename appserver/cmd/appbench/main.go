// Command appbench measures the application server's all-hit overhead: it
// starts three memcached instances and one bin/appserver (partitioned, three
// backends), fills the partitions so every query hits, and compares
//
//   - throughput of the app server (HTTP POST /v1/request, keep-alive,
//     --concurrency clients) with a plain Go multi-get loop against the same
//     memcached instances (the same queries, one multi-get per backend, the
//     three in parallel, --concurrency goroutines), and
//   - median latency of both at concurrency 1 (added latency per request).
//
// The baseline loop uses github.com/bradfitz/gomemcache (an independent
// client) and, for comparison, this repository's appserver/cache client.
// With --store redis the partitions are three redis-servers instead, and the
// baseline loops are go-redis' MGET (an independent client) and this
// repository's cache.RedisClient. Results go to stdout; docs/benchmarks.md
// records them.
//
//	go build -o bin/ ./... && bin/appbench --appserver bin/appserver [--store redis]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/robinhoodcache/robinhood/appserver/cache"
	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/trace"
)

var backends = []string{"b0", "b1", "b2"}

type config struct {
	appserver   string
	memcached   string
	redis       string
	store       string
	duration    time.Duration
	concurrency int
	keys        int
	queries     int
	requests    int
	rounds      int
	seed        uint64
	extra       string
}

func main() {
	var c config
	flag.StringVar(&c.appserver, "appserver", "bin/appserver", "path of the appserver binary")
	flag.StringVar(&c.memcached, "memcached", "memcached", "path of the memcached binary")
	flag.StringVar(&c.redis, "redis", "redis-server", "path of the redis-server binary (--store redis)")
	flag.StringVar(&c.store, "store", "memcached", "what the partitions are: memcached or redis")
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "length of each measurement phase")
	flag.IntVar(&c.concurrency, "concurrency", 16, "concurrent clients in the throughput phases")
	flag.IntVar(&c.keys, "keys", 2000, "keys per backend (all preloaded)")
	flag.IntVar(&c.queries, "queries", 10, "queries per request, spread over the three backends")
	flag.IntVar(&c.requests, "requests", 1000, "distinct requests cycled through")
	flag.IntVar(&c.rounds, "rounds", 3, "measurement rounds (figures are medians over rounds)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the request mix")
	flag.StringVar(&c.extra, "appserver-args", "", "extra bin/appserver flags, space-separated (e.g. --no-stats)")
	flag.Parse()
	if c.store != "memcached" && c.store != "redis" {
		fmt.Fprintf(os.Stderr, "appbench: --store must be memcached or redis, not %q\n", c.store)
		os.Exit(2)
	}
	if c.duration <= 0 || c.concurrency <= 0 || c.keys <= 0 || c.queries < len(backends) || c.requests <= 0 || c.rounds <= 0 {
		fmt.Fprintln(os.Stderr, "appbench: --duration, --concurrency, --keys, --requests, --rounds must be positive and --queries at least 3")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "appbench:", err)
		os.Exit(1)
	}
}

// loop is one measured way of serving the benchmark requests.
type loop struct {
	name string
	do   func(*request) error
}

// request is one benchmark request: its body and, per backend, the
// memcached keys the baseline loop fetches.
type request struct {
	body  []byte
	mkeys [][]string
}

// sizeOf gives every key a fixed size between 100 B and ~4 KB.
func sizeOf(key int) int { return 100 + (key*7919)%4000 }

func run(c config) error {
	dir, err := os.MkdirTemp("", "appbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}()
	start := func(name string, args ...string) (*exec.Cmd, error) {
		cmd := exec.Command(name, args...)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		procs = append(procs, cmd)
		return cmd, nil
	}

	mc, mcPIDs, err := startStores(c, start)
	if err != nil {
		return err
	}
	httpAddr := freeAddr()
	topoPath := filepath.Join(dir, "topology.yaml")
	if err := os.WriteFile(topoPath, []byte(benchTopology(c, httpAddr, mc)), 0o644); err != nil {
		return err
	}
	appArgs := append([]string{"--topology", topoPath, "--id", "bench", "--log-level", "error",
		"--memcached-conns", strconv.Itoa(2*c.concurrency + 8)}, strings.Fields(c.extra)...)
	appCmd, err := start(c.appserver, appArgs...)
	if err != nil {
		return err
	}
	url := "http://" + httpAddr + "/v1/request"
	if err := waitHTTP("http://" + httpAddr + "/healthz"); err != nil {
		return err
	}

	reqs := makeRequests(c)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.concurrency + 4, MaxIdleConns: c.concurrency + 4}}
	// Every request must be all-hit; check them all once (also warms up).
	for i := range reqs {
		body, err := post(hc, url, reqs[i].body)
		if err != nil {
			return err
		}
		if !bytes.Contains(body, []byte(`"misses":0,"errors":0`)) || bytes.Contains(body, []byte(`"hits":0,`)) {
			return fmt.Errorf("request %d was not all-hit: %s", i, body)
		}
	}

	own := make([]cache.Store, len(backends))
	for i := range backends {
		own[i] = newStore(c.store, mc[i], c.concurrency+4)
		defer own[i].Close()
	}
	// The independent client's loop first, then ours, the app server and
	// /healthz: the ratios below compare the app server (index 2) with the
	// first two.
	independent, closeIndependent := independentLoop(c, mc)
	defer closeIndependent()
	health := "http://" + httpAddr + "/healthz"
	loops := []loop{
		independent,
		{"baseline: Go multi-get loop (appserver/cache client)", func(r *request) error {
			return fanout(r, func(b int, keys []string) error { return ownGet(own[b], keys) })
		}},
		{"app server: POST /v1/request", func(r *request) error { _, err := post(hc, url, r.body); return err }},
		{"reference: GET /healthz of the app server (HTTP only)", func(*request) error { _, err := get(hc, health); return err }},
	}

	fmt.Printf("appbench: %s partitions, %d backends, %d queries/request, %d keys/backend, sizes 100-4099 B, %d CPUs, %d rounds of %v per phase\n",
		c.store, len(backends), c.queries, c.keys, runtime.NumCPU(), c.rounds, c.duration)
	rps, med, cpu, ratios, err := measureRounds(c, loops, reqs, appCmd.Process.Pid, mcPIDs)
	if err != nil {
		return err
	}
	fmt.Printf("%-56s %12s %13s   %s\n", "", fmt.Sprintf("req/s (c=%d)", c.concurrency), "median (c=1)", "CPU µs/request (c=16): load generator + app server + "+c.store)
	R := make([]float64, len(loops))
	M := make([]time.Duration, len(loops))
	for i, l := range loops {
		R[i], M[i] = medianF(rps[i]), median(med[i])
		fmt.Printf("%-56s %12.0f %13v   %s\n", l.name, R[i], M[i].Round(time.Microsecond), cpu[i])
	}
	const app = 2
	for i := range 2 {
		fmt.Printf("app server vs %-42s throughput ratio %.2f (rounds %s; target >= 0.5), added median latency %v (target <= 200us)\n",
			loops[i].name+":", medianF(ratios[i]), floatsText(ratios[i]), (M[app] - M[i]).Round(time.Microsecond))
	}
	return nil
}

// startStores starts the partitions' memcached (or redis-server) instances
// and preloads every key, so that all queries hit; it returns their
// addresses and process ids.
func startStores(c config, start func(string, ...string) (*exec.Cmd, error)) (mc []string, mcPIDs []int, err error) {
	mc = make([]string, len(backends))
	for i := range backends {
		mc[i] = freeAddr()
		_, port, _ := net.SplitHostPort(mc[i])
		name, args := c.memcached, []string{"-l", "127.0.0.1", "-p", port, "-U", "0", "-m", "256", "-t", "2", "-u", "root"}
		if c.store == "redis" {
			name, args = c.redis, []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
				"--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"}
		}
		if cmd, err := start(name, args...); err != nil {
			return nil, nil, err
		} else {
			mcPIDs = append(mcPIDs, cmd.Process.Pid)
		}
	}
	for _, a := range mc {
		if err := waitTCP(a); err != nil {
			return nil, nil, err
		}
	}
	// Preload every key so that all queries hit.
	for i, b := range backends {
		cl := newStore(c.store, mc[i], 4)
		for k := range c.keys {
			key := strconv.Itoa(k)
			if err := cl.Set(context.Background(), cache.Key(b, key), value.Bytes(b, key, sizeOf(k))); err != nil {
				return nil, nil, fmt.Errorf("preload %s: %w", mc[i], err)
			}
		}
		cl.Close()
	}
	return mc, mcPIDs, nil
}

// benchTopology is the app server's topology: the partitions at mc, and
// backends whose replicas nothing listens on.
func benchTopology(c config, httpAddr string, mc []string) string {
	topo := fmt.Sprintf("rbc_server: {grpc: %q}\nbackends:\n", freeAddr())
	for i, b := range backends {
		// Nothing listens on the replicas: every query must hit.
		topo += fmt.Sprintf("  - {id: %d, name: %s, type: kv, replicas: [{grpc: %q}]}\n", i, b, freeAddr())
	}
	topo += fmt.Sprintf("app_servers:\n  - id: bench\n    http: %q\n    cache_mode: partitioned\n    cache_budget_mb: 768\n    partitions: {", httpAddr)
	for i, b := range backends {
		if i > 0 {
			topo += ", "
		}
		if c.store == "redis" {
			topo += fmt.Sprintf("%s: {redis: %q}", b, mc[i])
		} else {
			topo += fmt.Sprintf("%s: %q", b, mc[i])
		}
	}
	topo += "}\n"
	return topo
}

// independentLoop is the baseline with an independent client (gomemcache,
// or go-redis with --store redis), and what closes its clients.
func independentLoop(c config, mc []string) (loop, func()) {
	if c.store == "redis" {
		rd := make([]*redis.Client, len(backends))
		for i := range backends {
			rd[i] = redis.NewClient(&redis.Options{Addr: mc[i], Protocol: 2, DisableIdentity: true, PoolSize: c.concurrency + 4,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		}
		closeAll := func() {
			for i := len(rd) - 1; i >= 0; i-- {
				rd[i].Close()
			}
		}
		return loop{"baseline: Go MGET loop (go-redis)", func(r *request) error {
			return fanout(r, func(b int, keys []string) error { return goredisGet(rd[b], keys) })
		}}, closeAll
	}
	gm := make([]*memcache.Client, len(backends))
	for i := range backends {
		gm[i] = memcache.New(mc[i])
		gm[i].MaxIdleConns = c.concurrency + 4
		gm[i].Timeout = 2 * time.Second
	}
	return loop{"baseline: Go multi-get loop (gomemcache)", func(r *request) error {
		return fanout(r, func(b int, keys []string) error { return gomemcacheGet(gm[b], keys) })
	}}, func() {}
}

// measureRounds measures every loop's throughput (with the CPU it takes)
// and median latency, round after round, and the app server's (loops[2])
// throughput ratio to the first two loops within each round.
func measureRounds(c config, loops []loop, reqs []request, appPID int, mcPIDs []int) (rps [][]float64, med [][]time.Duration, cpu []cpuUse, ratios [2][]float64, err error) {
	// Rounds interleave the loops so that a noisy neighbour affects them
	// alike; each figure is the median over the rounds, and the ratios are
	// taken within a round.
	rps = make([][]float64, len(loops))
	med = make([][]time.Duration, len(loops))
	cpu = make([]cpuUse, len(loops))
	for range c.rounds {
		for i, l := range loops {
			before := sampleCPU(appPID, mcPIDs)
			r, lat, err := measure(reqs, c.concurrency, c.duration, l.do)
			if err != nil {
				return nil, nil, nil, ratios, fmt.Errorf("%s: %w", l.name, err)
			}
			cpu[i].add(sampleCPU(appPID, mcPIDs).sub(before), len(lat))
			rps[i] = append(rps[i], r)
		}
		for i := range ratios {
			ratios[i] = append(ratios[i], rps[2][len(rps[2])-1]/rps[i][len(rps[i])-1])
		}
		for i, l := range loops {
			_, lat, err := measure(reqs, 1, c.duration, l.do)
			if err != nil {
				return nil, nil, nil, ratios, fmt.Errorf("%s: %w", l.name, err)
			}
			med[i] = append(med[i], median(lat))
		}
	}
	return rps, med, cpu, ratios, nil
}

func makeRequests(c config) []request {
	rng := rand.New(rand.NewPCG(c.seed, 0))
	reqs := make([]request, c.requests)
	for i := range reqs {
		tr := &trace.Request{T: int64(i), Layers: []trace.Layer{{}}}
		reqs[i].mkeys = make([][]string, len(backends))
		for b, name := range backends {
			n := c.queries / len(backends)
			if b < c.queries%len(backends) {
				n++
			}
			q := trace.BackendQueries{Backend: name}
			for range n {
				k := rng.IntN(c.keys)
				key := strconv.Itoa(k)
				q.Keys = append(q.Keys, key)
				q.Sizes = append(q.Sizes, int64(sizeOf(k)))
				q.Cacheable = append(q.Cacheable, true)
				reqs[i].mkeys[b] = append(reqs[i].mkeys[b], cache.Key(name, key))
			}
			tr.Layers[0] = append(tr.Layers[0], q)
		}
		reqs[i].body = trace.AppendJSON(nil, tr)
	}
	return reqs
}

// fanout runs get for every backend of r, the three in parallel.
func fanout(r *request, get func(b int, keys []string) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.mkeys))
	for b := 1; b < len(r.mkeys); b++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[b] = get(b, r.mkeys[b])
		}()
	}
	errs[0] = get(0, r.mkeys[0])
	wg.Wait()
	return errors.Join(errs...)
}

func gomemcacheGet(c *memcache.Client, keys []string) error {
	items, err := c.GetMulti(keys)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if items[k] == nil {
			return fmt.Errorf("miss on %s", k)
		}
	}
	return nil
}

// newStore is this repository's client of one partition of the given store.
func newStore(store, addr string, conns int) cache.Store {
	if store == "redis" {
		return cache.NewRedisClient(addr, cache.Options{MaxConns: conns})
	}
	return cache.NewClient(addr, cache.Options{MaxConns: conns})
}

func goredisGet(c *redis.Client, keys []string) error {
	vals, err := c.MGet(context.Background(), keys...).Result()
	if err != nil {
		return err
	}
	for i, v := range vals {
		if v == nil {
			return fmt.Errorf("miss on %s", keys[i])
		}
	}
	return nil
}

func ownGet(c cache.Store, keys []string) error {
	vals := make([][]byte, len(keys))
	if err := c.GetMulti(context.Background(), keys, vals); err != nil {
		return err
	}
	for i, v := range vals {
		if v == nil {
			return fmt.Errorf("miss on %s", keys[i])
		}
	}
	return nil
}

func post(hc *http.Client, url string, body []byte) ([]byte, error) {
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return b, nil
}

func get(hc *http.Client, url string) ([]byte, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func floatsText(v []float64) string {
	var b bytes.Buffer
	for i, f := range v {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.2f", f)
	}
	return b.String()
}

func medianF(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// cpuSample is the CPU time used so far by this process, the app server
// and the memcached instances.
type cpuSample struct{ self, app, mc time.Duration }

func (a cpuSample) sub(b cpuSample) cpuSample {
	return cpuSample{a.self - b.self, a.app - b.app, a.mc - b.mc}
}

func sampleCPU(appPID int, mcPIDs []int) cpuSample {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := cpuSample{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), app: procCPU(appPID)}
	for _, p := range mcPIDs {
		s.mc += procCPU(p)
	}
	return s
}

// procCPU reads utime+stime of a process from /proc (clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// cpuUse sums CPU time and requests over rounds.
type cpuUse struct {
	cpuSample
	n int
}

func (u *cpuUse) add(s cpuSample, n int) {
	u.self += s.self
	u.app += s.app
	u.mc += s.mc
	u.n += n
}

func (u cpuUse) String() string {
	if u.n == 0 {
		return "-"
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(u.n) }
	return fmt.Sprintf("%.0f + %.0f + %.0f = %.0f", per(u.self), per(u.app), per(u.mc), per(u.self+u.app+u.mc))
}

// measure runs do with workers goroutines for d and returns the completed
// requests per second and every request's latency.
func measure(reqs []request, workers int, d time.Duration, do func(*request) error) (float64, []time.Duration, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	stop := time.Now().Add(d)
	begin := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for time.Now().Before(stop) {
				r := &reqs[int(next.Add(1))%len(reqs)]
				t0 := time.Now()
				if err := do(r); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	return float64(len(all)) / elapsed.Seconds(), all, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitTCP(addr string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("nothing listens on %s", addr)
}

func waitHTTP(url string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("%s did not answer", url)
}
