package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Every line gets one answer line, a bad one an error naming what was
// wrong; the process ends when its input does.
func TestServesLines(t *testing.T) {
	in := strings.Join([]string{
		`{"op":"capacity","limits":[{"workers":8,"rate":150}]}`,
		`{"op":"plan","budget_mb":64,"floor_mb":8,"target":0.8,"app_servers":1,"backends":[{"name":"a","cacheable_rate":100,"capacity":"Infinity","alloc_mb":64}]}`,
		`{"op":"nope"}`,
		`not json`,
		`{"op":"plan","budget_mb":64,"unknown":1}`,
		`{"op":"plan","budget_mb":64,"floor_mb":8,"target":2,"app_servers":1,"backends":[{"name":"a","capacity":1}]}`,
		"\"" + strings.Repeat("x", maxLine+10) + "\"",
	}, "\n") + "\n"
	var out, errOut bytes.Buffer
	if rc := run(nil, strings.NewReader(in), &out, &errOut); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{"", "", `op: \"nope\"`, "request: proto", "unknown", "target: 2 is not in (0, 1]", "a line over 16 MiB"}
	if len(lines) != len(want) {
		t.Fatalf("%d answers for %d requests: %s", len(lines), len(want), out.String())
	}
	for i, l := range lines {
		var a struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("answer %d is not JSON: %s", i, l)
		}
		if want[i] == "" && !a.OK || want[i] != "" && (a.OK || !strings.Contains(l, want[i])) {
			t.Errorf("answer %d: %s, want %q", i, l, want[i])
		}
	}
}

func TestVersionAndArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	if rc := run([]string{"--version"}, strings.NewReader(""), &out, &errOut); rc != 0 || !strings.Contains(out.String(), "v1") {
		t.Fatalf("%d %q", rc, out.String())
	}
	if rc := run([]string{"extra"}, strings.NewReader(""), &out, &errOut); rc != 2 {
		t.Fatalf("an argument: exit %d", rc)
	}
}
