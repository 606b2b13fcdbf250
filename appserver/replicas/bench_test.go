package replicas

import (
	"context"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/appserver/internal/testbackend"
	"github.com/robinhoodcache/robinhood/lib/config"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// BenchmarkGetRandom is one batch of one key through the random policy to
// one of two in-process loopback backends: the driver's cost on top of the
// gRPC call (docs/benchmarks.md):
//
//	go test -run '^$' -bench GetRandom -benchmem -count 5 ./appserver/replicas/
func BenchmarkGetRandom(b *testing.B) {
	x, y := testbackend.Start(b, "ratings"), testbackend.Start(b, "ratings")
	rs, err := Dial(config.Backend{Name: "ratings", Replicas: []config.Replica{{GRPC: x.Addr}, {GRPC: y.Addr}}})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	rs.AttemptTimeout = time.Second // as the app server sets backend_timeout
	d, err := Build(config.Dispatch{Policy: "random"}, rs)
	if err != nil {
		b.Fatal(err)
	}
	req := &pb.GetRequest{Keys: []string{"k"}, Sizes: []uint32{100}}
	ctx := context.Background()
	for range 100 { // connect both
		if _, err := d.Get(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := d.Get(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
