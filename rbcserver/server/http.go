package server

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
)

// jsonOptions encode GetRBCResponse for GET /v1/rbc: proto field names and
// every field present, zero or not. Per the proto3 JSON mapping 64-bit
// integers are JSON strings.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// Handler returns the HTTP endpoints:
//
//	GET /v1/rbc   the GetRBC snapshot as JSON; query parameters
//	              window_seconds, low_pct, high_pct as in GetRBCRequest
//	GET /metrics  Prometheus metrics
//	GET /healthz  200 "ok" while serving, 503 once shutting down
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/rbc", s.handleRBC)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", s.handleHealth)
	return mux
}

// rbcParams are the query parameters of /v1/rbc.
var rbcParams = []string{"window_seconds", "low_pct", "high_pct"}

func (s *Server) handleRBC(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	for name := range query {
		if !slices.Contains(rbcParams, name) {
			http.Error(w, fmt.Sprintf("unknown query parameter %q (accepted: %s)", name, strings.Join(rbcParams, ", ")), http.StatusBadRequest)
			return
		}
	}
	var vals [3]float64
	for i, name := range rbcParams {
		v := query.Get(name)
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("%s = %q is not a number", name, v), http.StatusBadRequest)
			return
		}
		vals[i] = f
	}
	q, err := s.resolve(vals[0], vals[1], vals[2])
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.snapshot(r.Context(), q)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	body, err := jsonOptions.Marshal(resp)
	if err != nil {
		http.Error(w, "encoding the snapshot: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.draining:
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}
}
