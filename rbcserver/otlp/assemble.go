// Package otlp turns OpenTelemetry traces into RBC records
// (docs/opentelemetry.md): a request is a server span, its latency the
// span's duration, its queries its client child spans, each mapped to a
// backend by an attribute, and its blocking backend named by the project's
// one rule (lib/fanout.Blocking: the query that ended last, a failed query
// before any that succeeded, ties to the smaller backend id). The Assembler
// is the pure core; the RBC server's OTLP/gRPC TraceService feeds it.
package otlp

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/robinhoodcache/robinhood/lib/fanout"
)

// Span is what the assembler needs of one span.
type Span struct {
	TraceID, SpanID, ParentID string // hex or raw bytes, compared as given
	Kind                      Kind
	Service                   string // the resource's service.name
	StartNs, EndNs            uint64 // EndNs 0: the span has no end
	// Failed is a span whose status is ERROR: for a query, its backend
	// failed the request.
	Failed bool
	// Attr returns the span's string attribute (resource attributes are not
	// consulted), "" when absent.
	Attr func(key string) string
}

// Kind is a span kind (the OTLP values that matter here).
type Kind int

const (
	KindOther Kind = iota
	KindServer
	KindClient
)

// Mode says which server spans are requests (--otlp-request).
type Mode int

const (
	// ModeServer: every server span is a request, whether or not it has a
	// parent (a gateway or ingress propagating a traceparent makes the
	// application's server span a child). The default.
	ModeServer Mode = iota
	// ModeRoot: only a server span that is the root of its trace.
	ModeRoot
	// ModeService: every server span of one service (Config.Service).
	ModeService
)

// Config says which spans are requests and how queries name backends.
type Config struct {
	// Mode says which server spans are requests; Service is the service of
	// ModeService.
	Mode    Mode
	Service string
	// BackendAttrs are the attribute keys naming a query's backend, tried in
	// order (default peer.service, server.address).
	BackendAttrs []string
	// Backends maps backend names to ids (the topology's). A name that is
	// not in it but is a decimal integer below MaxBackends is taken as an id.
	Backends    map[string]uint32
	MaxBackends int
	// PendingTTL is how long a query span waits for its request span
	// (default 30 s); PendingMax bounds the waiting spans (default 100,000).
	PendingTTL time.Duration
	PendingMax int
}

// ParseRequestMode reads the --otlp-request flag: "server", "root" or
// "service:NAME".
func ParseRequestMode(s string) (mode Mode, service string, err error) {
	switch {
	case s == "server":
		return ModeServer, "", nil
	case s == "root":
		return ModeRoot, "", nil
	case strings.HasPrefix(s, "service:") && len(s) > len("service:"):
		return ModeService, strings.TrimPrefix(s, "service:"), nil
	}
	return 0, "", fmt.Errorf("--otlp-request %q: want server, root or service:NAME", s)
}

// ModeString is the mode as --otlp-request spells it.
func (c Config) ModeString() string {
	switch c.Mode {
	case ModeRoot:
		return "root"
	case ModeService:
		return "service:" + c.Service
	}
	return "server"
}

// Record is one request for the RBC ring.
type Record struct {
	LatencyUs uint32
	Backend   uint32
}

// Counts are the assembler's outcomes since it started, by kind; the
// values of the outcome label of rbcserver_otlp_spans_total.
type Counts struct {
	Requests       uint64 // request spans turned into records
	Queries        uint64 // query spans used
	UnknownBackend uint64 // query spans without a known backend
	Unattributed   uint64 // requests whose last query had no known backend (not recorded)
	NoQueries      uint64 // request spans without any query span seen (not recorded)
	Orphans        uint64 // query spans whose request never came (expired or over PendingMax)
	// NotRequest are server spans the mode does not take as requests (root
	// mode: a server span with a parent; service mode: another service's).
	NotRequest uint64
	Other      uint64 // spans that are neither
}

type pendingQuery struct {
	endNs   uint64
	backend int64 // -1: unknown
	failed  bool
	arrived time.Time
}

// Assembler joins query spans to their request spans. Not safe for
// concurrent use.
type Assembler struct {
	cfg     Config
	pending map[string][]pendingQuery // trace id + parent span id → its queries
	npend   int
	expired time.Time // last expiry pass
	Counts  Counts
}

// New returns an assembler for cfg.
func New(cfg Config) *Assembler {
	if len(cfg.BackendAttrs) == 0 {
		cfg.BackendAttrs = []string{"peer.service", "server.address"}
	}
	if cfg.PendingTTL <= 0 {
		cfg.PendingTTL = 30 * time.Second
	}
	if cfg.PendingMax <= 0 {
		cfg.PendingMax = 100_000
	}
	return &Assembler{cfg: cfg, pending: map[string][]pendingQuery{}}
}

