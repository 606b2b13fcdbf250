package trace

import (
	"strings"
	"testing"
)

// Lines in the original release's format (tracegen/trace.json of
// github.com/dasebe/robinhoodcache): no ts_ms, string keys, two backends.
const original = `{"t": 0, "d": [{"39f00c48": {"S": [20881, 26109], "U": ["8d424355000941", "991459718784f945f"], "C": [1, 1]}, "b4fbebd8": {"S": [26109], "U": ["991459718784f945f"], "C": [1]}}]}
{"t": 1, "d": [{"39f00c48": {"S": [20788, 26109], "U": ["48efdeddbe76e5f60", "991459718784f945f"], "C": [1, 1]}, "b4fbebd8": {"S": [20881], "U": ["3430884714871a984"], "C": [1]}}]}`

func TestParseOriginalFormat(t *testing.T) {
	for i, line := range strings.Split(original, "\n") {
		r, err := Parse([]byte(line))
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if r.T != int64(i) || r.HasTs || len(r.Layers) != 1 || len(r.Layers[0]) != 2 {
			t.Fatalf("line %d parsed as %+v", i, r)
		}
		if r.Queries() != 3 {
			t.Fatalf("line %d: %d queries, want 3", i, r.Queries())
		}
		// Round trip: writing and re-reading gives the same request.
		out := AppendJSON(nil, r)
		r2, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse %s: %v", out, err)
		}
		if string(AppendJSON(nil, r2)) != string(out) {
			t.Fatalf("round trip changed the line: %s", out)
		}
	}
}

func TestParseExtras(t *testing.T) {
	r, err := Parse([]byte(`{"t": 3, "ts_ms": 12.5, "d": [{"a": {"S": [1], "U": [42], "C": [0]}}, {"b": {"S": [], "U": [], "C": []}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !r.HasTs || r.TsMs != 12.5 || r.Layers[0][0].Keys[0] != "42" || r.Layers[0][0].Cacheable[0] {
		t.Fatalf("parsed %+v", r)
	}
	got := string(AppendJSON(nil, r))
	want := `{"t": 3, "ts_ms": 12.5, "d": [{"a": {"S": [1], "U": ["42"], "C": [0]}}, {"b": {"S": [], "U": [], "C": []}}]}`
	if got != want {
		t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		`{"t": 1, "d": [{"a": {"S": [1, 2], "U": ["x"], "C": [1]}}]}`:     "d[0].a: S, U and C must have the same length (got 2, 1, 1)",
		`{"t": 1, "d": [{"a": {"S": [-1], "U": ["x"], "C": [1]}}]}`:       "d[0].a.S[0]: size -1 is negative",
		`{"t": 1, "d": [{"a": {"S": [67108865], "U": ["x"], "C": [1]}}]}`: "d[0].a.S[0]: size 67108865 exceeds",
		`{"t": 1, "d": [{"a": {"S": [1.5], "U": ["x"], "C": [1]}}]}`:      `d[0].a.S[0]: "1.5" is not an integer size`,
		`{"t": 1, "d": [{"a": {"S": [1], "U": [""], "C": [1]}}]}`:         "d[0].a.U[0]: empty key",
		`{"t": 1, "d": [{"a": {"S": [1], "U": ["x"], "C": [2]}}]}`:        "d[0].a.C[0]: cacheable flag 2 is not 0 or 1",
		`{"t": 1}`:                       "d: missing",
		`{"t": 1, `:                      "malformed JSON",
		`{"t": 1, "d": []} x`:            "trailing data",
		`{"t": 1, "ts_ms": -4, "d": []}`: "ts_ms",
		`{"t": 1, "d": [{"a": null}]}`:   "d[0].a: null",
	}
	for in, want := range cases {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want error containing %q", in, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, l := range strings.Split(original, "\n") {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		out := AppendJSON(nil, r)
		r2, err := Parse(out)
		if err != nil {
			t.Fatalf("AppendJSON wrote an unparsable line %s: %v", out, err)
		}
		if string(AppendJSON(nil, r2)) != string(out) {
			t.Fatalf("round trip unstable: %s", out)
		}
	})
}

func TestAppendJSONSortsBackends(t *testing.T) {
	r := &Request{T: 1, Layers: []Layer{{
		{Backend: "c", Sizes: []int64{1}, Keys: []string{"x"}, Cacheable: []bool{true}},
		{Backend: "a", Sizes: []int64{2}, Keys: []string{"y"}, Cacheable: []bool{false}},
		{Backend: "b"},
	}}}
	got := string(AppendJSON(nil, r))
	want := `{"t": 1, "d": [{"a": {"S": [2], "U": ["y"], "C": [0]}, "b": {"S": [], "U": [], "C": []}, "c": {"S": [1], "U": ["x"], "C": [1]}}]}`
	if got != want {
		t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
	}
}
