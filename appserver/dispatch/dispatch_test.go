package dispatch

import (
	"context"
	"strings"
	"testing"

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

func TestDialNeedsReplicas(t *testing.T) {
	if _, err := Dial(config.Backend{Name: "x"}); err == nil {
		t.Fatal("Dial accepted a backend without replicas")
	}
}
