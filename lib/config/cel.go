package config

import (
	"fmt"
	"regexp"
	"sort"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// The CEL environment of x-rules: self, root, key, index, before, and the
// functions sum, keys, q, num and dur (docs/architecture.md). The Python
// reader declares the same.
var (
	celOnce sync.Once
	celEnv  *cel.Env
	celErr  error
	progMu  sync.Mutex
	progs   = map[string]cel.Program{}
)

func env() (*cel.Env, error) {
	celOnce.Do(func() {
		dyn := []*cel.Type{cel.DynType}
		celEnv, celErr = cel.NewEnv(
			cel.Variable("self", cel.DynType),
			cel.Variable("root", cel.DynType),
			cel.Variable("key", cel.StringType),
			cel.Variable("index", cel.IntType),
			cel.Variable("before", cel.ListType(cel.DynType)),
			cel.Function("sum", cel.Overload("sum_dyn", dyn, cel.DynType, cel.UnaryBinding(celSum))),
			cel.Function("keys", cel.Overload("keys_dyn", dyn, cel.ListType(cel.StringType), cel.UnaryBinding(celKeys))),
			cel.Function("flatten", cel.Overload("flatten_dyn", dyn, cel.ListType(cel.DynType), cel.UnaryBinding(celFlatten))),
			cel.Function("dups", cel.Overload("dups_dyn", dyn, cel.ListType(cel.DynType), cel.UnaryBinding(celDups))),
			cel.Function("pluck", cel.Overload("pluck_dyn_string", []*cel.Type{cel.DynType, cel.StringType}, cel.ListType(cel.DynType), cel.BinaryBinding(celPluck))),
			cel.Function("values", cel.Overload("values_dyn", dyn, cel.ListType(cel.DynType), cel.UnaryBinding(celValues))),
			cel.Function("dupindex", cel.Overload("dupindex_dyn", dyn, cel.IntType, cel.UnaryBinding(celDupIndex))),
			cel.Function("overlap", cel.Overload("overlap_dyn", dyn, cel.ListType(cel.DynType), cel.UnaryBinding(celOverlap))),
			cel.Function("minus", cel.Overload("minus_dyn_dyn", []*cel.Type{cel.DynType, cel.DynType}, cel.ListType(cel.DynType), cel.BinaryBinding(celMinus))),
			cel.Function("q", cel.Overload("q_dyn", dyn, cel.StringType, cel.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.Value().(string)
				if !ok {
					s = fmt.Sprint(v.Value())
				}
				return types.String(Quote(s))
			}))),
			cel.Function("num", cel.Overload("num_dyn", dyn, cel.StringType, cel.UnaryBinding(func(v ref.Val) ref.Val {
				switch x := v.(type) {
				case types.Int:
					return types.String(fmt.Sprint(int64(x)))
				case types.Double:
					return types.String(FormatNumber(float64(x)))
				}
				return types.NewErr("num: %v is not a number", v.Type())
			}))),
			cel.Function("dur", cel.Overload("dur_dyn", dyn, cel.StringType, cel.UnaryBinding(func(v ref.Val) ref.Val {
				switch x := v.(type) {
				case types.Double:
					return types.String(SecondsDuration(float64(x)).String())
				case types.Int:
					return types.String(SecondsDuration(float64(x)).String())
				}
				return types.NewErr("dur: %v is not a number of seconds", v.Type())
			}))),
		)
	})
	return celEnv, celErr
}

func celSum(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("sum: %v is not a list", v.Type())
	}
	var ints int64
	var dbl float64
	isDouble := false
	it := l.Iterator()
	for it.HasNext() == types.True {
		switch x := it.Next().(type) {
		case types.Int:
			ints += int64(x)
			dbl += float64(x)
		case types.Double:
			isDouble = true
			dbl += float64(x)
		default:
			return types.NewErr("sum: %v is not a number", x.Type())
		}
	}
	if isDouble {
		return types.Double(dbl)
	}
	return types.Int(ints)
}

// celFlatten concatenates a list of lists.
func celFlatten(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("flatten: %v is not a list", v.Type())
	}
	var out []ref.Val
	it := l.Iterator()
	for it.HasNext() == types.True {
		inner, ok := it.Next().(traits.Lister)
		if !ok {
			return types.NewErr("flatten: an item is not a list")
		}
		in := inner.Iterator()
		for in.HasNext() == types.True {
			out = append(out, in.Next())
		}
	}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// celPluck returns the field of every map in a list that has it, in order:
