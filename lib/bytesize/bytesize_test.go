package bytesize

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The shared vectors (tests/vectors/units.json): the Python implementation
// is tested on the same cases.
func TestVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "vectors", "units.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Parse []struct {
			Text  string `json:"text"`
			Bytes *int64 `json:"bytes"`
			Valid bool   `json:"valid"`
		} `json:"parse_bytes"`
		Format []struct {
			Bytes int64  `json:"bytes"`
			Text  string `json:"text"`
		} `json:"format_bytes"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Parse) < 10 || len(v.Format) < 10 {
		t.Fatal("vectors missing")
	}
	for _, c := range v.Parse {
		got, err := Parse(c.Text)
		if (err == nil) != c.Valid || (c.Valid && got != *c.Bytes) {
			t.Errorf("Parse(%q) = %d, %v; vector says valid=%v bytes=%v", c.Text, got, err, c.Valid, c.Bytes)
		}
	}
	for _, c := range v.Format {
		if got := Format(c.Bytes); got != c.Text {
			t.Errorf("Format(%d) = %q, vector %q", c.Bytes, got, c.Text)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList("1MiB, 4MiB,,16MiB")
	if err != nil || len(got) != 3 || got[2] != 16<<20 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := ParseList("1MiB,lots"); err == nil {
		t.Fatal("accepted lots")
	}
}
