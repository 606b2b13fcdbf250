package main

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/testutil"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc"
	"github.com/robinhoodcache/robinhood/rbcserver/rbc/rbctest"
)

func TestParseFlagsRejectsBadValues(t *testing.T) {
	cases := map[string][]string{
		"--streams 0 is outside [1, 10000]":       {"--streams", "0"},
		"--rate -5 must be ≥ 0":                   {"--rate", "-5"},
		"--duration 0s must be positive":          {"--duration", "0s"},
		"--backends 0 is outside [1, 65536]":      {"--backends", "0"},
		"--batch 0 is outside [1, 1000000]":       {"--batch", "0"},
		"--query-every -1s must be ≥ 0":           {"--query-every", "-1s"},
		`unexpected arguments ["x"]`:              {"x"},
		"--backends 70000 is outside [1, 65536]":  {"--backends", "70000"},
		"--batch 2000000 is outside [1, 1000000]": {"--batch", "2000000"},
	}
	for msg, args := range cases {
		_, err := parseFlags(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseFlags(%v) = %v, want %q", args, err, msg)
		}
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.streams != 16 || o.rate != 0 || o.batch != 1000 || o.backends != 8 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
}

func TestSynthesizeIsDeterministicAndMeaningful(t *testing.T) {
	lat1, be1 := synthesize(rand.New(rand.NewPCG(1, 2)), 200_000, 8)
	lat2, be2 := synthesize(rand.New(rand.NewPCG(1, 2)), 200_000, 8)
	if !slices.Equal(lat1, lat2) || !slices.Equal(be1, be2) {
		t.Fatal("the same seed gave different records")
	}
	for i := range lat1 {
		if be1[i] >= 8 || lat1[i] < overheadUs {
			t.Fatalf("record %d: latency %d backend %d out of range", i, lat1[i], be1[i])
		}
	}
	// The heavy-tailed backend 3 must dominate the band, and the slow
	// backend 1 must block the most requests overall: the demo relies on it.
	var c rbc.Calculator
	res, err := c.Compute(lat1, be1, rbctest.PaperBand())
	if err != nil {
		t.Fatal(err)
	}
	top, most := res.Backends[0], res.Backends[0]
	for _, b := range res.Backends {
		if b.Blocking > top.Blocking {
			top = b
		}
		if b.Window > most.Window {
			most = b
		}
	}
	if top.Backend != 3 || float64(top.Blocking) < 0.5*float64(res.Band) {
		t.Errorf("backend %d has the largest RBC (%d of %d); want backend 3 with most of the band", top.Backend, top.Blocking, res.Band)
	}
	if most.Backend != 1 {
		t.Errorf("backend %d blocks the most requests; want the slow backend 1", most.Backend)
	}
	// One backend: everything is blocked by it.
	_, be := synthesize(rand.New(rand.NewPCG(3, 4)), 1000, 1)
	if slices.ContainsFunc(be, func(b uint32) bool { return b != 0 }) {
		t.Fatal("one backend, yet a record blocked by another")
	}
}

var (
	acceptedRE = regexp.MustCompile(`server accepted (\d+): (\d+) records/s`)
	callsRE    = regexp.MustCompile(`GetRBC: (\d+) calls, median [0-9.]+ ms, p95 [0-9.]+ ms`)
	ingestedRE = regexp.MustCompile(`(?m)^rbcserver_records_ingested_total (\S+)$`)
)

func startServer(t *testing.T, extra ...string) (grpcAddr, httpURL string) {
	t.Helper()
	srv := testutil.Binary(t, "./rbcserver/cmd/rbcserver")
	g, h := testutil.FreeAddr(t), testutil.FreeAddr(t)
	testutil.Start(t, srv, append([]string{"--grpc-addr", g, "--http-addr", h}, extra...)...)
	testutil.WaitHTTP(t, "http://"+h+"/healthz")
	return g, "http://" + h
}

func TestLoadAgainstTheRealServer(t *testing.T) {
	g, h := startServer(t)
	load := testutil.Binary(t, "./rbcserver/cmd/rbcload")
	out, err := exec.Command(load, "--addr", g, "--streams", "3", "--rate", "30000", "--duration", "1s",
		"--batch", "500", "--backends", "5", "--query-every", "200ms").CombinedOutput()
	if err != nil {
		t.Fatalf("rbcload: %v\n%s", err, out)
	}
	m := acceptedRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no 'server accepted' line in:\n%s", out)
	}
	accepted, _ := strconv.Atoi(string(m[1]))
	if accepted == 0 || accepted%500 != 0 {
		t.Fatalf("server accepted %d records, want a positive multiple of the batch size\n%s", accepted, out)
	}
	if c := callsRE.FindSubmatch(out); c == nil || string(c[1]) == "0" {
		t.Fatalf("no GetRBC latency line:\n%s", out)
	}
	resp, err := http.Get(h + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	im := ingestedRE.FindSubmatch(body)
	if im == nil {
		t.Fatal("no rbcserver_records_ingested_total")
	}
	ingested, _ := strconv.ParseFloat(string(im[1]), 64)
	if int(ingested) != accepted {
		t.Fatalf("server ingested %v records, rbcload reports %d accepted", ingested, accepted)
	}
}

func TestLoadReportsServerRejection(t *testing.T) {
	g, _ := startServer(t, "--max-backends", "4")
	load := testutil.Binary(t, "./rbcserver/cmd/rbcload")
	out, err := exec.Command(load, "--addr", g, "--streams", "1", "--rate", "1000", "--duration", "500ms",
		"--batch", "100", "--backends", "16").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("rbcload against a server with fewer backends: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "the server refused") || !strings.Contains(string(out), "not below its --max-backends") {
		t.Fatalf("rbcload did not report the server's error:\n%s", out)
	}
}

// rbcload's default load, 16 even streams at full speed, against a server
// with the default --max-app-share: no stream is refused (it used to trip
// the share bound now and then, the streams starting a little apart), and
// every record is accepted; a stream that got ahead at the start is
// thinned, not refused.
func TestFullSpeedEvenStreamsAreNotRefused(t *testing.T) {
	g, h := startServer(t)
	load := testutil.Binary(t, "./rbcserver/cmd/rbcload")
	out, err := exec.Command(load, "--addr", g, "--streams", "16", "--duration", "2s").CombinedOutput()
	if err != nil {
		t.Fatalf("rbcload: %v\n%s", err, out)
	}
	resp, err := http.Get(h + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "rbcserver_app_records_refused_total{") {
		t.Fatalf("records refused:\n%s\n%s", out, body)
	}
}
