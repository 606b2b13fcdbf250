package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The shared vectors are what Go writes; this keeps them so (the Python
// reader is tested against the same file).
func TestUnitsVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "vectors", "units.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Parse []struct {
			Text  string `json:"text"`
			NS    *int64 `json:"ns"`
			Valid bool   `json:"valid"`
		} `json:"parse_duration"`
		Format []struct {
			NS   int64  `json:"ns"`
			Text string `json:"text"`
		} `json:"format_duration"`
		Numbers []struct {
			Value float64 `json:"value"`
			Text  string  `json:"text"`
		} `json:"format_number"`
		Quote []struct {
			Value string `json:"value"`
			Text  string `json:"text"`
		} `json:"quote"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Parse {
		d, err := time.ParseDuration(c.Text)
		if (err == nil) != c.Valid || (c.Valid && int64(d) != *c.NS) {
			t.Errorf("ParseDuration(%q) = %v, %v; vector says valid=%v ns=%v", c.Text, int64(d), err, c.Valid, c.NS)
		}
	}
	for _, c := range v.Format {
		if got := time.Duration(c.NS).String(); got != c.Text {
			t.Errorf("Duration(%d) = %q, vector %q", c.NS, got, c.Text)
		}
	}
	for _, c := range v.Numbers {
		if got := FormatNumber(c.Value); got != c.Text {
			t.Errorf("FormatNumber(%v) = %q, vector %q", c.Value, got, c.Text)
		}
	}
	for _, c := range v.Quote {
		if got := Quote(c.Value); got != c.Text {
			t.Errorf("Quote(%q) = %q, vector %q", c.Value, got, c.Text)
		}
	}
	if len(v.Parse) < 20 || len(v.Numbers) < 10 {
		t.Fatal("vectors missing")
	}
}
