package scenario

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// AdminPath is the backends' limits endpoint.
const AdminPath = "/admin/limits"

// Replicas returns the admin addresses (host:port) of every replica of the
// backends the scenario changes. A replica without an http address is an
// error: the scenario could not change its limits. request_rate events
// change no backend (the trace carries them) and are skipped here as in
// Expand, so nothing applies them through the admin API.
func (s *Scenario) Replicas(t *config.Topology) (map[string][]string, error) {
	out := map[string][]string{}
	for _, e := range s.Events {
		if e.Kind == KindRequestRate {
			continue
		}
		for _, name := range e.Backends {
			if _, done := out[name]; done {
				continue
			}
			b, ok := t.BackendByName(name)
			if !ok {
				return nil, &Error{File: s.File, Line: e.Line, Reason: fmt.Sprintf("backend %q is not in the topology", name)}
			}
			for i, r := range b.Replicas {
				if r.HTTP == "" {
					return nil, &Error{File: s.File, Line: e.Line, Reason: fmt.Sprintf("backend %q replica %d (grpc %s) has no http address in the topology, so its limits cannot be changed", name, i, r.GRPC)}
				}
				out[name] = append(out[name], r.HTTP)
			}
		}
	}
	return out, nil
}

// ReadInitial reads the current value of each (backend, field) from the
// backend's first replica (GET /admin/limits); scheme is "http" or "https"
// ("" is http).
func ReadInitial(ctx context.Context, c *http.Client, scheme string, replicas map[string][]string, need []BackendField) (map[BackendField]float64, error) {
	out := map[BackendField]float64{}
	for _, bf := range need {
		addrs := replicas[bf.Backend]
		if len(addrs) == 0 {
			return nil, fmt.Errorf("backend %s has no replica to read %s from", bf.Backend, bf.Field)
		}
		limits, err := getLimits(ctx, c, adminURL(scheme, addrs[0]))
		if err != nil {
			return nil, fmt.Errorf("reading the current %s of %s: %w", bf.Field, bf.Backend, err)
		}
		v, ok := limits[bf.Field]
		if !ok {
			return nil, fmt.Errorf("backend %s (%s) reports no %s", bf.Backend, addrs[0], bf.Field)
		}
		out[bf] = v
	}
	return out, nil
}

// adminURL is the admin endpoint of a replica's HTTP address.
func adminURL(scheme, addr string) string {
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + addr + AdminPath
}

func getLimits(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var m map[string]float64
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("GET %s: %v", url, err)
	}
	return m, nil
}

// Record is one line of scenario.jsonl: one field of one change on one
// replica.
type Record struct {
	// TS is when the change was sent, in seconds from the start of the run;
	// AtS is when the timeline scheduled it.
	TS      float64 `json:"t_s"`
	AtS     float64 `json:"at_s"`
	Backend string  `json:"backend"`
	Replica string  `json:"replica"`
	Field   string  `json:"field"`
	Value   float64 `json:"value"`
	// Result is "ok" or what went wrong.
	Result string `json:"result"`
	Line   int    `json:"line"`
	Kind   Kind   `json:"kind"`
}

// Applier applies a timeline of changes through the replicas' admin API.
type Applier struct {
	Client *http.Client
	// Replicas maps a backend name to its replicas' admin addresses.
	Replicas map[string][]string
	Log      *slog.Logger
	// Out receives one JSON Record per line.
	Out io.Writer
	// Timeout bounds one PUT (default 2 s).
	Timeout time.Duration
	// Scheme is "https" when the backends serve TLS ("" is http).
	Scheme string
}

// Totals counts what Run did.
type Totals struct {
	Applied int // (change, replica) PUTs answered 200
	Failed  int // PUTs that failed
}

// Run applies the changes in order, each at start + its At, every replica
// of a change in parallel, with a PUT carrying the changed fields only. It
// logs and records every PUT, and returns when all are done or ctx ends.
func (a *Applier) Run(ctx context.Context, start time.Time, changes []Change) (Totals, error) {
	var tot Totals
	enc := json.NewEncoder(a.Out)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for _, ch := range changes {
		if wait := time.Until(start.Add(ch.At)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return tot, nil
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return tot, nil
		}
		sent := time.Since(start)
		addrs := a.Replicas[ch.Backend]
		results := make([]string, len(addrs))
		var wg sync.WaitGroup
		for i, addr := range addrs {
			wg.Go(func() { results[i] = a.put(ctx, addr, ch.Fields) })
		}
		wg.Wait()
		for i, addr := range addrs {
			if results[i] == "ok" {
				tot.Applied++
			} else {
				tot.Failed++
			}
			for _, fv := range ch.Fields {
				rec := Record{TS: sent.Seconds(), AtS: ch.At.Seconds(), Backend: ch.Backend, Replica: addr,
					Field: fv.Field, Value: fv.Value, Result: results[i], Line: ch.Line, Kind: ch.Kind}
				if err := enc.Encode(rec); err != nil {
					return tot, fmt.Errorf("writing the scenario log: %w", err)
				}
				level := slog.LevelInfo
				if results[i] != "ok" {
					level = slog.LevelWarn
				}
				a.Log.Log(ctx, level, "scenario change", "t_s", round3(sent.Seconds()), "backend", ch.Backend, "replica", addr,
					"field", fv.Field, "value", fv.Value, "result", results[i], "line", ch.Line)
			}
		}
	}
	return tot, nil
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// put sends one partial update and returns "ok" or the failure.
func (a *Applier) put(ctx context.Context, addr string, fields []FieldValue) string {
	var body bytes.Buffer
	body.WriteByte('{')
	for i, fv := range fields {
		if i > 0 {
			body.WriteString(", ")
		}
		fmt.Fprintf(&body, "%q: %s", fv.Field, strconv.FormatFloat(fv.Value, 'f', -1, 64))
	}
	body.WriteByte('}')
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(max(a.Timeout, 0), 2*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, adminURL(a.Scheme, addr), &body)
	if err != nil {
		return "error: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.Client.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("error: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return "ok"
}
