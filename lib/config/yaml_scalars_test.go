package config

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Every plain scalar of tests/vectors/yaml_scalars.json reads as the kind
// and value written there; the Python reader (robinhood_common.contract)
// runs the same cases, so a file means one thing to both.
func TestYAMLScalarsAsEveryReaderReadsThem(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(casesDir, "..", "vectors", "yaml_scalars.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Schema string `json:"schema"`
		Cases  []struct {
			YAML  string `json:"yaml"`
			Kind  string `json:"kind"`
			Value any    `json:"value"`
		} `json:"cases"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // integers beyond 2^53 stay exact
	if err := dec.Decode(&v); err != nil || v.Schema != "robinhood-yaml-scalars/v1" || len(v.Cases) < 50 {
		t.Fatalf("yaml_scalars.json: %v, schema %q, %d cases", err, v.Schema, len(v.Cases))
	}
	for _, c := range v.Cases {
		doc, err := ParseYAML([]byte("v: "+c.YAML+"\n"), "document")
		if err != nil {
			t.Errorf("%q: %v", c.YAML, err)
			continue
		}
		got := doc.(map[string]any)["v"]
		ok := false
		switch c.Kind {
		case "null":
			ok = got == nil
		case "bool", "str":
			ok = got == c.Value
		case "int":
			n, isInt := got.(int64)
			ok = isInt && strconv.FormatInt(n, 10) == c.Value.(json.Number).String()
		case "float":
			f, isFloat := got.(float64)
			switch want := c.Value.(type) {
			case string:
				ok = isFloat && (want == "NaN" && math.IsNaN(f) || want == "+Inf" && math.IsInf(f, 1) || want == "-Inf" && math.IsInf(f, -1))
			case json.Number:
				w, err := strconv.ParseFloat(want.String(), 64)
				ok = isFloat && err == nil && f == w
			}
		}
		if !ok {
			t.Errorf("%q reads as %v (%T), want the %s %v", c.YAML, got, got, c.Kind, c.Value)
		}
	}
}
