package trace

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// randomRequest builds a request in the plain form parseFast handles.
func randomRequest(rng *rand.Rand) *Request {
	r := &Request{T: rng.Int64N(1 << 40)}
	if rng.IntN(2) == 0 {
		r.TsMs, r.HasTs = float64(rng.IntN(1e6))/8, true
	}
	nl := rng.IntN(3)
	r.Layers = make([]Layer, 0, nl)
	for range nl {
		nb := rng.IntN(4)
		l := make(Layer, 0, nb)
		names := map[string]bool{}
		for range nb {
			name := "b" + strconv.Itoa(rng.IntN(6))
			if names[name] {
				continue
			}
			names[name] = true
			n := rng.IntN(6)
			q := BackendQueries{Backend: name, Sizes: make([]int64, n), Keys: make([]string, n), Cacheable: make([]bool, n)}
			for i := range n {
				q.Sizes[i] = rng.Int64N(MaxObjectSize + 1)
				if rng.IntN(3) == 0 {
					q.Keys[i] = strconv.Itoa(rng.IntN(1e9))
				} else {
					q.Keys[i] = "key/" + strconv.Itoa(rng.IntN(1e6)) + "-x_y.z"
				}
				q.Cacheable[i] = rng.IntN(4) != 0
			}
			l = append(l, q)
		}
		r.Layers = append(r.Layers, l)
	}
	return r
}

// Lines written by AppendJSON in the plain form take the fast path
// and give exactly what parseSlow gives.
func TestParseFastAgreesWithParseSlow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		line := AppendJSON(nil, randomRequest(rng))
		fast, ok := parseFast(line)
		if !ok {
			t.Fatalf("case %d: the fast path refused a plain line: %s", i, line)
		}
		slow, err := parseSlow(line)
		if err != nil {
			t.Fatalf("case %d: parseSlow: %v", i, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("case %d: fast %+v, parseSlow %+v\n%s", i, fast, slow, line)
		}
	}
}

var parseSeeds = []string{
	`{"t": 1, "d": [{"a": {"S": [1, 2], "U": ["k", 7], "C": [1, 0]}}]}`,
	`{"d":[{"b":{"S":[0],"U":["x"],"C":[true]},"a":{"S":[],"U":[],"C":[]}}],"t":-3,"ts_ms":1.5e2}`,
	` {"t": 0, "d": []} `,
	`{"t": 1, "d": [{}]}`,
	`{"t": 1.5, "d": []}`,
	`{"t": "5", "d": []}`,
	`{"T": 1, "d": []}`,
	`{"t": 1, "d": [{"a": {"s": [1], "U": ["k"], "C": [1]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [1], "U": ["k"], "C": [1]}, "a": {"S": [2], "U": ["j"], "C": [0]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [-1], "U": ["k"], "C": [1]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [67108865], "U": ["k"], "C": [1]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [1], "U": [""], "C": [1]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [1], "U": ["k\u0041"], "C": [1]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [1], "U": ["k"], "C": [2]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [1], "U": ["k"], "C": [10]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [01], "U": ["k"], "C": [1]}}]}`,
	`{"t": 1, "d": [{"a": null}]}`,
	`{"t": 1, "d": [null]}`,
	`{"t": 1, "d": null}`,
	`{"t": 1}`,
	`{"t": 1, "d": []} x`,
	`{"t": 1, "d": [], "d": [{}]}`,
	`{"t": 1, "ts_ms": -1, "d": []}`,
	`{"t": 1, "ts_ms": 1e999, "d": []}`,
	`{"t": 1, "d": [{"a": {"S": [1], "U": [1e3], "C": [1]}}]}`,
	`{"t": 1, "d": [{"a": {"S": [1], "U": [-0], "C": [false]}}]}`,
}

func TestParseFastSeeds(t *testing.T) {
	for _, s := range parseSeeds {
		checkFast(t, []byte(s))
	}
	// The plain cases do take the fast path.
	for _, s := range parseSeeds[:4] {
		if _, ok := parseFast([]byte(s)); !ok {
			t.Errorf("fast path refused %s", s)
		}
	}
}

func checkFast(t *testing.T, line []byte) {
	fast, ok := parseFast(line)
	if !ok {
		return
	}
	slow, err := parseSlow(line)
	if err != nil {
		t.Fatalf("fast path accepted what parseSlow rejects (%v): %q", err, line)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast %+v, parseSlow %+v for %q", fast, slow, line)
	}
}

// Whenever the fast path accepts a line, parseSlow returns the same
// request.
func FuzzParseFast(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(AppendJSON(nil, randomRequest(rng)))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkFast(t, line)
	})
}

// Every malformed line gets parseSlow's message.
func TestParseErrorsAreParseSlows(t *testing.T) {
	for _, s := range parseSeeds {
		_, err1 := Parse([]byte(s))
		_, err2 := parseSlow([]byte(s))
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Errorf("%s: Parse %v, parseSlow %v", s, err1, err2)
		}
	}
	if _, err := Parse([]byte(strings.Repeat("[", 10))); err == nil {
		t.Fatal("accepted garbage")
	}
}

func BenchmarkParse(b *testing.B) {
	line := []byte(`{"t": 12, "d": [{"b0": {"S": [1000, 1000, 1000, 1000], "U": ["0", "7", "14", "21"], "C": [1, 1, 1, 1]}, "b1": {"S": [1000, 1000, 1000], "U": ["0", "7", "14"], "C": [1, 1, 1]}, "b2": {"S": [1000, 1000, 1000], "U": ["0", "7", "14"], "C": [1, 1, 1]}}]}`)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, ok := parseFast(line); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("slow", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseSlow(line); err != nil {
				b.Fatal(err)
			}
		}
	})
}
