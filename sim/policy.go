package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// PolicyServer is a session with the controller's policy code
// (`robinhood-controller policy-server`, docs/controller.md): a child
// process, or a connection to one listening (DialPolicyServer). Requests
// and answers are proto/robinhood/v1/policy.proto's messages, one JSON line
// each (EncodeLine, DecodeAnswer); the simulator opens every partitioned
// app server on it and asks for its limits at every controller tick.
type PolicyServer struct {
	cmd    *exec.Cmd // nil on a connection
	conn   net.Conn  // nil with a child process
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *strings.Builder
}

// closeTimeout bounds the wait for a listening server's session to end
// (its timelines closed) after the close request.
const closeTimeout = 30 * time.Second

// DialPolicyServer opens a session on the policy server listening on the
// Unix socket at path.
func DialPolicyServer(path string) (*PolicyServer, error) {
	conn, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("policy server at %s: %w (is `robinhood-controller policy-server --listen %s` running?)", path, err, path)
	}
	return &PolicyServer{conn: conn, in: conn, out: bufio.NewReaderSize(conn, 1<<16), stderr: &strings.Builder{}}, nil
}

// what names the server in errors.
func (ps *PolicyServer) what() string {
	if ps.cmd == nil {
		return "at " + ps.conn.RemoteAddr().String()
	}
	return "(" + strings.Join(ps.cmd.Args, " ") + ")"
}

// EncodeLine is m as one line of the protocol (without the newline): the
// proto3 JSON mapping with the proto field names and every field written,
// zero values included (the server requires the fields policy.proto says
// are required, and proto3 cannot tell a zero from an absent field); an
// unset message is null. protojson quotes 64-bit integers; the Python side
// reads quoted and bare integers alike, and so does DecodeAnswer.
func EncodeLine(m proto.Message) ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
}

// RefusedError is an answer with "ok": false (pb.PolicyErrorAnswer): the
// server could not carry the request out, and changed nothing.
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return e.Msg }

// DecodeAnswer reads one answer line into answer, the request's answer
// type; unknown fields are refused. An answer with "ok": false is a
// *RefusedError.
func DecodeAnswer(line []byte, answer proto.Message) error {
	var refused pb.PolicyErrorAnswer
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(line, &refused); err != nil {
		return err
	}
	if !refused.Ok {
		if err := protojson.Unmarshal(line, &refused); err != nil {
			return err
		}
		return &RefusedError{Msg: refused.Error}
	}
	return protojson.Unmarshal(line, answer)
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

func (ps *PolicyServer) call(req, answer proto.Message) error {
	b, err := EncodeLine(req)
	if err != nil {
		return fmt.Errorf("policy server: %w", err)
	}
	if _, err := ps.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("policy server: %w%s", err, ps.tail())
	}
	line, err := ps.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("policy server %s: no answer (%v)%s", ps.what(), err, ps.tail())
	}
	if err := DecodeAnswer(line, answer); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return err
		}
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
func (ps *PolicyServer) Open(topology, app, timeline string) (*pb.PolicyOpenAnswer, error) {
	req := &pb.PolicyOpenRequest{Op: "open", Topology: topology, AppServer: app}
	if timeline != "" {
		req.Timeline = &timeline
	}
	a := &pb.PolicyOpenAnswer{}
	if err := ps.ask(req, a, "opening "+app); err != nil {
		return nil, err
	}
	return a, nil
}

// ask is call, with a refusal said to be of what.
func (ps *PolicyServer) ask(req, answer proto.Message, what string) error {
	err := ps.call(req, answer)
	var refused *RefusedError
	if errors.As(err, &refused) {
		return fmt.Errorf("policy server: %s: %s", what, refused.Msg)
	}
	return err
}

// Tick asks for one tick's decision.
func (ps *PolicyServer) Tick(req *pb.PolicyTickRequest) (*pb.PolicyTickAnswer, error) {
	req.Op = "tick"
	a := &pb.PolicyTickAnswer{}
	if err := ps.ask(req, a, "tick of "+req.AppServer); err != nil {
		return nil, err
	}
	return a, nil
}

// Close ends the session and waits for it: the child process's exit, or
// the end of the connection (the listening server's session closes its
// timelines, then the connection).
func (ps *PolicyServer) Close() error {
	if b, err := EncodeLine(&pb.PolicyCloseRequest{Op: "close"}); err == nil {
		_, _ = ps.in.Write(append(b, '\n'))
	}
	if ps.cmd == nil {
		defer ps.conn.Close()
		_ = ps.conn.SetReadDeadline(time.Now().Add(closeTimeout))
		// the close request's answer, then the end of the session
		if _, err := io.Copy(io.Discard, ps.out); err != nil {
			return fmt.Errorf("policy server %s: the session did not end: %w", ps.what(), err)
		}
		return nil
	}
	_ = ps.in.Close()
	if err := ps.cmd.Wait(); err != nil {
		return fmt.Errorf("policy server: %w%s", err, ps.tail())
	}
	return nil
}