// `key in pluck(root.backends, 'name')` is one native call where a
// comprehension would be interpreted item by item.
func celPluck(list, field ref.Val) ref.Val {
	l, ok := list.(traits.Lister)
	if !ok {
		return types.NewErr("pluck: %v is not a list", list.Type())
	}
	var out []ref.Val
	it := l.Iterator()
	for it.HasNext() == types.True {
		m, ok := it.Next().(traits.Mapper)
		if !ok {
			return types.NewErr("pluck: an item is not a map")
		}
		if v, found := m.Find(field); found {
			out = append(out, v)
		}
	}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// celValues returns a map's values in the order of its sorted keys (the
// order of keys()).
func celValues(v ref.Val) ref.Val {
	m, ok := v.(traits.Mapper)
	if !ok {
		return types.NewErr("values: %v is not a map", v.Type())
	}
	ks, ok := celKeys(v).(traits.Lister)
	if !ok {
		return celKeys(v)
	}
	var out []ref.Val
	it := ks.Iterator()
	for it.HasNext() == types.True {
		out = append(out, m.Get(it.Next()))
	}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// seenSet is a set of CEL values: hashed for scalars (keyed by type and
// value), compared one by one for lists and maps.
type seenSet struct {
	hashed map[any]bool
	other  []ref.Val
}

func newSeen() *seenSet { return &seenSet{hashed: map[any]bool{}} }

type hkey struct {
	t string
	v any
}

func hashKey(x ref.Val) (hkey, bool) {
	switch x.(type) {
	case types.String, types.Int, types.Uint, types.Double, types.Bool:
		return hkey{string(x.Type().(ref.Type).TypeName()), x.Value()}, true
	}
	return hkey{}, false
}

func (s *seenSet) has(x ref.Val) bool {
	if k, ok := hashKey(x); ok {
		return s.hashed[k]
	}
	for _, y := range s.other {
		if y.Equal(x) == types.True {
			return true
		}
	}
	return false
}

func (s *seenSet) add(x ref.Val) {
	if k, ok := hashKey(x); ok {
		s.hashed[k] = true
		return
	}
	s.other = append(s.other, x)
}

// celDups returns the values of a list that occur more than once, each once,
// in the order in which they first occur again.
func celDups(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("dups: %v is not a list", v.Type())
	}
	seen, rep := newSeen(), newSeen()
	var out []ref.Val
	it := l.Iterator()
	for it.HasNext() == types.True {
		x := it.Next()
		if seen.has(x) {
			if !rep.has(x) {
				rep.add(x)
				out = append(out, x)
			}
			continue
		}
		seen.add(x)
	}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// celDupIndex returns the index of the first item equal to an earlier one,
// -1 when all differ.
func celDupIndex(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("dupindex: %v is not a list", v.Type())
	}
	seen := newSeen()
	it := l.Iterator()
	for i := int64(0); it.HasNext() == types.True; i++ {
		x := it.Next()
		if seen.has(x) {
			return types.Int(i)
		}
		seen.add(x)
	}
	return types.Int(-1)
}

// celMinus returns the items of the first list that the second does not
// hold, in order.
func celMinus(a, b ref.Val) ref.Val {
	la, ok := a.(traits.Lister)
	lb, ok2 := b.(traits.Lister)
	if !ok || !ok2 {
		return types.NewErr("minus: %v and %v are not both lists", a.Type(), b.Type())
	}
	drop := newSeen()
	for it := lb.Iterator(); it.HasNext() == types.True; {
		drop.add(it.Next())
	}
	var out []ref.Val
	for it := la.Iterator(); it.HasNext() == types.True; {
		if x := it.Next(); !drop.has(x) {
			out = append(out, x)
		}
	}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// celOverlap returns [j, x] for the first list j holding an item x that an
// earlier list holds (x its first such item), [] when no two lists share an
// item; repeats within one list do not count.
func celOverlap(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("overlap: %v is not a list", v.Type())
	}
	earlier := newSeen()
	it := l.Iterator()
	for j := int64(0); it.HasNext() == types.True; j++ {
		inner, ok := it.Next().(traits.Lister)
		if !ok {
			return types.NewErr("overlap: an item is not a list")
		}
		var items []ref.Val
		in := inner.Iterator()
		for in.HasNext() == types.True {
			x := in.Next()
			if earlier.has(x) {
				return types.DefaultTypeAdapter.NativeToValue([]ref.Val{types.Int(j), x})
			}
			items = append(items, x)
		}
		for _, x := range items {
			earlier.add(x)
		}
	}
	return types.DefaultTypeAdapter.NativeToValue([]ref.Val{})
}

func celKeys(v ref.Val) ref.Val {
	m, ok := v.(traits.Mapper)
	if !ok {
		return types.NewErr("keys: %v is not a map", v.Type())
	}
	var ks []string
	it := m.Iterator()
	for it.HasNext() == types.True {
		k, ok := it.Next().Value().(string)
		if !ok {
			return types.NewErr("keys: the map has a key that is not a string")
		}
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return types.DefaultTypeAdapter.NativeToValue(ks)
}

var letCallRE = regexp.MustCompile(`\s*\(`)

// substitute replaces the names of x-let with their parenthesised
// expressions, as many times as lets use lets.
func substitute(expr string, lets map[string]string) (string, error) {
	names := make([]string, 0, len(lets))
	for n := range lets {
		names = append(names, n)
	}
	sort.Strings(names)
	for range 8 {
		out := expr
		for _, n := range names {
			re := regexp.MustCompile(`\b` + regexp.QuoteMeta(n) + `\b`)
			out = replaceNotCall(re, out, "("+lets[n]+")")
		}
		if out == expr {
			return out, nil
		}
		expr = out
	}
	return "", fmt.Errorf("x-let definitions nest too deeply in %q", expr)
}

// replaceNotCall replaces the matches of re that are not followed by "(".
func replaceNotCall(re *regexp.Regexp, s, with string) string {
	var b []byte
	last := 0
	for _, m := range re.FindAllStringIndex(s, -1) {
		if loc := letCallRE.FindStringIndex(s[m[1]:]); loc != nil && loc[0] == 0 {
			continue
		}
		b = append(b, s[last:m[0]]...)
		b = append(b, with...)
		last = m[1]
	}
	return string(append(b, s[last:]...))
}

func program(expr string) (cel.Program, error) {
	progMu.Lock()
	defer progMu.Unlock()
	if p, ok := progs[expr]; ok {
		return p, nil
	}
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("CEL expression %q does not compile: %w", expr, iss.Err())
	}
	p, err := e.Program(ast)
	if err != nil {
		return nil, fmt.Errorf("CEL expression %q: %w", expr, err)
	}
	progs[expr] = p
	return p, nil
}
