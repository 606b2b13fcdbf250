package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The policy-server protocol's shared vectors (tests/vectors/policy_server.json,
// format in tests/vectors/README.md): a real exchange with the Python server.
// The Python side replays it in controller/tests/test_policy_server.py.

const policyVectorDir = "../tests/vectors"

type policyExchange struct {
	Request json.RawMessage `json:"request"`
	Answer  json.RawMessage `json:"answer"`
}

func loadPolicyVector(t *testing.T) []policyExchange {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(policyVectorDir, "policy_server.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Schema      string           `json:"schema"`
		Description string           `json:"description"`
		Exchange    []policyExchange `json:"exchange"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Schema != "robinhood-policy-server/v1" || len(v.Exchange) == 0 {
		t.Fatalf("schema %q, %d exchanges", v.Schema, len(v.Exchange))
	}
	return v.Exchange
}

// policyMessages is the request message of an op and its answer message.
func policyMessages(t *testing.T, request json.RawMessage) (req, answer proto.Message) {
	t.Helper()
	var head struct {
		Op string `json:"op"`
	}
	if err := json.Unmarshal(request, &head); err != nil {
		t.Fatal(err)
	}
	switch head.Op {
	case "open":
		return &pb.PolicyOpenRequest{}, &pb.PolicyOpenAnswer{}
	case "tick":
		return &pb.PolicyTickRequest{}, &pb.PolicyTickAnswer{}
	case "close":
		return &pb.PolicyCloseRequest{}, &pb.PolicyCloseAnswer{}
	}
	t.Fatalf("unknown op %q in %s", head.Op, request)
	return nil, nil
}

// decodeVectorAnswer reads an answer of the vector strictly: the op's
// answer, or the error answer when "ok" is false.
func decodeVectorAnswer(t *testing.T, raw json.RawMessage, answer proto.Message) proto.Message {
	t.Helper()
	err := DecodeAnswer(raw, answer)
	var refused *RefusedError
	if errors.As(err, &refused) {
		e := &pb.PolicyErrorAnswer{}
		if err := protojson.Unmarshal(raw, e); err != nil {
			t.Fatalf("error answer %s: %v", raw, err)
		}
		if e.Error != refused.Msg || e.Error == "" {
			t.Fatalf("error answer %s: refused %q", raw, refused.Msg)
		}
		return e
	}
	if err != nil {
		t.Fatalf("answer %s: %v", raw, err)
	}
	return answer
}

// reencoded is m written by EncodeLine and read back into a new message.
func reencoded(t *testing.T, m proto.Message) proto.Message {
	t.Helper()
	line, err := EncodeLine(m)
	if err != nil {
		t.Fatal(err)
	}
	back := m.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(line, back); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return back
}

// TestPolicyVectorRoundTrip decodes every request and answer of the vector
// into the generated types, refusing unknown fields (a field renamed on one
// side fails here), and checks that what EncodeLine writes decodes to the
// same messages.
func TestPolicyVectorRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for i, ex := range loadPolicyVector(t) {
		req, answer := policyMessages(t, ex.Request)
		if err := protojson.Unmarshal(ex.Request, req); err != nil {
			t.Fatalf("exchange %d: request %s: %v", i, ex.Request, err)
		}
		answer = decodeVectorAnswer(t, ex.Answer, answer)
		for _, m := range []proto.Message{req, answer} {
			if back := reencoded(t, m); !proto.Equal(back, m) {
				t.Errorf("exchange %d: %v encodes and decodes as %v", i, m, back)
			}
		}
		seen[string(req.ProtoReflect().Descriptor().Name())] = true
		seen[string(answer.ProtoReflect().Descriptor().Name())] = true
	}
	for _, name := range []string{"PolicyOpenRequest", "PolicyOpenAnswer", "PolicyTickRequest", "PolicyTickAnswer",
		"PolicyCloseRequest", "PolicyCloseAnswer", "PolicyErrorAnswer"} {
		if !seen[name] {
			t.Errorf("the vector has no %s", name)
		}
	}
}

// TestPolicyVectorFieldValues builds the vector's open and first tick as the
// simulator does, with the generated types, and checks they are the
// vector's requests, field by field (the vector writes integers bare, as
// Python does, and a 64-bit one beyond a double's precision quoted).
func TestPolicyVectorFieldValues(t *testing.T) {
	ex := loadPolicyVector(t)
	const mib = 1 << 20
	ratio := func(r float64) *float64 { return &r }
	sample := func(mb, evictions, hits, misses uint64, r float64) *pb.PolicyPartitionSample {
		return &pb.PolicyPartitionSample{LimitBytes: mb * mib, MallocedBytes: mb * mib, ItemBytes: mb * mib * 7 / 8,
			Items: mb * 1000, Evictions: evictions, GetHits: hits, GetMisses: misses, HitRatio: ratio(r)}
	}
	want := []proto.Message{
		&pb.PolicyOpenRequest{Op: "open", Topology: "policy_server_topology.yaml", AppServer: "app0"},
		&pb.PolicyTickRequest{Op: "tick", AppServer: "app0", Now: 1_000_000_000.25,
			Partitions: map[string]*pb.PolicyPartitionSample{
				"catalog":     sample(64, 12, 7_000_000_000, 1_000_000_000, 0.875),
				"ratings":     sample(64, 40, 300, 700, 0.3),
				"recommender": sample(64, 0, 500, 500, 0.5),
			},
			Rbc: &pb.PolicyRBCSnapshot{Counts: map[string]uint64{"catalog": 1, "ratings": 7}, WindowRequests: 10000,
				BandRequests: 100, P99LatencyUs: 250000},
			Stats: map[string]*pb.PolicyQueryStats{
				"catalog": {Hits: 8000, Misses: 1000, ShadowHits: 50, ShadowBytes: 1 << 30, Queries: 9000,
					P50QueryLatencyUs: 900, P99QueryLatencyUs: 4000, LimitBytes: 64 * mib},
				"ratings": {Hits: 300, Misses: 700, Queries: 1000, P50QueryLatencyUs: 20000,
					P99QueryLatencyUs: 240000, LimitBytes: 64 * mib},
			},
			// 2^53+1 is not exact as a double: written as a string.
			Local: map[string]*pb.PolicyQueryStats{
				"catalog": {Hits: 4000, Misses: 500, ShadowBytes: 1<<53 + 1, Queries: 4500, LimitBytes: 64 * mib}},
		},
	}
	for i, w := range want {
		got := w.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal(ex[i].Request, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, w) {
			t.Errorf("exchange %d: the vector's request is\n%v\nthe simulator's\n%v", i, got, w)
		}
		if back := reencoded(t, w); !proto.Equal(back, w) {
			t.Errorf("exchange %d: the simulator's request does not survive its own encoding: %v", i, back)
		}
	}
}

// venvController is .venv's robinhood-controller; the test is skipped
// without it.
func venvController(t *testing.T) string {
	t.Helper()
	ctl, err := filepath.Abs("../.venv/bin/robinhood-controller")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ctl); err != nil {
		t.Skipf("no policy server (%v): run `make venv`", err)
	}
	return ctl
}

// TestPolicyVectorWithThePolicyServer replays the vector through PolicyServer
// against the real `robinhood-controller policy-server` (from .venv; the
// test is skipped without it) and checks its answers are the vector's.
func TestPolicyVectorWithThePolicyServer(t *testing.T) {
	ctl := venvController(t)
	// The vector's topology path is relative to its folder.
	ps, err := StartPolicyServer([]string{"sh", "-c", `cd "$0" && exec "$1" "$2"`, policyVectorDir, ctl})
	if err != nil {
		t.Fatal(err)
	}
	replayPolicyVector(t, ps)
}

// TestPolicyVectorWithAListeningPolicyServer replays the vector on two
// sessions open at once on one `robinhood-controller policy-server --listen`
// (DialPolicyServer): each is answered as a process of its own is.
func TestPolicyVectorWithAListeningPolicyServer(t *testing.T) {
	ctl := venvController(t)
	sock := filepath.Join(t.TempDir(), "p.sock")
	cmd := exec.Command(ctl, "policy-server", "--listen", sock, "--log-level", "warning")
	cmd.Dir = policyVectorDir // the vector's topology path is relative to its folder
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() error {
		stopped = true
		stdin.Close() // the end of its stdin stops it
		return cmd.Wait()
	}
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "listening "+sock+"\n" {
		t.Fatalf("the server's first line: %q, %v", line, err)
	}
	// two sessions open at once, each its own process
	var sessions []*PolicyServer
	for range 2 {
		ps, err := DialPolicyServer(sock)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, ps)
	}
	for _, ps := range sessions {
		replayPolicyVector(t, ps)
	}
	if err := stop(); err != nil {
		t.Fatalf("the server's exit: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket outlives the server: %v", err)
	}
	if _, err := DialPolicyServer(sock); err == nil || !strings.Contains(err.Error(), "policy-server --listen "+sock) {
		t.Errorf("a session without a server: %v", err)
	}
}

// replayPolicyVector plays the vector's requests on ps and checks its
// answers are the vector's; it closes ps.
func replayPolicyVector(t *testing.T, ps *PolicyServer) {
	t.Helper()
	var err error
	defer func() {
		if ps != nil {
			_ = ps.Close()
		}
	}()
	for i, ex := range loadPolicyVector(t) {
		req, answer := policyMessages(t, ex.Request)
		if err := protojson.Unmarshal(ex.Request, req); err != nil {
			t.Fatal(err)
		}
		want := decodeVectorAnswer(t, ex.Answer, answer)
		var got proto.Message
		switch r := req.(type) {
		case *pb.PolicyOpenRequest:
			got, err = ps.Open(r.Topology, r.AppServer, r.GetTimeline())
		case *pb.PolicyTickRequest:
			got, err = ps.Tick(r)
		case *pb.PolicyCloseRequest:
			err = ps.Close()
			ps = nil
			got = &pb.PolicyCloseAnswer{Ok: true}
		}
		if e, ok := want.(*pb.PolicyErrorAnswer); ok {
			if err == nil || !strings.HasSuffix(err.Error(), ": "+e.Error) {
				t.Errorf("exchange %d: want the error %q, got %v", i, e.Error, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("exchange %d: %v", i, err)
			return
		}
		if !proto.Equal(got, want) {
			t.Errorf("exchange %d: answer\n%v\nthe vector has\n%v", i, got, want)
		}
	}
}

// TestPolicyDecodeAnswer: answers with "ok" false are refusals; unknown
// fields and wrong types are errors; null and absent fields are unset.
func TestPolicyDecodeAnswer(t *testing.T) {
	var a pb.PolicyTickAnswer
	err := DecodeAnswer([]byte(`{"ok":false,"error":"now: \"x\" is not a number"}`), &a)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Msg != `now: "x" is not a number` {
		t.Fatalf("refusal: %v", err)
	}
	if err := DecodeAnswer([]byte(`{"ok":true,"tick":1,"target":{}}`), &a); err == nil || errors.As(err, &refused) {
		t.Errorf("unknown field: %v", err)
	}
	if err := DecodeAnswer([]byte(`{"ok":true,"tick":"one"}`), &a); err == nil {
		t.Error("a string tick decoded")
	}
	if err := DecodeAnswer([]byte(`{"ok":true,"tick":2,"targets":null,"limits_mb":{"a":"3"},"notes":null}`), &a); err != nil ||
		a.Tick != 2 || len(a.Targets) != 0 || a.LimitsMb["a"] != 3 {
		t.Errorf("nulls and a quoted integer: %v %v", err, &a)
	}
}

// TestEncodeLineWritesZeroValues: a partition whose memcached holds nothing
// yet still sends every field, which the server requires (proto3 JSON would
// otherwise leave zeros out); an unset message is null.
func TestEncodeLineWritesZeroValues(t *testing.T) {
	line, err := EncodeLine(&pb.PolicyTickRequest{Op: "tick", AppServer: "app0",
		Partitions: map[string]*pb.PolicyPartitionSample{"a": {}}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Now        *float64                  `json:"now"`
		RBC        json.RawMessage           `json:"rbc"`
		Partitions map[string]map[string]any `json:"partitions"`
	}
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"limit_bytes", "malloced_bytes", "item_bytes"} {
		if _, ok := got.Partitions["a"][k]; !ok {
			t.Errorf("%s left out of %s", k, line)
		}
	}
	if got.Now == nil || string(got.RBC) != "null" {
		t.Errorf("now or rbc: %s", line)
	}
}
