// Package bytesize reads and writes byte sizes as every part of the project
// does (the Python twin is robinhood_common.units; tests/vectors/units.json
// holds the cases both are tested on): a whole number of bytes, or a number
// with a binary unit (KiB, MiB, GiB, TiB: powers of 1024) or a decimal one
// (kB/KB, MB, GB, TB: powers of 1000).
package bytesize

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

var units = map[string]int64{
	"": 1, "B": 1,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"kB": 1000, "KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000, "TB": 1000 * 1000 * 1000 * 1000,
}

var re = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$`)

// Hint is what a bad size's message suggests.
const Hint = "use e.g. 512KiB, 64MiB, 1.5GiB, 1000000"

// Parse returns the bytes of a size; a fraction is rounded down to whole
// bytes, and a fraction of a byte is an error.
func Parse(s string) (int64, error) {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a byte size (%s)", s, Hint)
	}
	unit, ok := units[m[2]]
	if !ok {
		return 0, fmt.Errorf("%q is not a byte size (%s)", s, Hint)
	}
	whole, frac, hasFrac := strings.Cut(m[1], ".")
	if hasFrac && unit == 1 {
		return 0, fmt.Errorf("%q is not a whole number of bytes (%s)", s, Hint)
	}
	w, ok := new(big.Int).SetString(whole, 10)
	if !ok {
		return 0, fmt.Errorf("%q is not a byte size (%s)", s, Hint)
	}
	total := new(big.Int).Mul(w, big.NewInt(unit))
	if hasFrac {
		f, _ := new(big.Int).SetString(frac, 10)
		den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil)
		total.Add(total, new(big.Int).Div(new(big.Int).Mul(f, big.NewInt(unit)), den))
	}
	if !total.IsInt64() {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return total.Int64(), nil
}

// ParseList parses comma-separated sizes.
func ParseList(s string) ([]int64, error) {
	var out []int64
	for _, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		v, err := Parse(item)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Format writes n in the largest binary unit that keeps it at least 1, with
// up to one decimal ("512B", "1.5KiB", "64MiB").
func Format(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size || -n >= u.size {
			text := strconv.FormatFloat(float64(n)/float64(u.size), 'f', 1, 64)
			return strings.TrimSuffix(text, ".0") + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
