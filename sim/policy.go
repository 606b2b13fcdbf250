package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// PolicyServer is the controller's policy code in a child process
// (`robinhood-controller policy-server`, docs/controller.md): one JSON line
// per request on its stdin, one answer per line on its stdout. The
// simulator opens every partitioned app server on it and asks it for the
// limits at every controller tick of simulated time, so every allocation
// policy runs as the same Python code as on the testbed.
type PolicyServer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *strings.Builder
}

// OpenAnswer is the answer to "open".
type OpenAnswer struct {
	OK          bool    `json:"ok"`
	Error       string  `json:"error"`
	AppServer   string  `json:"app_server"`
	Policy      string  `json:"policy"`
	NeedsRBC    bool    `json:"needs_rbc"`
	BudgetBytes int64   `json:"budget_bytes"`
	FloorBytes  int64   `json:"floor_bytes"`
	IntervalS   float64 `json:"interval_s"`
	Partitions  []struct {
		Name      string `json:"name"`
		BackendID uint32 `json:"backend_id"`
		InitialMB int    `json:"initial_mb"`
	} `json:"partitions"`
}

// PartitionSample is what the controller reads from one memcached instance.
type PartitionSample struct {
	LimitBytes    int64    `json:"limit_bytes"`
	MallocedBytes int64    `json:"malloced_bytes"`
	ItemBytes     int64    `json:"item_bytes"`
	Items         int64    `json:"items"`
	Evictions     uint64   `json:"evictions"`
	GetHits       uint64   `json:"get_hits"`
	GetMisses     uint64   `json:"get_misses"`
	HitRatio      *float64 `json:"hit_ratio"`
}

// RBCSnapshot is the RBC server's answer, by partition name.
type RBCSnapshot struct {
	Counts         map[string]uint64 `json:"counts"`
	WindowRequests int               `json:"window_requests"`
	BandRequests   uint64            `json:"band_requests"`
	P99LatencyUs   uint32            `json:"p99_latency_us"`
}

// QueryStats is one backend's statistics over the window (GetStats).
type QueryStats struct {
	Hits              uint64 `json:"hits"`
	Misses            uint64 `json:"misses"`
	ShadowHits        uint64 `json:"shadow_hits"`
	ShadowBytes       uint64 `json:"shadow_bytes"`
	Queries           uint64 `json:"queries"`
	P50QueryLatencyUs uint32 `json:"p50_query_latency_us"`
	P99QueryLatencyUs uint32 `json:"p99_query_latency_us"`
	LimitBytes        uint64 `json:"limit_bytes"`
}

// TickRequest is one controller tick's input.
type TickRequest struct {
	Op         string                     `json:"op"`
	AppServer  string                     `json:"app_server"`
	Now        float64                    `json:"now"`
	Partitions map[string]PartitionSample `json:"partitions"`
	RBC        *RBCSnapshot               `json:"rbc"`
	Stats      map[string]QueryStats      `json:"stats"`
	Local      map[string]QueryStats      `json:"local"`
}

// TickAnswer is the policy's decision, as memcached limits.
type TickAnswer struct {
	OK       bool             `json:"ok"`
	Error    string           `json:"error"`
	Tick     int              `json:"tick"`
	Targets  map[string]int64 `json:"targets"`
	LimitsMB map[string]int64 `json:"limits_mb"`
	Notes    []string         `json:"notes"`
}

// StartPolicyServer starts `CMD... policy-server`.
func StartPolicyServer(command []string) (*PolicyServer, error) {
	if len(command) == 0 {
		return nil, errors.New("policy server: no controller command (robinhood-controller)")
	}
	args := append(append([]string{}, command[1:]...), "policy-server")
	cmd := exec.Command(command[0], args...)
	cmd.Env = os.Environ()
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	ps := &PolicyServer{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16), stderr: &strings.Builder{}}
	cmd.Stderr = &limitedWriter{b: ps.stderr, max: 64 << 10}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("policy server: starting %s: %w", strings.Join(cmd.Args, " "), err)
	}
	return ps, nil
}

type limitedWriter struct {
	b   *strings.Builder
	max int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if room := w.max - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (ps *PolicyServer) call(req any, answer any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := ps.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("policy server: %w%s", err, ps.tail())
	}
	line, err := ps.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("policy server (%s): no answer (%v)%s", strings.Join(ps.cmd.Args, " "), err, ps.tail())
	}
	if err := json.Unmarshal(line, answer); err != nil {
		return fmt.Errorf("policy server: bad answer %q: %w", truncate(string(line), 200), err)
	}
	return nil
}

func (ps *PolicyServer) tail() string {
	s := strings.TrimSpace(ps.stderr.String())
	if s == "" {
		return ""
	}
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return "; its stderr:\n" + s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Open opens app server app of the topology, appending its ticks to
// timeline ("" for none).
func (ps *PolicyServer) Open(topology, app, timeline string) (*OpenAnswer, error) {
	req := map[string]any{"op": "open", "topology": topology, "app_server": app}
	if timeline != "" {
		req["timeline"] = timeline
	}
	var a OpenAnswer
	if err := ps.call(req, &a); err != nil {
		return nil, err
	}
	if !a.OK {
		return nil, fmt.Errorf("policy server: opening %s: %s", app, a.Error)
	}
	return &a, nil
}

// Tick asks for one tick's decision.
func (ps *PolicyServer) Tick(req *TickRequest) (*TickAnswer, error) {
	req.Op = "tick"
	var a TickAnswer
	if err := ps.call(req, &a); err != nil {
		return nil, err
	}
	if !a.OK {
		return nil, fmt.Errorf("policy server: tick of %s: %s", req.AppServer, a.Error)
	}
	return &a, nil
}

// Close ends the child process and waits for it.
func (ps *PolicyServer) Close() error {
	_, _ = ps.in.Write([]byte(`{"op":"close"}` + "\n"))
	_ = ps.in.Close()
	if err := ps.cmd.Wait(); err != nil {
		return fmt.Errorf("policy server: %w%s", err, ps.tail())
	}
	return nil
}
