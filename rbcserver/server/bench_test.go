package server

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// BenchmarkIngest streams 1000-record batches from 16 concurrent
// connections into a server over loopback TCP (client and server in this
// process) and reports records per second.
func BenchmarkIngest(b *testing.B) {
	const streams, size = 16, 1000
	h := start(b, nil)
	defer h.stop()
	r := rand.New(rand.NewPCG(1, 2))
	batches := make([]*robinhoodv1.ReportRequest, 64)
	for i := range batches {
		batches[i] = randomBatch(r, size, 8)
	}
	clients := make([]robinhoodv1.RBCServiceClient, streams)
	for i := range clients {
		conn, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		clients[i] = robinhoodv1.NewRBCServiceClient(conn)
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range streams {
		n := b.N / streams
		if i < b.N%streams {
			n++
		}
		wg.Go(func() {
			stream, err := clients[i].Report(context.Background())
			if err != nil {
				b.Error(err)
				return
			}
			for j := range n {
				if err := stream.Send(batches[(i+j)%len(batches)]); err != nil {
					break
				}
			}
			if _, err := stream.CloseAndRecv(); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkGetRBC1M answers GetRBC over gRPC on a full ring of one million
// records: copy out under the lock, select, count, respond.
func BenchmarkGetRBC1M(b *testing.B) {
	h := start(b, nil)
	defer h.stop()
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		bt := randomBatch(r, 10_000, 16)
		h.srv.ring.Append(0, bt.LatencyUs, bt.BlockingBackend)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		resp, err := h.client.GetRBC(ctx, &robinhoodv1.GetRBCRequest{})
		if err != nil || resp.GetWindowRequests() != 1_000_000 {
			b.Fatalf("GetRBC: %v, %v", resp.GetWindowRequests(), err)
		}
	}
}
