package replicas

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/testutil"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// backendProc is a real bin/backend process (kv) on loopback.
type backendProc struct {
	grpc, http string
}

func startBackend(t *testing.T, args ...string) backendProc {
	t.Helper()
	bin := testutil.Binary(t, "./backends/cmd/backend")
	p := backendProc{grpc: testutil.FreeAddr(t), http: testutil.FreeAddr(t)}
	testutil.Start(t, bin, append([]string{"--type", "kv", "--name", "b", "--grpc-addr", p.grpc, "--http-addr", p.http}, args...)...)
	testutil.WaitHTTP(t, "http://"+p.http+"/healthz")
	return p
}

func (p backendProc) metric(t *testing.T, series string) float64 {
	t.Helper()
	return testutil.Metric(t, "http://"+p.http, series)
}

// letGo waits until the replica holds none of the copies it was sent
// (nothing queued, nothing in service), none served, and checks that the
// Purge calls reached it: some queries were purged. (A Purge may overtake its
// Get on the connection and find nothing; the cancellation that follows it
// ends that one.)
func (p backendProc) letGo(t *testing.T) {
	t.Helper()
	// On a busy machine the copies and the purges may still be on their way when
	// the batches are answered: wait for a purge to arrive, then for the replica
	// to hold nothing.
	purged := func() float64 {
		return p.metric(t, `backend_queries_purged_total{backend="b",state="queued"}`) +
			p.metric(t, `backend_queries_purged_total{backend="b",state="running"}`)
	}
	waitFor(t, "the copies at the hung replica purged and ended", func() bool {
		return purged() > 0 && p.metric(t, `backend_in_service{backend="b"}`) == 0 &&
			p.metric(t, `backend_queue_length{backend="b"}`) == 0
	})
	if served := p.metric(t, `backend_queries_served_total{backend="b"}`); served != 0 {
		t.Fatalf("hung replica: %v queries purged, %v served; want none served", purged(), served)
	}
}

// dispatcherOver builds policy spec over the backends' replicas.
func dispatcherOver(t *testing.T, spec config.Dispatch, ps ...backendProc) *Dispatcher {
	t.Helper()
	var reps []config.Replica
	for _, p := range ps {
		reps = append(reps, config.Replica{GRPC: p.grpc})
	}
	rs, err := Dial(config.Backend{Name: "b", Replicas: reps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	rs.AttemptTimeout = 30 * time.Second
	d, err := Build(spec, rs)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// getValues sends n batches of one key each and checks every value.
func getValues(t *testing.T, d *Dispatcher, n int) {
	t.Helper()
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, err := d.Get(ctx, &pb.GetRequest{Keys: []string{key}, Sizes: []uint32{64}})
		cancel()
		if err != nil || len(resp.Values) != 1 || !value.Check(resp.Values[0], "b", key) {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
}

// hedge with one replica that hangs (60 s of extra latency per query)
// answers every batch from the other, and cancels and purges the copy at the
// hung replica: its running queries are stopped.
func TestHedgeAnswersFromTheLiveReplicaAndPurgesTheHungOne(t *testing.T) {
	hung := startBackend(t, "--extra-latency-ms", "60000")
	live := startBackend(t)
	d := dispatcherOver(t, config.Dispatch{Policy: "hedge"}, hung, live)
	const n = 8
	getValues(t, d, n)
	st := d.Stats()
	if st.Copies != 2*n || st.Extra != n || st.Cancelled != n || st.WonFirst+st.WonLater != n {
		t.Fatalf("counters: %+v", st)
	}
	hung.letGo(t)
	waitFor(t, "every batch finished", func() bool { return d.Stats().Live == 0 })
	waitFor(t, "every purge call made", func() bool { return d.Stats().Purges == n })
	if d.Stats().PurgeErrors != 0 || live.metric(t, `backend_queries_served_total{backend="b"}`) != n {
		t.Fatalf("purge errors %d; the live replica served %v", d.Stats().PurgeErrors, live.metric(t, `backend_queries_served_total{backend="b"}`))
	}
}

// das sends every batch at normal priority to one replica and a duplicate
// at low priority to the other, and purges the loser. With one replica hung,
// the batches whose normal copy went to it are answered by the low copy at
// the live replica (served at low priority), and the copies at the hung
// replica are purged.
func TestDASDuplicatesAtLowPriorityAndPurges(t *testing.T) {
	hung := startBackend(t, "--extra-latency-ms", "60000")
	live := startBackend(t)
	d := dispatcherOver(t, config.Dispatch{Policy: "das"}, hung, live)
	const n = 16 // normal copies all to one replica: probability 2^-15
	getValues(t, d, n)
	st := d.Stats()
	if st.Copies != 2*n || st.Extra != n || st.Cancelled != n {
		t.Fatalf("counters: %+v", st)
	}
	low := live.metric(t, `backend_queries_served_by_priority_total{backend="b",priority="low"}`)
	normal := live.metric(t, `backend_queries_served_by_priority_total{backend="b",priority="normal"}`)
	if low == 0 || normal == 0 || low+normal != n || st.WonLater != uint64(low) {
		t.Fatalf("the live replica served %v low and %v normal of %d (won by the duplicate: %d)", low, normal, n, st.WonLater)
	}
	hung.letGo(t)
	waitFor(t, "every batch finished", func() bool { return d.Stats().Live == 0 })
}
