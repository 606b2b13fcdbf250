package dispatch

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
	d, err := Build(config.Dispatch{Policy: Random}, rs)
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
	for i := range rs.Len() {
		if n := rs.Replica(i).InFlight(); n != 0 {
			t.Fatalf("replica %d: %d calls in flight after all returned", i, n)
		}
	}
}

func TestBuildRejectsUnknownPolicy(t *testing.T) {
	_, err := Build(config.Dispatch{Policy: "jsq"}, &Replicas{})
	if err == nil || !strings.Contains(err.Error(), `"jsq"`) || !strings.Contains(err.Error(), "random") {
		t.Fatalf("got %v, want an error naming the policy and the known ones", err)
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

// A dead replica (connection refused: Unavailable at once) costs no request:
// each batch sent to it is retried on the other replica; after EjectAfter
// failures in a row it is out of rotation for EjectBase, then probed by
// ordinary traffic — ejected again for twice as long while it stays dead,
// back in rotation once it answers.
func TestDeadReplicaIsRetriedEjectedAndProbedBack(t *testing.T) {
	live := testbackend.Start(t, "ratings")
	dead := deadAddr(t)
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: dead}, {GRPC: live.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	now := time.Unix(1_000, 0)
	rs.now = func() time.Time { return now }
	req := &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{10}}
	get := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rs.Call(ctx, 0, req)
		if err != nil || len(resp.Values) != 1 {
			t.Fatalf("a batch for the dead replica failed: %v", err)
		}
	}
	for range EjectAfter {
		get()
	}
	if rs.Healthy(0) || !rs.Healthy(1) || rs.Retries() != EjectAfter || rs.Ejections() != 1 {
		t.Fatalf("after %d failures: healthy %v %v, %d retries, %d ejections", EjectAfter, rs.Healthy(0), rs.Healthy(1), rs.Retries(), rs.Ejections())
	}
	if in := rs.InRotation(nil); len(in) != 1 || in[0] != 1 {
		t.Fatalf("in rotation: %v, want [1]", in)
	}
	// Random dispatch sends nothing to it while it is out.
	d, _ := Build(config.Dispatch{Policy: Random}, rs)
	before := live.Calls()
	for range 20 {
		if _, err := d.Get(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if live.Calls()-before != 20 || rs.Retries() != EjectAfter {
		t.Fatalf("while ejected: %d calls reached the live replica, %d retries", live.Calls()-before, rs.Retries())
	}
	// Back in rotation after EjectBase: the probe fails, out again for 2 × EjectBase.
	now = now.Add(EjectBase)
	if !rs.Healthy(0) {
		t.Fatal("not probed back after EjectBase")
	}
	get()
	if rs.Healthy(0) || rs.Ejections() != 2 {
		t.Fatalf("a failed probe: healthy %v, %d ejections", rs.Healthy(0), rs.Ejections())
	}
	now = now.Add(EjectBase)
	if rs.Healthy(0) {
		t.Fatal("the second ejection lasted only EjectBase")
	}
	now = now.Add(EjectBase)
	if !rs.Healthy(0) {
		t.Fatal("not probed back after 2 × EjectBase")
	}
	// A caller that gives up is not the replica's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rs.Call(ctx, 1, req); status.Code(err) != codes.Canceled || !rs.Healthy(1) {
		t.Fatalf("a cancelled call: %v, healthy %v", err, rs.Healthy(1))
	}
}

// A hung replica (it accepts connections and never answers, as a stopped
// process does) costs a batch one AttemptTimeout: the attempt runs out, the
// caller's deadline still leaves time, and the batch is retried on the other
// replica. After EjectAfter such timeouts the hung replica is ejected.
func TestHungReplicaIsRetriedAfterItsAttemptTimeout(t *testing.T) {
	live := testbackend.Start(t, "ratings")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accept and hold connections without a word
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
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: l.Addr().String()}, {GRPC: live.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rs.AttemptTimeout = 100 * time.Millisecond
	req := &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{10}}
	for n := 1; n <= EjectAfter; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		resp, err := rs.Call(ctx, 0, req)
		cancel()
		if err != nil || len(resp.Values) != 1 {
			t.Fatalf("batch %d for the hung replica failed: %v", n, err)
		}
		if d := time.Since(t0); d < rs.AttemptTimeout {
			t.Fatalf("batch %d answered in %v, before its first attempt could time out", n, d)
		}
		if rs.Retries() != uint64(n) {
			t.Fatalf("after %d batches: %d retries", n, rs.Retries())
		}
	}
	if rs.Healthy(0) || rs.Ejections() != 1 {
		t.Fatalf("after %d timeouts: healthy %v, %d ejections", EjectAfter, rs.Healthy(0), rs.Ejections())
	}
	// No time left for a second attempt: the caller's deadline ends the batch.
	rs2, _ := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: l.Addr().String()}, {GRPC: live.Addr}}})
	defer rs2.Close()
	rs2.AttemptTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := rs2.Call(ctx, 0, req); status.Code(err) != codes.DeadlineExceeded || rs2.Retries() != 0 {
		t.Fatalf("a batch whose caller's deadline passed: %v, %d retries", err, rs2.Retries())
	}
}

// When every other replica is ejected, the retry still goes to one (the one
// whose ejection ends first): a replica that came back is probed by the retry
// instead of the batch failing.
func TestRetryProbesAnEjectedReplicaWhenNoneIsInRotation(t *testing.T) {
	live := testbackend.Start(t, "ratings")
	dead := deadAddr(t)
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: dead}, {GRPC: live.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	now := time.Unix(1_000, 0)
	rs.now = func() time.Time { return now }
	rs.list[1].health.ejectedUntil = now.Add(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rs.Call(ctx, 0, &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{10}})
	if err != nil || len(resp.Values) != 1 || rs.Retries() != 1 || live.Calls() != 1 {
		t.Fatalf("got %v, %d retries, %d calls to the ejected live replica", err, rs.Retries(), live.Calls())
	}
	if !rs.Healthy(1) && rs.list[1].health.ejections != 0 {
		t.Fatal("a successful probe left the replica's ejection streak")
	}
}

// An ejected replica that answers its health check again is readmitted by
// the active probe once it has been out EjectBase, not at the end of a long
// doubled ejection; one that does not answer stays out.
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
	req := &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{10}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rs.Call(ctx, 0, req); err != nil {
		t.Fatal(err)
	}
	if rs.Healthy(0) {
		t.Fatal("a replica with a streak of ejections was not ejected by its next failure")
	}
	slow.SetDelay(0)
	t0 := time.Now()
	for !rs.Healthy(0) {
		if time.Since(t0) > 5*time.Second {
			t.Fatalf("not readmitted within 5 s of a 16 s ejection (%d readmissions)", rs.Readmissions())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(t0); d < EjectBase-100*time.Millisecond || rs.Readmissions() != 1 {
		t.Fatalf("readmitted after %v (%d readmissions); want EjectBase at least", d, rs.Readmissions())
	}

	// A replica that does not answer at all is not readmitted early.
	dead := deadAddr(t)
	rs2, _ := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: dead}, {GRPC: live.Addr}}})
	defer rs2.Close()
	rs2.list[0].health.ejections = 4
	if _, err := rs2.Call(ctx, 0, req); err != nil {
		t.Fatal(err)
	}
	time.Sleep(EjectBase + 3*ProbeEvery)
	if rs2.Healthy(0) || rs2.Readmissions() != 0 {
		t.Fatalf("a dead replica was readmitted (%d)", rs2.Readmissions())
	}
}
