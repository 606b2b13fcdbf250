package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/lib/auth"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// A Purge larger than any valid one (MaxBatchKeys ids) is refused before it
// is decoded (gRPC reports a codec's refusal as INTERNAL, with the codec's
// message); one of MaxBatchKeys ids is taken.
func TestAnOversizedPurgeIsRefusedBeforeDecoding(t *testing.T) {
	f := start(t, "b", memStore(t, "b"), capacity.Limits{Workers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := make([]uint64, 4*MaxBatchKeys) // one-byte varints: about 400 KB, but more ids than allowed
	for i := range ids {
		ids[i] = uint64(i % 100)
	}
	ids = append(ids, make([]uint64, MaxPurgeBytes)...) // past the byte bound
	_, err := f.client.Purge(ctx, &robinhoodv1.PurgeRequest{BatchIds: ids})
	if err == nil || !strings.Contains(err.Error(), "exceeds the limit of 1000064 (100000 batch ids)") {
		t.Fatalf("oversized purge: %v, want it refused naming the limit", err)
	}
	big := make([]uint64, MaxBatchKeys)
	for i := range big {
		big[i] = 1<<63 + uint64(i) // ten-byte varints: the largest valid request
	}
	if _, err := f.client.Purge(ctx, &robinhoodv1.PurgeRequest{BatchIds: big}); err != nil {
		t.Fatalf("the largest valid purge: %v", err)
	}
}

// A batch belongs to the caller that sent it: another caller's Purge of its
// id leaves it alone (counted), its owner's purges it.
func TestPurgeIsScopedToTheBatchsCaller(t *testing.T) {
	f := start(t, "b", memStore(t, "b"), capacity.Limits{Workers: 1, ExtraLatencyMs: 60_000})
	reg := f.srv.Registry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := busyAndQueued(t, ctx, f, 1, 777)

	pr, err := f.srv.Purge(auth.WithCaller(ctx, "stranger"), &robinhoodv1.PurgeRequest{BatchIds: []uint64{777, 1}})
	if err != nil || pr.Dequeued != 0 || pr.Stopped != 0 {
		t.Fatalf("a stranger's purge = %v, %v; want nothing purged", pr, err)
	}
	if n := metric(t, reg, "backend_purges_refused_total"); n != 2 {
		t.Fatalf("refused purges %v, want 2", n)
	}
	if q := metric(t, reg, "backend_queue_length"); q != 1 {
		t.Fatalf("queue %v after a stranger's purge, want the batch still queued", q)
	}
	pr, err = f.srv.Purge(auth.WithCaller(ctx, "app0"), &robinhoodv1.PurgeRequest{BatchIds: []uint64{777, 1}})
	if err != nil || pr.Dequeued != 1 || pr.Stopped != 1 {
		t.Fatalf("the owner's purge = %v, %v; want 1 dequeued, 1 stopped", pr, err)
	}
	for range 2 {
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Fatalf("purged batch: %v, want CANCELLED", err)
		}
	}
}

// busyAndQueued has app0 send batch busy (one query, which takes the only
// worker) and then batch queued (one query, which waits); their Gets'
// errors arrive on the channel returned.
func busyAndQueued(t *testing.T, ctx context.Context, f *fixture, busy, queued uint64) <-chan error {
	t.Helper()
	reg := f.srv.Registry()
	done := make(chan error, 2)
	get := func(key string, id uint64) {
		_, err := f.srv.Get(auth.WithCaller(ctx, "app0"), &robinhoodv1.GetRequest{Keys: []string{key}, Sizes: []uint32{8}, BatchId: id})
		done <- err
	}
	go get("busy", busy)
	waitFor(t, func() bool { return metric(t, reg, "backend_in_service") == 1 })
	go get("queued", queued)
	waitFor(t, func() bool { return metric(t, reg, "backend_queue_length") == 1 })
	return done
}

// countingCodec counts the messages a server decodes.
type countingCodec struct {
	encoding.CodecV2
	n *atomic.Int64
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.n.Add(1)
	return c.CodecV2.Unmarshal(data, v)
}

// With authentication on, a call without a valid token is refused on its
// headers: its message is never decoded (a stranger's 1 MB Purge costs
// nothing), and a caller with a token still gets through.
func TestAStrangersCallIsRefusedBeforeItsMessageIsDecoded(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("app0 "+strings.Repeat("k", 32)+"\n"), 0o600)
	g, err := auth.NewGuard(auth.ServerOptions{TokenFile: tokens}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	model, err := capacity.New(capacity.Limits{Workers: 1}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Name: "b", Type: "kv", Store: memStore(t, "b"), Model: model})
	if err != nil {
		t.Fatal(err)
	}
	var decoded atomic.Int64
	opts := append(g.GRPCOptions(), grpc.MaxRecvMsgSize(64<<20), grpc.ForceServerCodecV2(countingCodec{serverCodec(), &decoded}))
	gs := grpc.NewServer(opts...)
	robinhoodv1.RegisterBackendServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(func() { gs.Stop(); model.Close() })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := robinhoodv1.NewBackendServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := make([]uint64, MaxBatchKeys)
	for _, md := range []metadata.MD{nil, metadata.Pairs("authorization", "Bearer "+strings.Repeat("x", 32))} {
		_, err := client.Purge(metadata.NewOutgoingContext(ctx, md), &robinhoodv1.PurgeRequest{BatchIds: ids})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("purge with %v: %v, want UNAUTHENTICATED", md, err)
		}
	}
	if n := decoded.Load(); n != 0 {
		t.Fatalf("%d refused messages were decoded", n)
	}
	ok := metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+strings.Repeat("k", 32)))
	if _, err := client.Purge(ok, &robinhoodv1.PurgeRequest{BatchIds: []uint64{1}}); err != nil || decoded.Load() != 1 {
		t.Fatalf("app0's purge: %v, %d decoded", err, decoded.Load())
	}
}

