package capacity

import (
	"errors"
	"testing"
)

// PUT /admin/limits bodies: whatever the bytes, ParsePatch either returns a
// patch whose application to valid limits validates or fails Validate with a
// *FieldError, or fails itself with ErrMalformed or a *FieldError; it never
// panics.
func FuzzParsePatch(f *testing.F) {
	for _, s := range []string{`{"workers": 4}`, `{"rate": 1e-300}`, `{"rate": 0, "hiccup_prob": 1}`, `{}`, `null`, `[]`,
		`{"workers": 4.5}`, `{"queue_limit": -1}`, `{"nope": 1}`, `{"rate": "x"}`, `{"extra_latency_ms": 1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParsePatch(body)
		if err != nil {
			var fe *FieldError
			if !errors.Is(err, ErrMalformed) && !errors.As(err, &fe) {
				t.Fatalf("ParsePatch(%q): %v is neither ErrMalformed nor a *FieldError", body, err)
			}
			return
		}
		next := p.Apply(DefaultLimits())
		if err := next.Validate(); err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate after %q: %v is not a *FieldError", body, err)
			}
		}
	})
}
