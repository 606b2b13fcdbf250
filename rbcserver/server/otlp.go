package server

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/rbcserver/otlp"
)

// OTLP outcomes, the values of the outcome label of rbcserver_otlp_spans_total.
var otlpOutcomes = []string{"request", "query", "unknown_backend", "unattributed", "no_queries", "orphan", "not_request", "other"}

// unusableCheck is how often the share of unusable spans is checked, and
// unusableMin the spans a check needs before it may warn.
const (
	unusableCheck = time.Minute
	unusableMin   = 1000
)

// traceService is the OTLP/gRPC TraceService of the RBC server
// (docs/opentelemetry.md): traces in, RBC records into the ring.
type traceService struct {
	collectortrace.UnimplementedTraceServiceServer
	s     *Server
	mu    sync.Mutex
	asm   *otlp.Assembler
	spans *prometheus.CounterVec
	last  otlp.Counts
	// checked are the counts at the last check of unusable spans, at
	// checkedAt (warnUnusable).
	checked   otlp.Counts
	checkedAt time.Time
	warned    bool
}

func newTraceService(s *Server, cfg otlp.Config) *traceService {
	cfg.MaxBackends = s.cfg.MaxBackends
	t := &traceService{s: s, asm: otlp.New(cfg), spans: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rbcserver_otlp_spans_total",
		Help: "OTLP spans by what became of them: request (a record), query (used), unknown_backend (a query without a known backend), unattributed (a request whose last query had no known backend, not recorded), no_queries (a request without query spans, not recorded), orphan (a query whose request never came), not_request (a server span --otlp-request does not take as a request), other.",
	}, []string{"outcome"})}
	for _, o := range otlpOutcomes {
		t.spans.WithLabelValues(o)
	}
	s.m.reg.MustRegister(t.spans)
	return t
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() != key {
			continue
		}
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		}
	}
	return ""
}

func kindOf(k tracepb.Span_SpanKind) otlp.Kind {
	switch k {
	case tracepb.Span_SPAN_KIND_SERVER:
		return otlp.KindServer
	case tracepb.Span_SPAN_KIND_CLIENT:
		return otlp.KindClient
	}
	return otlp.KindOther
}

// countsOf is c in the order of otlpOutcomes.
func countsOf(c otlp.Counts) []uint64 {
	return []uint64{c.Requests, c.Queries, c.UnknownBackend, c.Unattributed, c.NoQueries, c.Orphans, c.NotRequest, c.Other}
}

// warnUnusable logs a warning, at most once per unusableCheck, when fewer
// than 1% of the spans since the last check became a request or a query:
// almost every span is unusable, and the RBC stays empty. The usual cause
// is --otlp-request (root mode while a gateway propagates a traceparent, or
// a service name that is not the application's) or the backend attributes.
func (t *traceService) warnUnusable(c otlp.Counts, now time.Time) {
	if t.checkedAt.IsZero() {
		t.checkedAt = now
	}
	d := c.Sub(t.checked)
	total := uint64(0)
	for _, n := range countsOf(d) {
		total += n
	}
	if now.Sub(t.checkedAt) < unusableCheck && (t.warned || total < unusableMin) {
		return // at most one warning a minute; the first as soon as there are enough spans
	}
	if total >= unusableMin && (d.Requests+d.Queries)*100 < total {
		t.warned = true
		t.s.log.Warn("OTLP: almost every span is unusable: the RBC gets nothing from traces",
			"spans", total, "requests", d.Requests, "queries", d.Queries, "not_request", d.NotRequest,
			"no_queries", d.NoQueries, "unattributed", d.Unattributed, "orphan", d.Orphans, "other", d.Other,
			"otlp_request", t.asm.Config().ModeString(),
			"hint", "check --otlp-request (server, root or service:NAME) and --otlp-backend-attrs (docs/opentelemetry.md)")
	}
	t.checked, t.checkedAt = c, now
}

// Export turns the spans into records (requests whose query spans have all
// arrived), stores them as one batch, and answers success; spans that make
// no record are counted, never an error.
func (t *traceService) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	select {
	case <-t.s.draining:
		return nil, status.Error(codes.Unavailable, "rbcserver is shutting down")
	default:
	}
	app := "otlp"
	if name, ok := auth.Caller(ctx); ok {
		app = name
	}
	if t.s.cfg.Reporters != nil && !t.s.cfg.OTLPCallers[app] { // before anything is assembled or counted
		t.s.m.batchesRejected.WithLabelValues(ReasonReporter).Inc()
		t.s.log.Warn("OTLP export rejected", "caller", app, "reason", ReasonReporter)
		return nil, status.Errorf(codes.PermissionDenied, "caller %q may not export traces: only --otlp-callers may", app)
	}
	var spans []otlp.Span
	for _, rs := range req.GetResourceSpans() {
		svc := attrString(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				attrs := sp.GetAttributes()
				spans = append(spans, otlp.Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentID: hex.EncodeToString(sp.GetParentSpanId()), Kind: kindOf(sp.GetKind()), Service: svc,
					StartNs: sp.GetStartTimeUnixNano(), EndNs: sp.GetEndTimeUnixNano(),
					Failed: sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Attr:   func(k string) string { return attrString(attrs, k) },
				})
			}
		}
	}
	now, at := t.s.now()
	t.mu.Lock()
	recs := t.asm.Add(spans, now)
	c := t.asm.Counts
	d := countsOf(c.Sub(t.last))
	t.last = c
	t.warnUnusable(c, now)
	t.mu.Unlock()
	for i, o := range otlpOutcomes {
		if d[i] > 0 {
			t.spans.WithLabelValues(o).Add(float64(d[i]))
		}
	}
	if len(recs) == 0 {
		return &collectortrace.ExportTraceServiceResponse{}, nil
	}
	if lim := int(t.s.cfg.MaxBatchFraction * float64(t.s.cfg.RingSize)); len(recs) > lim {
		return nil, t.s.refuse(app, len(recs), ReasonShare, fmt.Errorf("an export of %d requests is more than %g of the ring (%d records; --max-batch-fraction)", len(recs), t.s.cfg.MaxBatchFraction, lim))
	}
	lat := make([]uint32, len(recs))
	be := make([]uint32, len(recs))
	for i, r := range recs {
		lat[i], be[i] = r.LatencyUs, r.Backend
	}
	lat, be = t.s.admit(app, lat, be, at)
	t.s.ring.Append(at, lat, be)
	t.s.m.addIngested(len(lat))
	return &collectortrace.ExportTraceServiceResponse{}, nil
}
