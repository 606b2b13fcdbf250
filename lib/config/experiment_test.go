package config

import (
	"os"
	"path/filepath"
	"testing"
)

// trace.synth.streams decodes into Stream values: the shorthand is the file,
// skip defaults to 0, an absent format is "" (detected by tracegen import).
func TestExperimentStreams(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(casesDir, "experiment", "valid", "streams.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ParseYAML(b, "experiment")
	if err != nil {
		t.Fatal(err)
	}
	e, err := ExperimentFrom(doc, "/exp")
	if err != nil {
		t.Fatal(err)
	}
	got := e.Trace.Synth.Streams
	want := map[string]Stream{"a": {File: "keys.txt"}, "b": {File: "P2.lis.zst", Format: "arc", Skip: 300000}}
	if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] {
		t.Fatalf("streams %+v, want %+v", got, want)
	}
	if p := e.Path(got["b"].File); p != "/exp/P2.lis.zst" {
		t.Fatalf("path %s", p)
	}
}
