package report

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/robinhoodcache/robinhood/lib/testutil"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// receiver is a real RBCService on loopback that keeps the batches it gets.
type receiver struct {
	pb.UnimplementedRBCServiceServer
	mu      sync.Mutex
	batches []*pb.ReportRequest
	g       *grpc.Server
	done    chan struct{}
}

func (rc *receiver) Report(s pb.RBCService_ReportServer) error {
	var n, b uint64
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&pb.ReportResponse{AcceptedRecords: n, AcceptedBatches: b})
		}
		if err != nil {
			return err
		}
		rc.mu.Lock()
		rc.batches = append(rc.batches, req)
		rc.mu.Unlock()
		n += uint64(len(req.LatencyUs))
		b++
	}
}

func (rc *receiver) records() (lat, blk []uint32, ids []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, b := range rc.batches {
		lat = append(lat, b.LatencyUs...)
		blk = append(blk, b.BlockingBackend...)
		ids = append(ids, b.AppServerId)
	}
	return lat, blk, ids
}

func startReceiver(t *testing.T, addr string) *receiver {
	t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the port may still be held by a receiver just stopped
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{g: grpc.NewServer(), done: make(chan struct{})}
	pb.RegisterRBCServiceServer(rc.g, rc)
	go func() {
		defer close(rc.done)
		_ = rc.g.Serve(l)
	}()
	t.Cleanup(rc.stop)
	return rc
}

func (rc *receiver) stop() {
	rc.g.Stop()
	<-rc.done
}

func dial(t *testing.T, addr string) pb.RBCServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRBCServiceClient(conn)
}

func run(t *testing.T, r *Reporter) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReporterSendsBatches(t *testing.T) {
	addr := testutil.FreeAddr(t)
	rc := startReceiver(t, addr)
	r := New(dial(t, addr), Options{AppServerID: "app7", Interval: 20 * time.Millisecond})
	stop := run(t, r)
	for i := range 100 {
		r.Record(uint32(1000+i), uint32(i%3))
		if i%25 == 0 {
			time.Sleep(30 * time.Millisecond) // spread over several batches
		}
	}
	waitFor(t, "100 records sent", func() bool { return r.Sent() == 100 })
	stop()
	lat, blk, ids := rc.records()
	if len(lat) != 100 || len(blk) != 100 {
		t.Fatalf("receiver got %d/%d records, want 100", len(lat), len(blk))
	}
	for i := range lat {
		if lat[i] != uint32(1000+i) || blk[i] != uint32(i%3) {
			t.Fatalf("record %d = (%d, %d), want (%d, %d)", i, lat[i], blk[i], 1000+i, i%3)
		}
	}
	if len(ids) < 2 {
		t.Fatalf("%d batches, want several", len(ids))
	}
	for _, id := range ids {
		if id != "app7" {
			t.Fatalf("batch from %q, want app7", id)
		}
	}
	if r.Dropped() != 0 {
		t.Fatalf("%d dropped", r.Dropped())
	}
}

func TestReporterBufferBound(t *testing.T) {
	addr := testutil.FreeAddr(t)
	startReceiver(t, addr)
	r := New(dial(t, addr), Options{AppServerID: "a", BufferLen: 10, Interval: time.Hour})
	for i := range 25 {
		r.Record(uint32(i), 0)
	}
	if r.Dropped() != 15 {
		t.Fatalf("dropped %d, want 15", r.Dropped())
	}
	// Stopping sends the buffered ten.
	stop := run(t, r)
	stop()
	if r.Sent() != 10 {
		t.Fatalf("sent %d at shutdown, want 10", r.Sent())
	}
}

// With nothing listening, records are dropped and counted and Record never
// blocks; once a server appears at the address the reporter reconnects.
func TestReporterServerAwayAndBack(t *testing.T) {
	addr := testutil.FreeAddr(t)
	r := New(dial(t, addr), Options{AppServerID: "a", Interval: 20 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond})
	run(t, r)
	for range 50 {
		r.Record(1, 0)
		time.Sleep(2 * time.Millisecond)
	}
	waitFor(t, "50 records dropped", func() bool { return r.Dropped() == 50 })
	if r.Sent() != 0 || r.Connected() {
		t.Fatalf("sent %d, connected %v with no server", r.Sent(), r.Connected())
	}

	rc := startReceiver(t, addr)
	waitFor(t, "a record sent after the server came up", func() bool {
		r.Record(2, 1)
		time.Sleep(5 * time.Millisecond)
		return r.Sent() > 0
	})
	lat, _, _ := rc.records()
	for _, l := range lat {
		if l != 2 {
			t.Fatalf("the server got a record (%d) from before it started", l)
		}
	}

	// The server goes away mid-stream and comes back: sending resumes.
	rc.stop()
	waitFor(t, "the loss noticed", func() bool {
		r.Record(3, 1)
		time.Sleep(5 * time.Millisecond)
		return !r.Connected()
	})
	sent := r.Sent()
	rc2 := startReceiver(t, addr)
	waitFor(t, "sending resumed", func() bool {
		r.Record(4, 2)
		time.Sleep(5 * time.Millisecond)
		return r.Sent() > sent
	})
	// Sent counts records handed to the stream; the server reads them a
	// moment later.
	waitFor(t, "the restarted server to receive records", func() bool {
		lat, _, _ := rc2.records()
		return len(lat) > 0
	})
}
