package config

import (
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/robinhoodcache/robinhood/schema"
)

// LimitTable is the one list of limit fields: it has the schema's fields in
// the schema's order with the schema's types, one row per field of Limits,
// and each row reads and writes its own field.
func TestLimitTableIsTheSchemasAndTheStructs(t *testing.T) {
	b, err := schema.Files.ReadFile(schema.Topology)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]struct {
			Properties yaml.Node `yaml:"properties"`
		} `yaml:"$defs"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	props := doc.Defs["limits"].Properties
	var names, types []string
	for i := 0; i+1 < len(props.Content); i += 2 {
		names = append(names, props.Content[i].Value)
		var p struct {
			Type string `yaml:"type"`
		}
		if err := props.Content[i+1].Decode(&p); err != nil {
			t.Fatal(err)
		}
		types = append(types, p.Type)
	}
	if !reflect.DeepEqual(names, LimitFields) {
		t.Fatalf("schema's limits %v, table %v", names, LimitFields)
	}
	for i, f := range LimitTable {
		if f.Int != (types[i] == "integer") {
			t.Errorf("%s: Int %v, schema type %s", f.Name, f.Int, types[i])
		}
	}
	if n := reflect.TypeOf(Limits{}).NumField(); n != len(LimitTable) {
		t.Fatalf("Limits has %d fields, the table %d rows", n, len(LimitTable))
	}
	seen := map[uintptr]string{}
	for i, f := range LimitTable {
		var l Limits
		f.Set(&l, float64(i+2))
		if got, _ := l.Get(f.Name); got != float64(i+2) || l.Doc()[f.Name] == nil {
			t.Errorf("%s: set %d, got %v", f.Name, i+2, got)
		}
		v := reflect.ValueOf(&l).Elem()
		for j := 0; j < v.NumField(); j++ {
			if !v.Field(j).IsZero() {
				if prev, dup := seen[uintptr(j)]; dup {
					t.Errorf("%s and %s write the same field", prev, f.Name)
				}
				seen[uintptr(j)] = f.Name
			}
		}
	}
}
