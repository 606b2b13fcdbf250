package dispatch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/schema"
)

// The contract's copy of the declarations (schema/policies.schema.yaml, which
// every reader checks a topology against) is what the parameter structs
// declare: make build regenerates it, and this fails when it is stale.
func TestTheContractHoldsTheDeclarations(t *testing.T) {
	b, err := schema.Files.ReadFile(schema.Policies)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs struct {
			Dispatch struct {
				Properties map[string]struct {
					Properties map[string]map[string]any `yaml:"properties"`
				} `yaml:"properties"`
			} `yaml:"dispatch"`
		} `yaml:"$defs"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	cases := doc.Defs.Dispatch.Properties
	if len(cases) != len(Names()) {
		t.Fatalf("the contract declares %d dispatch policies, the registry has %d: run make build", len(cases), len(Names()))
	}
	for _, d := range Describe() {
		c, ok := cases[d.Name]
		if !ok || len(c.Properties) != len(d.Params) {
			t.Fatalf("%s: not in the contract, or with other parameters: run make build", d.Name)
		}
		for _, p := range d.Params {
			s := c.Properties[p.Name]
			if s == nil || s["description"] != p.Doc || !sameDefault(s["x-default"], p.Default) {
				t.Errorf("%s.%s: the contract has %v, the struct declares %+v: run make build", d.Name, p.Name, s, p)
			}
		}
	}
}

func sameDefault(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y) || strings.TrimSuffix(string(y), ".0") == string(x)
}

// Every shared invalid dispatch case (tests/config/topology/invalid/dispatch_*,
// which both contract readers refuse) is refused by Params too, naming the
// same parameter: a program that builds a policy without reading a topology
// (the simulator, the hedging bench) holds the same declaration.
func TestParamsRefusesTheSharedInvalidCases(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "tests", "config", "topology", "invalid", "dispatch_*.yaml"))
	if len(files) < 10 {
		t.Fatalf("only %d shared dispatch cases", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			want := strings.TrimPrefix(first, "# expect: ")
			doc, err := config.ParseYAML(b, "topology")
			if err != nil {
				t.Fatal(err)
			}
			block := doc.(map[string]any)["app_servers"].([]any)[0].(map[string]any)["dispatch"]
			raw, _ := json.Marshal(block)
			var spec config.Dispatch
			if err := json.Unmarshal(raw, &spec); err != nil {
				// NaN and Inf have no JSON form: give the map as decoded.
				m := block.(map[string]any)
				spec = config.Dispatch{Policy: m["policy"].(string), Params: map[string]any{}}
				for k, v := range m {
					if k != "policy" {
						spec.Params[k] = v
					}
				}
			}
			_, err = Params(spec)
			if err == nil {
				t.Fatalf("accepted; the contract says %q", want)
			}
			field, _, _ := strings.Cut(err.Error(), ":")
			if !strings.Contains(want, "dispatch."+field+":") {
				t.Fatalf("Params: %v; the contract: %s", err, want)
			}
		})
	}
}
