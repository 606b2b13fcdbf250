package replicas

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/appserver/internal/testbackend"
	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/dispatch"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

func TestRandomSpreadsOverReplicas(t *testing.T) {
	a := testbackend.Start(t, "ratings")
	b := testbackend.Start(t, "ratings")
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: a.Addr}, {GRPC: b.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	d, err := Build(config.Dispatch{Policy: "random"}, rs)
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		resp, err := d.Get(context.Background(), &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{100}})
		if err != nil {
			t.Fatal(err)
		}
		if !value.Check(resp.Values[0], "ratings", "k") || len(resp.Values[0]) != 100 {
			t.Fatal("wrong value bytes")
		}
	}
	// Each replica is chosen with probability 1/2: 200 calls leave one
	// idle with probability 2^-199.
	if a.Calls() == 0 || b.Calls() == 0 || a.Calls()+b.Calls() != 200 {
		t.Fatalf("calls: %d and %d, want both > 0 and 200 in total", a.Calls(), b.Calls())
	}
	if n := d.Stats().Live; n != 0 {
		t.Fatalf("%d batches not finished after all returned", n)
	}
	for i := range rs.Len() {
		if n := rs.Replica(i).InFlight(); n != 0 {
			t.Fatalf("replica %d: %d calls in flight after all returned", i, n)
		}
	}
}

func TestBuildRejectsUnknownPolicy(t *testing.T) {
	_, err := Build(config.Dispatch{Policy: "psychic"}, &Replicas{})
	if err == nil || !strings.Contains(err.Error(), `policy: "psychic" is not one of `+strings.Join(dispatch.Names(), ", ")) {
		t.Fatalf("got %v, want an error naming the policy and the known ones", err)
	}
	_, err = Build(config.Dispatch{Policy: "psq", Params: map[string]any{"n": int64(0)}}, &Replicas{})
	if err == nil || !strings.Contains(err.Error(), "n: 0 is out of range [1, 1000]") {
		t.Fatalf("got %v, want the parameter named", err)
	}
}

// deadAddr is a loopback address nothing listens on (connection refused).
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestDialNeedsReplicas(t *testing.T) {
	if _, err := Dial(config.Backend{Name: "x"}); err == nil {
		t.Fatal("Dial accepted a backend without replicas")
	}
}

// getAll sends batches through d until done() holds (at most n), each with
// a 5 s deadline; every one must answer.
func getAll(t *testing.T, d *Dispatcher, n int, done func() bool) {
	t.Helper()
	req := &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{10}}
	for i := 0; i < n && !done(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := d.Get(ctx, req)
		cancel()
		if err != nil || len(resp.Values) != 1 || !value.Check(resp.Values[0], "ratings", "k") {
			t.Fatalf("batch %d failed: %v", i, err)
		}
	}
	if !done() {
		t.Fatalf("not done after %d batches", n)
	}
}

// waitFor polls cond every 10 ms for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}

// A dead replica (connection refused: Unavailable at once) costs no request:
// each batch sent to it is retried on the other replica (Machine.Settle);
// after EjectAfter failures in a row it is out of rotation — the policy is
// told and sends nothing to it — for EjectBase, then back in rotation and
// probed by ordinary traffic: ejected again at its first failure.
func TestDeadReplicaIsRetriedEjectedAndProbedBack(t *testing.T) {
	live := testbackend.Start(t, "ratings")
	dead := deadAddr(t)
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: dead}, {GRPC: live.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	d, err := Build(config.Dispatch{Policy: "random"}, rs)
	if err != nil {
		t.Fatal(err)
	}
	getAll(t, d, 1000, func() bool { return rs.Ejections() == 1 })
	if st := d.Stats(); rs.Healthy(0) || !rs.Healthy(1) || st.Retries != EjectAfter || st.InRotation != 1 || st.WonLater != EjectAfter {
		t.Fatalf("after the ejection: healthy %v %v, %+v", rs.Healthy(0), rs.Healthy(1), st)
	}
	// The policy sends nothing to it while it is out.
	before := live.Calls()
	getAll(t, d, 20, func() bool { return live.Calls()-before == 20 })
	if st := d.Stats(); st.Retries != EjectAfter {
		t.Fatalf("while ejected: %d retries", st.Retries)
	}
	// Back in rotation after EjectBase; the first batch sent to it fails,
	// is retried, and ejects it again.
	waitFor(t, "rotation after EjectBase", func() bool { return d.Stats().InRotation == 2 })
	getAll(t, d, 1000, func() bool { return rs.Ejections() == 2 })
	if st := d.Stats(); st.Retries != EjectAfter+1 || st.InRotation != 1 {
		t.Fatalf("the probe by traffic: %+v", st)
	}
	// A caller that gives up is not the replica's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Get(ctx, &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{10}}); status.Code(err) != codes.Canceled || !rs.Healthy(1) {
		t.Fatalf("a cancelled call: %v, healthy %v", err, rs.Healthy(1))
	}
}

// holdAddr is a loopback address that accepts connections and never
// answers (as a stopped process does).
func holdAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}

