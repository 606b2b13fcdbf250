package dispatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/robinhoodcache/robinhood/lib/config"
	pb "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// pinParams are the parameters of the test policy "test-pin".
type pinParams struct {
	Replica int     `json:"replica" doc:"the replica every batch goes to"`
	Weight  float64 `json:"weight"`
}

func (p *pinParams) Validate() error {
	if p.Replica < 0 {
		return errors.New("replica: must not be negative")
	}
	return nil
}

type pin struct {
	rs *Replicas
	i  int
}

func (d *pin) Get(ctx context.Context, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	return d.rs.Call(ctx, d.i%d.rs.Len(), req, opts...)
}

// A policy registered from a test, as a new policy file registers itself.
func init() {
	Register("test-pin", Factory{
		Summary: "every batch to one configured replica (a test policy)",
		Params:  func() any { return &pinParams{Replica: 0, Weight: 1.5} },
		New: func(p any, rs *Replicas) (Dispatcher, error) {
			return &pin{rs: rs, i: p.(*pinParams).Replica}, nil
		},
	})
}

func TestParamsDefaultsAndOverrides(t *testing.T) {
	p, err := Params(config.Dispatch{Policy: "test-pin"})
	if err != nil {
		t.Fatal(err)
	}
	if got := *p.(*pinParams); got.Replica != 0 || got.Weight != 1.5 {
		t.Fatalf("defaults: %+v", got)
	}
	p, err = Params(config.Dispatch{Policy: "test-pin", Params: map[string]any{"replica": int64(1)}})
	if err != nil || p.(*pinParams).Replica != 1 || p.(*pinParams).Weight != 1.5 {
		t.Fatalf("override: %+v %v", p, err)
	}
}

func TestParamsErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		spec config.Dispatch
		want string
	}{
		{config.Dispatch{Policy: "test-pin", Params: map[string]any{"replicas": int64(1)}}, "replicas: unknown parameter of policy test-pin (known: replica, weight)"},
		{config.Dispatch{Policy: "test-pin", Params: map[string]any{"replica": "one"}}, `replica: "one" is not an integer`},
		{config.Dispatch{Policy: "test-pin", Params: map[string]any{"replica": int64(-1)}}, "replica: must not be negative"},
		{config.Dispatch{Policy: "random", Params: map[string]any{"tries": int64(2)}}, "tries: unknown parameter (policy random takes none)"},
		{config.Dispatch{Policy: "nope"}, `policy: "nope" is not one of`},
	} {
		_, err := Params(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.spec, err, c.want)
		}
	}
}

func TestDescribeListsEveryPolicy(t *testing.T) {
	var pinned *Description
	for _, d := range Describe() {
		if d.Name == "test-pin" {
			d := d
			pinned = &d
		}
	}
	if pinned == nil || len(pinned.Params) != 2 || pinned.Params[0].Name != "replica" || pinned.Params[1].Default != 1.5 ||
		pinned.Params[0].Doc == "" {
		t.Fatalf("Describe: %+v", pinned)
	}
	if n := Names(); !slices.IsSorted(n) || !slices.Contains(n, Random) || !slices.Contains(n, "test-pin") {
		t.Fatalf("Names: %v, want them sorted, with the default and the test's own", n)
	}
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a second registration of random did not panic")
		}
	}()
	Register(Random, Factory{New: func(any, *Replicas) (Dispatcher, error) { return nil, nil }})
}
