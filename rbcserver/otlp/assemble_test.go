package otlp

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/fanout/fanouttest"
)

func span(trace, id, parent string, kind Kind, svc string, start, end uint64, attrs map[string]string) Span {
	return Span{TraceID: trace, SpanID: id, ParentID: parent, Kind: kind, Service: svc, StartNs: start, EndNs: end,
		Attr: func(k string) string { return attrs[k] }}
}

func TestAssembler(t *testing.T) {
	now := time.Unix(100, 0)
	a := New(Config{Backends: map[string]uint32{"db": 3, "kv": 4}, MaxBackends: 8})
	// Queries in one export, their request in the next.
	out := a.Add([]Span{
		span("t1", "q1", "r1", KindClient, "web", 0, 5_000, map[string]string{"peer.service": "db"}),
		span("t1", "q2", "r1", KindClient, "web", 0, 9_000, map[string]string{"server.address": "kv"}),
	}, now)
	if len(out) != 0 || a.Pending() != 2 {
		t.Fatalf("out %v pending %d", out, a.Pending())
	}
	out = a.Add([]Span{span("t1", "r1", "", KindServer, "web", 0, 12_000, nil)}, now)
	if len(out) != 1 || out[0] != (Record{LatencyUs: 12, Backend: 4}) || a.Pending() != 0 {
		t.Fatalf("out %v pending %d", out, a.Pending())
	}
	// A named backend that is unknown is not looked up under the next key.
	out = a.Add([]Span{
		span("t2", "q1", "r2", KindClient, "web", 0, 9_000, map[string]string{"peer.service": "cache", "server.address": "db"}),
		span("t2", "q2", "r2", KindClient, "web", 0, 1_000, map[string]string{"peer.service": "7"}),
		span("t2", "r2", "", KindServer, "web", 0, 10_000, nil),
	}, now)
	if len(out) != 0 || a.Counts.Unattributed != 1 || a.Counts.UnknownBackend != 1 {
		t.Fatalf("out %v counts %+v", out, a.Counts)
	}
	// A decimal id below MaxBackends is an id; above it, unknown.
	out = a.Add([]Span{
		span("t3", "q1", "r3", KindClient, "web", 0, 9_000, map[string]string{"peer.service": "7"}),
		span("t3", "r3", "", KindServer, "web", 0, 10_000, nil),
		span("t4", "q1", "r4", KindClient, "web", 0, 9_000, map[string]string{"peer.service": "8"}),
		span("t4", "r4", "", KindServer, "web", 0, 10_000, nil),
	}, now)
	if len(out) != 1 || out[0].Backend != 7 || a.Counts.Unattributed != 2 {
		t.Fatalf("out %v counts %+v", out, a.Counts)
	}
	// Orphans expire after PendingTTL.
	a.Add([]Span{span("t5", "q1", "gone", KindClient, "web", 0, 1, map[string]string{"peer.service": "db"})}, now)
	a.Add(nil, now.Add(31*time.Second))
	if a.Pending() != 0 || a.Counts.Orphans != 1 {
		t.Fatalf("pending %d counts %+v", a.Pending(), a.Counts)
	}
}

func TestServiceModeAndBounds(t *testing.T) {
	now := time.Unix(100, 0)
	a := New(Config{Mode: ModeService, Service: "api", Backends: map[string]uint32{"db": 0}, MaxBackends: 4, PendingMax: 2})
	out := a.Add([]Span{
		span("t", "q", "s", KindClient, "api", 0, 2_000, map[string]string{"peer.service": "db"}),
		span("t", "s", "gateway", KindServer, "api", 0, 3_000, nil), // not a root, but of the service
		span("u", "x", "", KindServer, "gateway", 0, 3_000, nil),    // another service's server span
	}, now)
	if len(out) != 1 || out[0] != (Record{LatencyUs: 3, Backend: 0}) || a.Counts.NotRequest != 1 {
		t.Fatalf("out %v counts %+v", out, a.Counts)
	}
	for i := range 3 {
		a.Add([]Span{span("v", "q", string(rune('a'+i)), KindClient, "api", 0, 1, nil)}, now)
	}
	if a.Pending() != 2 || a.Counts.Orphans != 1 {
		t.Fatalf("pending %d counts %+v", a.Pending(), a.Counts)
	}
	if _, _, err := ParseRequestMode("service:"); err == nil {
		t.Fatal("service: without a name accepted")
	}
	if m, s, err := ParseRequestMode("service:api"); err != nil || m != ModeService || s != "api" {
		t.Fatal(m, s, err)
	}
	for flag, want := range map[string]Mode{"server": ModeServer, "root": ModeRoot} {
		if m, _, err := ParseRequestMode(flag); err != nil || m != want || (Config{Mode: m}).ModeString() != flag {
			t.Fatal(flag, m, err)
		}
	}
}

// TestBlockingVectors runs the shared blocking-backend cases
// (tests/vectors/blocking.json): each case's calls become one request's
// query spans, exported in the case's order and then reversed (the
// answer must not depend on the order spans arrive in). A case without
// queries makes no record.
func TestBlockingVectors(t *testing.T) {
	now := time.Unix(100, 0)
	for _, c := range fanouttest.Load(t) {
		for _, reversed := range []bool{false, true} {
			a := New(Config{MaxBackends: 1 << 20})
			var spans []Span
			for i, q := range c.Calls {
				if q.Empty {
					continue // a batch without queries makes no span
				}
				end := uint64(0)
				if q.End != nil {
					end = uint64(*q.End)
				}
				s := span("t", fmt.Sprintf("q%d", i), "r", KindClient, "web", 0, end,
					map[string]string{"peer.service": strconv.Itoa(q.Backend)})
				s.Failed = q.Failed
				spans = append(spans, s)
			}
			if reversed {
				slices.Reverse(spans)
			}
			out := a.Add(append(spans, span("t", "r", "", KindServer, "web", 0, 2_000, nil)), now)
			switch {
			case c.Expect.Blocking == nil && len(out) != 0:
				t.Errorf("%s: recorded %v, want no record", c.Name, out)
			case c.Expect.Blocking != nil && (len(out) != 1 || out[0].Backend != uint32(*c.Expect.Blocking)):
				t.Errorf("%s (reversed %v): got %v, want backend %d (%s)", c.Name, reversed, out, *c.Expect.Blocking, c.Description)
			}
		}
	}
}
