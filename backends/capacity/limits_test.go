package capacity

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePatchPartial(t *testing.T) {
	p, err := ParsePatch([]byte(` {"rate": 250.5, "workers": 4.0, "hiccup_prob": 1e-2} `))
	if err != nil {
		t.Fatal(err)
	}
	start := Limits{Workers: 1, Rate: 1, ExtraLatencyMs: 3, HiccupProb: 0, HiccupMs: 7, QueueLimit: 9}
	got := p.Apply(start)
	want := Limits{Workers: 4, Rate: 250.5, ExtraLatencyMs: 3, HiccupProb: 0.01, HiccupMs: 7, QueueLimit: 9}
	if got != want {
		t.Fatalf("applied patch = %+v, want %+v", got, want)
	}
	empty, err := ParsePatch([]byte(`{}`))
	if err != nil || empty.Apply(start) != start {
		t.Fatalf("empty object: %v, %+v", err, empty.Apply(start))
	}
}

func TestParsePatchRejects(t *testing.T) {
	cases := []struct {
		body string
		// every fragment must appear in the error message
		want []string
	}{
		{`{"workers": 4`, []string{"malformed JSON"}},
		{``, []string{"malformed JSON"}},
		{`[1, 2]`, []string{"malformed JSON"}},
		{`null`, []string{"malformed JSON", "null"}},
		{`{"workers": 4} {"rate": 1}`, []string{"malformed JSON", "trailing"}},
		{`{"wrokers": 4}`, []string{"wrokers", "unknown field", "4"}},
		{`{"workers": "4"}`, []string{"workers", `"4"`, "number"}},
		{`{"workers": null}`, []string{"workers", "null"}},
		{`{"workers": 2.5}`, []string{"workers", "2.5", "integer"}},
		{`{"workers": 0}`, []string{"workers", "0"}},
		{`{"workers": -1}`, []string{"workers", "-1"}},
		{`{"workers": 1e12}`, []string{"workers", "1000000000000"}},
		{`{"rate": -10}`, []string{"rate", "-10"}},
		{`{"rate": true}`, []string{"rate", "true"}},
		{`{"extra_latency_ms": -1}`, []string{"extra_latency_ms", "-1"}},
		{`{"hiccup_prob": 1.5}`, []string{"hiccup_prob", "1.5"}},
		{`{"hiccup_ms": -2}`, []string{"hiccup_ms", "-2"}},
		{`{"queue_limit": 0.5}`, []string{"queue_limit", "0.5"}},
		{`{"rate": 5, "hiccup_prob": 2}`, []string{"hiccup_prob", "2"}},
	}
	for _, c := range cases {
		_, err := ParsePatch([]byte(c.body))
		if err == nil {
			t.Errorf("%s: accepted", c.body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.body, err, w)
			}
		}
	}
	var fe *FieldError
	if _, err := ParsePatch([]byte(`{"hiccup_prob": 3}`)); !errors.As(err, &fe) || fe.Field != FieldHiccupProb {
		t.Fatalf("want a FieldError on hiccup_prob, got %v", err)
	}
	if _, err := ParsePatch([]byte(`{`)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("want ErrMalformed, got %v", err)
	}
}

func TestLimitsGetCoversEveryField(t *testing.T) {
	l := Limits{Workers: 1, Rate: 2, ExtraLatencyMs: 3, HiccupProb: 0.4, HiccupMs: 5, QueueLimit: 6}
	want := map[string]float64{"workers": 1, "rate": 2, "extra_latency_ms": 3, "hiccup_prob": 0.4, "hiccup_ms": 5, "queue_limit": 6}
	for _, f := range Fields {
		v, ok := l.Get(f)
		if !ok || v != want[f] {
			t.Errorf("Get(%s) = %v, %v", f, v, ok)
		}
		delete(want, f)
	}
	if len(want) != 0 {
		t.Fatalf("Fields misses %v", want)
	}
	if _, ok := l.Get("nope"); ok {
		t.Fatal("Get accepted an unknown field")
	}
}