// A purge reaches the queries purge_delay_ms after it arrives: one whose
// caller gives up sooner purges nothing, and the limit can be lifted at run
// time (the admin API's update) for the next purge to act at once.
func TestAPurgeTakesPurgeDelayToActAndMayArriveTooLate(t *testing.T) {
	f := start(t, "b", memStore(t, "b"), capacity.Limits{Workers: 1, ExtraLatencyMs: 60_000, PurgeDelayMs: 60_000})
	reg := f.srv.Registry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := busyAndQueued(t, ctx, f, 1, 2)

	short, stop := context.WithCancel(auth.WithCaller(ctx, "app0"))
	stop() // the caller gives up before the purge could arrive
	if _, err := f.srv.Purge(short, &robinhoodv1.PurgeRequest{BatchIds: []uint64{1, 2}}); status.Code(err) != codes.Canceled {
		t.Fatalf("a purge given up before its delay: %v, want CANCELLED", err)
	}
	if q, s := metric(t, reg, "backend_queue_length"), metric(t, reg, "backend_in_service"); q != 1 || s != 1 {
		t.Fatalf("queue %v, in service %v after a purge that did not arrive; want 1, 1", q, s)
	}
	if _, err := f.srv.UpdateLimits(capacity.NewPatch(map[string]float64{capacity.FieldPurgeDelayMs: 0}), "test"); err != nil {
		t.Fatal(err)
	}
	pr, err := f.srv.Purge(auth.WithCaller(ctx, "app0"), &robinhoodv1.PurgeRequest{BatchIds: []uint64{1, 2}})
	if err != nil || pr.Dequeued != 1 || pr.Stopped != 1 {
		t.Fatalf("purge = %v, %v; want 1 dequeued, 1 stopped", pr, err)
	}
	for range 2 {
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Fatalf("purged batch: %v, want CANCELLED", err)
		}
	}
}
