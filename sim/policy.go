package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// PolicyServer is the controller's policy code in a child process
// (`robinhood-controller policy-server`, docs/controller.md): one JSON line
// per request on its stdin, one answer per line on its stdout. The
// simulator opens every partitioned app server on it and asks it for the
// limits at every controller tick of simulated time, so every allocation
// policy runs as the same Python code as on the testbed.
//
// The messages are defined once, in proto/robinhood/v1/policy.proto; the
// requests are the generated pb.PolicyOpenRequest, pb.PolicyTickRequest and
// pb.PolicyCloseRequest, written by EncodeLine, and the answers are read
// into the generated answer types by DecodeAnswer.
type PolicyServer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *strings.Builder
}

// EncodeLine is m as one line of the protocol (without the newline), as
// policy.proto's header says: protojson with the proto field names and
// every field without presence, then an unset message left out and 64-bit
// integers that are exact as doubles written as numbers (as the Python side
// writes them: json_format's unquote_int64_if_possible), fields in the
// file's order and map keys sorted, without protojson's random whitespace.
func EncodeLine(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out bytes.Buffer
	if err := rewriteMessage(dec, &out, m.ProtoReflect().Descriptor()); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return out.Bytes(), nil
}

// rewriteMessage copies one object (or null) of message md from dec to out.
func rewriteMessage(dec *json.Decoder, out *bytes.Buffer, md protoreflect.MessageDescriptor) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		out.WriteString("null")
		return nil
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("%s: %v is not an object", md.FullName(), tok)
	}
	out.WriteByte('{')
	for first := true; dec.More(); {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			return fmt.Errorf("%s: unknown field %q", md.FullName(), key)
		}
		from := dec
		if fd.Message() != nil && !fd.IsMap() && !fd.IsList() {
			// EmitUnpopulated writes an unset message as null: leave it out,
			// as the Python side does.
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return err
			}
			if string(raw) == "null" {
				continue
			}
			from = json.NewDecoder(bytes.NewReader(raw))
			from.UseNumber()
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		writeString(out, key)
		out.WriteByte(':')
		if err := rewriteField(from, out, fd); err != nil {
			return err
		}
	}
	_, err = dec.Token() // '}'
	out.WriteByte('}')
	return err
}

// rewriteField copies the value of field fd: a map, a list or one value.
func rewriteField(dec *json.Decoder, out *bytes.Buffer, fd protoreflect.FieldDescriptor) error {
	if !fd.IsMap() && !fd.IsList() {
		return rewriteValue(dec, out, fd)
	}
	open, end := json.Delim('['), byte(']')
	if fd.IsMap() {
		open, end = json.Delim('{'), '}'
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != open {
		return fmt.Errorf("%s: %v is not a map or list", fd.FullName(), tok)
	}
	out.WriteByte(byte(open))
	for first := true; dec.More(); first = false {
		if !first {
			out.WriteByte(',')
		}
		vd := fd
		if fd.IsMap() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			writeString(out, key)
			out.WriteByte(':')
			vd = fd.MapValue()
		}
		if err := rewriteValue(dec, out, vd); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing delimiter
	out.WriteByte(end)
	return err
}

// rewriteValue copies one value of field fd, unquoting a 64-bit integer
// that is exact as a double.
func rewriteValue(dec *json.Decoder, out *bytes.Buffer, fd protoreflect.FieldDescriptor) error {
	if fd.Kind() == protoreflect.MessageKind {
		if strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.") {
			// Well-known types have JSON forms of their own; policy.proto has none.
			return fmt.Errorf("%s: well-known type %s", fd.FullName(), fd.Message().FullName())
		}
		return rewriteMessage(dec, out, fd.Message())
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case string:
		if exactAsDouble(fd.Kind(), v) {
			out.WriteString(v)
		} else {
			writeString(out, v)
		}
	case json.Number:
		out.WriteString(string(v))
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case nil:
		out.WriteString("null")
	default:
		return fmt.Errorf("%s: unexpected %v", fd.FullName(), tok)
	}
	return nil
}

// exactAsDouble is whether s, protojson's quoted value of a field of kind
// k, is a 64-bit integer a double holds exactly (Python's float(v) == v).
func exactAsDouble(k protoreflect.Kind, s string) bool {
	switch k {
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		u, err := strconv.ParseUint(s, 10, 64)
		f := float64(u)
		return err == nil && f < 1<<64 && uint64(f) == u
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		i, err := strconv.ParseInt(s, 10, 64)
		f := float64(i)
		return err == nil && f >= -(1<<63) && f < 1<<63 && int64(f) == i
	}
	return false
}

func writeString(out *bytes.Buffer, s string) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out.Truncate(out.Len() - 1) // Encode's newline
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
		return fmt.Errorf("policy server (%s): no answer (%v)%s", strings.Join(ps.cmd.Args, " "), err, ps.tail())
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
	if err := ps.call(req, a); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return nil, fmt.Errorf("policy server: opening %s: %s", app, refused.Msg)
		}
		return nil, err
	}
	return a, nil
}

// Tick asks for one tick's decision.
func (ps *PolicyServer) Tick(req *pb.PolicyTickRequest) (*pb.PolicyTickAnswer, error) {
	req.Op = "tick"
	a := &pb.PolicyTickAnswer{}
	if err := ps.call(req, a); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return nil, fmt.Errorf("policy server: tick of %s: %s", req.AppServer, refused.Msg)
		}
		return nil, err
	}
	return a, nil
}

// Close ends the child process and waits for it.
func (ps *PolicyServer) Close() error {
	if b, err := EncodeLine(&pb.PolicyCloseRequest{Op: "close"}); err == nil {
		_, _ = ps.in.Write(append(b, '\n'))
	}
	_ = ps.in.Close()
	if err := ps.cmd.Wait(); err != nil {
		return fmt.Errorf("policy server: %w%s", err, ps.tail())
	}
	return nil
}
