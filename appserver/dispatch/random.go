package dispatch

import (
	"context"
	"math/rand/v2"

	"google.golang.org/grpc"

	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// Random sends each batch to one replica chosen uniformly at random among
// those in rotation: the default, and the paper's setting (one replica per
// backend there).
const Random = "random"

func init() {
	Register(Random, Factory{
		Summary: "each batch to one replica chosen uniformly at random",
		New: func(_ any, rs *Replicas) (Dispatcher, error) {
			return &random{rs: rs}, nil
		},
	})
}

type random struct{ rs *Replicas }

func (d *random) Get(ctx context.Context, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	i := 0
	if d.rs.Len() > 1 {
		var buf [8]int
		in := d.rs.InRotation(buf[:0])
		i = in[rand.IntN(len(in))]
	}
	return d.rs.Call(ctx, i, req, opts...)
}
