package dispatch

import (
	"slices"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// The parameters are decoded by lib/dispatch (its decode_test.go); the app
// server refuses a policy it does not run yet.
func TestParamsOfPoliciesTheAppServerRuns(t *testing.T) {
	if p, err := Params(config.Dispatch{Policy: Random}); p != nil || err != nil {
		t.Fatalf("random: %v %v", p, err)
	}
	if _, err := Params(config.Dispatch{Policy: "random", Params: map[string]any{"tries": int64(2)}}); err == nil ||
		!strings.Contains(err.Error(), "tries: unknown parameter (policy random takes none)") {
		t.Fatalf("got %v", err)
	}
	if _, err := Params(config.Dispatch{Policy: "nope"}); err == nil || !strings.Contains(err.Error(), `policy: "nope" is not one of random`) {
		t.Fatalf("got %v", err)
	}
	var names []string
	for _, d := range Describe() {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, Names()) {
		t.Fatalf("Describe: %v, Names: %v", names, Names())
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
