package load

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/backends/kv"
	"github.com/robinhoodcache/robinhood/backends/server"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

func TestSummarizeNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p := Summarize(d)
	want := Percentiles{N: 100, Mean: 50500 * time.Microsecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if p != want {
		t.Fatalf("Summarize = %+v, want %+v", p, want)
	}
	if one := Summarize([]time.Duration{7}); one.P50 != 7 || one.P99 != 7 || one.Max != 7 {
		t.Fatalf("single sample: %+v", one)
	}
	if (Summarize(nil) != Percentiles{}) {
		t.Fatal("empty sample is not zero")
	}
}

func TestValidate(t *testing.T) {
	good := Config{Rate: 10, Batch: 1, Duration: time.Second, Keys: 1, Size: 0, Timeout: time.Second, MaxInFlight: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*Config){
		func(c *Config) { c.Rate = 0 },
		func(c *Config) { c.Batch = 0 },
		func(c *Config) { c.Duration = 0 },
		func(c *Config) { c.Warmup = -1 },
		func(c *Config) { c.Keys = 0 },
		func(c *Config) { c.Size = -1 },
		func(c *Config) { c.Timeout = 0 },
		func(c *Config) { c.MaxInFlight = 0 },
	} {
		c := good
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestRunCountsEveryScheduledCall(t *testing.T) {
	model, _ := capacity.New(capacity.Limits{Workers: 4}, 1, nil)
	store, _ := kv.NewMemory("ratings", 1<<20)
	srv, err := server.New(server.Options{Name: "ratings", Store: store, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	robinhoodv1.RegisterBackendServiceServer(g, srv)
	go g.Serve(lis)
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// Evenly spaced calls: 50 calls/s for 400 ms is exactly 20 calls in the
	// measured period, however late the sender runs.
	cfg := Config{Rate: 150, Batch: 3, Warmup: 100 * time.Millisecond, Duration: 400 * time.Millisecond,
		Keys: 10, Size: 32, Timeout: 10 * time.Second, MaxInFlight: 100, Verify: "ratings"}
	res, err := Run(context.Background(), robinhoodv1.NewBackendServiceClient(conn), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 20 || res.OK != 20 || res.Failed != 0 || res.Dropped != 0 || res.Mismatches != 0 {
		t.Fatalf("result %+v, want 20 calls all ok", res)
	}
	if res.Offered != 150 || res.Latency.N != 20 || res.Served <= 0 {
		t.Fatalf("offered %v served %v latency n %d", res.Offered, res.Served, res.Latency.N)
	}
	// A wrong backend name fails verification.
	cfg.Verify = "other"
	if res, err := Run(context.Background(), robinhoodv1.NewBackendServiceClient(conn), cfg); err == nil || res.Mismatches == 0 {
		t.Fatalf("verification against the wrong name passed: %v", err)
	}
}
