package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/robinhoodcache/robinhood/backends/capacity"
)

// MaxAdminBody bounds the body of PUT /admin/limits.
const MaxAdminBody = 64 << 10

// HTTPHandler serves the backend's HTTP side:
//
//	GET /admin/limits  current limits as a JSON object
//	PUT /admin/limits  a JSON object with any subset of the limit fields,
//	                   applied atomically; answers the new limits, or 400
//	                   {"error": "..."} naming the field and value (nothing
//	                   changed)
//	GET /healthz       200 "ok", 503 while shutting down
//	GET /metrics       Prometheus metrics
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/limits", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.model.Limits())
	})
	mux.HandleFunc("PUT /admin/limits", s.putLimits)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "shutting down\n")
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	return mux
}

func (s *Server) putLimits(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxAdminBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "body is larger than 64 KiB")
			return
		}
		writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	p, err := capacity.ParsePatch(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cur, err := s.UpdateLimits(p, "admin "+r.RemoteAddr)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, cur)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
