package dispatch

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
)

func TestParamsDefaultsAndOverrides(t *testing.T) {
	p, err := Params(config.Dispatch{Policy: "d-hedge"})
	if err != nil {
		t.Fatal(err)
	}
	if got := *p.(*DHedgeParams); got.Budget != 0.1 || got.Delay.D() != 10*time.Millisecond || got.BudgetWindow.D() != DefaultBudgetWindow {
		t.Fatalf("defaults: %+v", got)
	}
	p, err = Params(config.Dispatch{Policy: "d-hedge", Params: map[string]any{"delay": "3ms", "budget": 0.5, "cancel": false}})
	if err != nil {
		t.Fatal(err)
	}
	if got := *p.(*DHedgeParams); got.Budget != 0.5 || got.Delay.D() != 3*time.Millisecond || got.Cancel || got.Samples == 0 {
		t.Fatalf("overrides (the embedded budget's too): %+v", got)
	}
	p, err = Params(config.Dispatch{Policy: "psq", Params: map[string]any{"n": int64(4)}})
	if err != nil || p.(*PSQParams).N != 4 {
		t.Fatalf("psq n: %+v %v", p, err)
	}
	if p, err := Params(config.Dispatch{Policy: "random"}); p != nil || err != nil {
		t.Fatalf("random takes no parameters: %v %v", p, err)
	}
	// What Params returns is what New takes.
	p, _ = Params(config.Dispatch{Policy: "hedge", Params: map[string]any{"budget": 0.25}})
	m, err := New("hedge", p, Env{Replicas: 2})
	if err != nil || m.Budget().Ratio != 0.25 {
		t.Fatalf("New with decoded parameters: %v %+v", err, m.Budget())
	}
}

func TestParamsErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		spec config.Dispatch
		want string
	}{
		{config.Dispatch{Policy: "psq", Params: map[string]any{"m": int64(1)}}, "m: unknown parameter of policy psq (known: n)"},
		{config.Dispatch{Policy: "d-hedge", Params: map[string]any{"budgets": 1.0}}, "budgets: unknown parameter of policy d-hedge (known: budget, budget_window, delay, percentile, samples, cancel)"},
		{config.Dispatch{Policy: "psq", Params: map[string]any{"n": "one"}}, `n: "one" is not an integer`},
		{config.Dispatch{Policy: "psq", Params: map[string]any{"n": int64(0)}}, "n: 0 is out of range [1, 1000]"},
		{config.Dispatch{Policy: "hedge", Params: map[string]any{"cancel": "yes"}}, `cancel: "yes" is not true or false`},
		{config.Dispatch{Policy: "hedge", Params: map[string]any{"budget": int64(11)}}, "budget: 11 is out of range [0, 10]"},
		{config.Dispatch{Policy: "d-hedge", Params: map[string]any{"delay": "soon"}}, `delay: "soon" is not a duration`},
		{config.Dispatch{Policy: "d-hedge", Params: map[string]any{"delay": int64(5)}}, `delay: 5 is not a duration`},
		{config.Dispatch{Policy: "singler", Params: map[string]any{"q_rule": "made_up"}}, "q_rule"},
		{config.Dispatch{Policy: "random", Params: map[string]any{"tries": int64(2)}}, "tries: unknown parameter (policy random takes none)"},
		{config.Dispatch{Policy: "nope"}, `policy: "nope" is not one of ` + strings.Join(Names(), ", ")},
	} {
		_, err := Params(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.spec, err, c.want)
		}
	}
}

func TestDescribeListsEveryPolicy(t *testing.T) {
	ds := Describe()
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
		if d.Summary == "" {
			t.Errorf("%s: no summary", d.Name)
		}
		for _, p := range d.Params {
			if p.Doc == "" || p.Type == "" {
				t.Errorf("%s.%s: no doc or type (json and doc tags)", d.Name, p.Name)
			}
		}
	}
	if !slices.Equal(names, Names()) || !slices.IsSorted(names) {
		t.Fatalf("Describe lists %v, the registry %v", names, Names())
	}
	for _, d := range ds {
		if d.Name != "d-hedge" {
			continue
		}
		if len(d.Params) != 6 || d.Params[0].Name != "budget" || d.Params[0].Default != 0.1 || d.Params[2].Name != "delay" ||
			d.Params[2].Default != "10ms" || d.Params[2].Type != "duration" ||
			d.Params[2].Minimum != "0s" || d.Params[2].Maximum != "1m" || d.Params[3].Maximum != int64(100) || !d.Params[3].ExclusiveMaximum {
			t.Fatalf("d-hedge: %+v", d.Params)
		}
	}
}

// Every declaration is checked: a value just outside each declared bound is
// refused naming the parameter, the bound itself as declared, and NaN
// always.
func TestDeclaredRangesAreEnforced(t *testing.T) {
	checked := 0
	for _, d := range Describe() {
		for _, p := range d.Params {
			if p.Minimum == nil && p.Enum == nil {
				continue
			}
			var bad []any
			switch p.Type {
			case "duration":
				lo, _ := time.ParseDuration(p.Minimum.(string))
				hi, _ := time.ParseDuration(p.Maximum.(string))
				bad = []any{(hi + time.Millisecond).String()}
				if lo > 0 {
					bad = append(bad, (lo - time.Microsecond).String())
				}
			case "string":
				bad = []any{"not-a-" + p.Name}
			case "integer":
				bad = []any{toInt(p.Minimum) - 1, toInt(p.Maximum) + 1}
			case "number":
				bad = []any{toFloat(p.Minimum) - 0.5, toFloat(p.Maximum) + 0.5, math.NaN()}
				if p.ExclusiveMinimum {
					bad = append(bad, toFloat(p.Minimum))
				}
				if p.ExclusiveMaximum {
					bad = append(bad, toFloat(p.Maximum))
				}
			}
			for _, v := range bad {
				_, err := Params(config.Dispatch{Policy: d.Name, Params: map[string]any{p.Name: v}})
				if err == nil || !strings.HasPrefix(err.Error(), p.Name+": ") {
					t.Errorf("%s %s = %v: got %v, want an error naming it", d.Name, p.Name, v, err)
				}
				checked++
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d bad values tried", checked)
	}
}

func toInt(v any) int64 {
	if i, ok := v.(int64); ok {
		return i
	}
	return int64(v.(float64))
}

func toFloat(v any) float64 {
	if i, ok := v.(int64); ok {
		return float64(i)
	}
	return v.(float64)
}