// A hung replica costs a batch one AttemptTimeout: the attempt runs out,
// the caller's deadline still leaves time, and the batch is retried on the
// other replica. After EjectAfter such timeouts the hung replica is ejected.
func TestHungReplicaIsRetriedAfterItsAttemptTimeout(t *testing.T) {
	live := testbackend.Start(t, "ratings")
	hung := holdAddr(t)
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: hung}, {GRPC: live.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rs.AttemptTimeout = 100 * time.Millisecond
	d, _ := Build(config.Dispatch{Policy: "random"}, rs)
	getAll(t, d, 1000, func() bool { return rs.Ejections() == 1 })
	if st := d.Stats(); rs.Healthy(0) || st.Retries != EjectAfter {
		t.Fatalf("after %d timeouts: healthy %v, %+v", EjectAfter, rs.Healthy(0), st)
	}
	// No time left for a second attempt: the caller's deadline ends the batch.
	rs2, _ := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: hung}}})
	defer rs2.Close()
	rs2.AttemptTimeout = time.Second
	d2, _ := Build(config.Dispatch{Policy: "random"}, rs2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := d2.Get(ctx, &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{10}}); status.Code(err) != codes.DeadlineExceeded || d2.Stats().Retries != 0 {
		t.Fatalf("a batch whose caller's deadline passed: %v, %+v", err, d2.Stats())
	}
}

// When every other replica is ejected, the retry still goes to one (the
// Machine's panic mode): a replica that came back is probed by the retry
// instead of the batch failing. And when every replica is ejected, every one
// is usable (a backend is never given up on).
func TestRetryProbesAnEjectedReplicaWhenNoneIsInRotation(t *testing.T) {
	live := testbackend.Start(t, "ratings")
	dead := deadAddr(t)
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: dead}, {GRPC: live.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	d, _ := Build(config.Dispatch{Policy: "random"}, rs)
	// Eject the live replica by hand, as a run of failures would.
	h := &rs.list[1].health
	h.mu.Lock()
	h.ejectedAt, h.ejectedUntil, h.ejections = time.Now(), time.Now().Add(time.Minute), 1
	h.mu.Unlock()
	rs.tell(1, false)
	// Every batch goes to the dead replica, the only one in rotation, and
	// is retried on the ejected live one.
	getAll(t, d, EjectAfter-1, func() bool { return live.Calls() == EjectAfter-1 })
	if st := d.Stats(); st.Retries != EjectAfter-1 || st.InRotation != 1 || !rs.Healthy(0) {
		t.Fatalf("retries into an ejected replica: %+v", st)
	}
	// The next failure ejects the dead one too: every replica is usable.
	getAll(t, d, 1000, func() bool { return rs.Ejections() == 1 })
	if st := d.Stats(); st.InRotation != 0 {
		t.Fatalf("both ejected: %+v", st)
	}
	before := live.Calls()
	getAll(t, d, 1000, func() bool { return live.Calls()-before >= 5 })
}

// An ejected replica that answers its health check again is readmitted by
// the active probe once it has been out EjectBase, not at the end of a long
// doubled ejection, and the policy is told; one that does not answer stays
// out.
func TestEjectedReplicaIsReadmittedByTheActiveProbe(t *testing.T) {
	slow := testbackend.Start(t, "ratings")
	live := testbackend.Start(t, "ratings")
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: slow.Addr}, {GRPC: live.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rs.AttemptTimeout = 50 * time.Millisecond
	rs.list[0].health.ejections = 4 // the next ejection lasts 16 s
	slow.SetDelay(time.Second)
	d, _ := Build(config.Dispatch{Policy: "random"}, rs)
	getAll(t, d, 1000, func() bool { return rs.Ejections() == 1 })
	if rs.Healthy(0) || d.Stats().InRotation != 1 {
		t.Fatal("a replica with a streak of ejections was not ejected by its next failure")
	}
	slow.SetDelay(0)
	t0 := time.Now()
	waitFor(t, "readmission", func() bool { return rs.Healthy(0) && d.Stats().InRotation == 2 })
	if d := time.Since(t0); d < EjectBase-100*time.Millisecond || rs.Readmissions() != 1 {
		t.Fatalf("readmitted after %v (%d readmissions); want EjectBase at least", d, rs.Readmissions())
	}

	// A replica that does not answer at all is not readmitted early.
	dead := deadAddr(t)
	rs2, _ := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: dead}, {GRPC: live.Addr}}})
	defer rs2.Close()
	rs2.list[0].health.ejections = 4
	d2, _ := Build(config.Dispatch{Policy: "random"}, rs2)
	getAll(t, d2, 1000, func() bool { return rs2.Ejections() == 1 })
	time.Sleep(EjectBase + 3*ProbeEvery)
	if rs2.Healthy(0) || rs2.Readmissions() != 0 || d2.Stats().InRotation != 1 {
		t.Fatalf("a dead replica was readmitted (%d)", rs2.Readmissions())
	}
}
