// Command planner evaluates the backend-load model (lib/model) for the
// planner allocation policy (docs/algorithms.md, "planner"): one JSON
// request per line on stdin, one answer per line on stdout
// (proto/robinhood/v1/planner.proto), until stdin ends. The controller
// starts it as a child process; it opens no port and reads no file.
//
//	planner            serve requests on stdin
//	planner --version  print the protocol version
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/robinhoodcache/robinhood/planner"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxLine bounds a request line: a plan of 1,024 backends with full
// histograms is about 10 MiB.
const maxLine = 16 << 20

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, in io.Reader, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("planner", flag.ContinueOnError)
	fs.SetOutput(errOut)
	version := fs.Bool("version", false, "print the protocol version and exit")
	fs.Usage = func() {
		fmt.Fprintln(errOut, "usage: planner [--version]  (JSON lines on stdin: proto/robinhood/v1/planner.proto)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "planner: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *version {
		fmt.Fprintln(out, "planner protocol v1")
		return 0
	}
	r := bufio.NewReaderSize(in, 1<<16)
	w := bufio.NewWriter(out)
	for {
		line, long, err := readLine(r)
		if err != nil && err != io.EOF {
			fmt.Fprintf(errOut, "planner: reading stdin: %v\n", err)
			return 1
		}
		if len(line) > 0 || long {
			var ans proto.Message = &pb.PlanAnswer{Error: fmt.Sprintf("request: a line over %d MiB", maxLine>>20)}
			if !long {
				ans = answer(line)
			}
			b, merr := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(ans)
			if merr != nil {
				b, _ = protojson.MarshalOptions{UseProtoNames: true}.Marshal(&pb.PlanAnswer{Error: merr.Error()})
			}
			w.Write(b)
			w.WriteByte('\n')
			if w.Flush() != nil {
				return 1 // the policy went away
			}
		}
		if err == io.EOF {
			return 0
		}
	}
}

// readLine reads one line without its newline; a line over maxLine bytes
// is consumed to its end and reported as long (its bytes are dropped).
func readLine(r *bufio.Reader) (line []byte, long bool, err error) {
	for {
		part, err := r.ReadSlice('\n')
		if !long && len(line)+len(part) <= maxLine+1 {
			line = append(line, part...)
		} else {
			line, long = nil, true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, long, err
	}
}

// answer is the answer to one request line.
func answer(line []byte) proto.Message {
	var probe pb.PlannerCapacityRequest // every request has "op"
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(line, &probe); err != nil {
		return &pb.PlanAnswer{Error: "request: " + err.Error()}
	}
	switch probe.GetOp() {
	case "capacity":
		var req pb.PlannerCapacityRequest
		if err := protojson.Unmarshal(line, &req); err != nil {
			return &pb.PlannerCapacityAnswer{Error: "request: " + err.Error()}
		}
		ans, err := planner.Capacities(&req)
		if err != nil {
			return &pb.PlannerCapacityAnswer{Error: err.Error()}
		}
		return ans
	case "plan":
		var req pb.PlanRequest
		if err := protojson.Unmarshal(line, &req); err != nil {
			return &pb.PlanAnswer{Error: "request: " + err.Error()}
		}
		ans, err := planner.Plan(&req)
		if err != nil {
			return &pb.PlanAnswer{Error: err.Error()}
		}
		return ans
	default:
		return &pb.PlanAnswer{Error: fmt.Sprintf("op: %q is not capacity or plan", probe.GetOp())}
	}
}
