package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/robinhoodcache/robinhood/backends/capacity"
	"github.com/robinhoodcache/robinhood/backends/kv"
	"github.com/robinhoodcache/robinhood/backends/server"
	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

func TestRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--arrivals", "bursty"},
		{"--rate", "0"},
		{"--batch", "0"},
		{"--nope"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// serve starts a real backend server named name with limits l on a free
// loopback port, stopped with the test, and returns its address.
func serve(t *testing.T, name string, l capacity.Limits, seed uint64) string {
	t.Helper()
	model, err := capacity.New(l, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, _ := kv.NewMemory(name, 1<<20)
	srv, err := server.New(server.Options{Name: name, Store: store, Model: model})
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
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func TestJSONReportAgainstARealServer(t *testing.T) {
	addr := serve(t, "ratings", capacity.Limits{Workers: 4}, 1)
	var out, errb bytes.Buffer
	code := run([]string{"--addr", addr, "--rate", "200", "--batch", "2", "--duration", "300ms",
		"--warmup", "0s", "--arrivals", "uniform", "--verify", "ratings", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res struct {
		Calls, OK, Mismatches int
		Offered               float64 `json:"offered_qps"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if res.Calls != 29 || res.OK != 29 || res.Mismatches != 0 {
		t.Fatalf("report %s", out.String())
	}
	// The same run against the wrong backend name fails verification.
	out.Reset()
	code = run([]string{"--addr", addr, "--rate", "200", "--batch", "2", "--duration", "100ms",
		"--warmup", "0s", "--verify", "other"}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "mismatched values") {
		t.Fatalf("wrong name: exit %d, output %s", code, out.String())
	}
}

// --measure against a real server whose queries have a fixed cost per key
// and hiccup with probability 0.05 for 40 ms: it finds about that.
func TestMeasureFindsTheInjectedJitter(t *testing.T) {
	addr := serve(t, "b", capacity.Limits{Workers: 1, CostMs: 2, HiccupProb: 0.05, HiccupMs: 40}, 3)
	var out, errb bytes.Buffer
	if code := run([]string{"--addr", addr, "--measure", "--queries", "40", "--repeats", "20", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var m struct {
		P     float64 `json:"mean_service_ms"`
		Prob  float64 `json:"stall_prob"`
		Stall float64 `json:"stall_x"`
	}
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	// P̄ is the keys' mean cost (2 ms) plus the call's overhead.
	if m.P < 1 || m.P > 4 || m.Prob < 0.02 || m.Prob > 0.09 || m.Stall*m.P < 30 || m.Stall*m.P > 50 {
		t.Fatalf("measured P̄ %.2f ms, stalls %.3f of %.1f P̄ (%.1f ms); want about 2 ms, 0.05, 40 ms", m.P, m.Prob, m.Stall, m.Stall*m.P)
	}
	if code := run([]string{"--measure", "--repeats", "1"}, &out, &errb); code != 2 {
		t.Fatalf("--repeats 1: exit %d", code)
	}
}