func (a *Assembler) isRequest(s *Span) bool {
	if s.Kind != KindServer {
		return false
	}
	switch a.cfg.Mode {
	case ModeService:
		return s.Service == a.cfg.Service
	case ModeRoot:
		return s.ParentID == ""
	}
	return true
}

// backendOf maps a query span to a backend id, or -1.
func (a *Assembler) backendOf(s *Span) int64 {
	for _, k := range a.cfg.BackendAttrs {
		v := s.Attr(k)
		if v == "" {
			continue
		}
		if id, ok := a.cfg.Backends[v]; ok {
			return int64(id)
		}
		if n, err := strconv.ParseUint(v, 10, 32); err == nil && int(n) < a.cfg.MaxBackends {
			return int64(n)
		}
		return -1 // named, but not a backend we know: never guessed from the next key
	}
	return -1
}

// Add takes one batch of spans (one Export) at now and returns the
// requests it completed. Query spans are held until their request span
// comes (they end first, so usually they come in the same or an earlier
// batch).
func (a *Assembler) Add(spans []Span, now time.Time) []Record {
	var out []Record
	// Queries first, so that a request in the same batch finds them.
	for i := range spans {
		s := &spans[i]
		if s.Kind != KindClient || s.ParentID == "" || a.isRequest(s) {
			continue
		}
		if a.npend >= a.cfg.PendingMax {
			a.Counts.Orphans++
			continue
		}
		k := s.TraceID + "/" + s.ParentID
		a.pending[k] = append(a.pending[k], pendingQuery{endNs: s.EndNs, backend: a.backendOf(s), failed: s.Failed, arrived: now})
		a.npend++
	}
	for i := range spans {
		s := &spans[i]
		switch {
		case a.isRequest(s):
			k := s.TraceID + "/" + s.SpanID
			qs := a.pending[k]
			delete(a.pending, k)
			a.npend -= len(qs)
			if len(qs) == 0 {
				a.Counts.NoQueries++
				continue
			}
			last := qs[blocking(qs)]
			for _, q := range qs {
				if q.backend < 0 {
					a.Counts.UnknownBackend++
				} else {
					a.Counts.Queries++
				}
			}
			if last.backend < 0 {
				a.Counts.Unattributed++
				continue
			}
			us := uint64(0)
			if s.EndNs > s.StartNs {
				us = (s.EndNs - s.StartNs) / 1000
			}
			a.Counts.Requests++
			out = append(out, Record{LatencyUs: uint32(min(us, 1<<32-1)), Backend: uint32(last.backend)})
		case s.Kind == KindClient && s.ParentID != "":
			// held above
		case s.Kind == KindServer:
			a.Counts.NotRequest++
		default:
			a.Counts.Other++
		}
	}
	a.expire(now)
	return out
}

// blocking applies lib/fanout's rule to a request's queries and returns
// the blocker's index. A query of an unknown backend ranks as the largest
// id in a tie, so a known backend is preferred at an equal end.
func blocking(qs []pendingQuery) int {
	var small [16]fanout.Call[uint64]
	calls := small[:0]
	for _, q := range qs {
		b := int(q.backend)
		if q.backend < 0 {
			b = math.MaxInt
		}
		calls = append(calls, fanout.Call[uint64]{Backend: b, Done: q.endNs, NoEnd: q.endNs == 0, Failed: q.failed})
	}
	i, _ := fanout.Blocking(calls)
	return i
}

// Sub is c minus an earlier snapshot of the same counts.
func (c Counts) Sub(earlier Counts) Counts {
	return Counts{
		Requests: c.Requests - earlier.Requests, Queries: c.Queries - earlier.Queries,
		UnknownBackend: c.UnknownBackend - earlier.UnknownBackend, Unattributed: c.Unattributed - earlier.Unattributed,
		NoQueries: c.NoQueries - earlier.NoQueries, Orphans: c.Orphans - earlier.Orphans,
		NotRequest: c.NotRequest - earlier.NotRequest, Other: c.Other - earlier.Other,
	}
}

// Config is the assembler's configuration, its defaults filled in.
func (a *Assembler) Config() Config { return a.cfg }

// expire drops query spans that waited longer than PendingTTL.
func (a *Assembler) expire(now time.Time) {
	if now.Sub(a.expired) < time.Second {
		return
	}
	a.expired = now
	for k, qs := range a.pending {
		if now.Sub(qs[0].arrived) > a.cfg.PendingTTL {
			a.Counts.Orphans += uint64(len(qs))
			a.npend -= len(qs)
			delete(a.pending, k)
		}
	}
}

// Pending is the number of query spans waiting for their request.
func (a *Assembler) Pending() int { return a.npend }
