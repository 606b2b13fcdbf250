package config

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// FormatNumber writes a number as every configuration error does, in Go and
// in Python alike: integers in decimal, floats as Python's repr (the
// shortest digits that round-trip; an exponent when below 1e-4 or at least
// 1e16; ".0" on integral values).
func FormatNumber(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mant, exps, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(exps)
	digits := strings.Replace(mant, ".", "", 1)
	if exp >= -4 && exp < 16 {
		if exp >= 0 {
			if len(digits) <= exp+1 {
				return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
			}
			return sign + digits[:exp+1] + "." + digits[exp+1:]
		}
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	m := digits[:1]
	if len(digits) > 1 {
		m += "." + digits[1:]
	}
	return fmt.Sprintf("%s%se%+03d", sign, m, exp)
}

// Quote writes a string as JSON does (Python's json.dumps with
// ensure_ascii=False): the characters " and \ and the control characters
// escaped, everything else as is.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case utf8.RuneError:
			b.WriteString(`\ufffd`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// FormatValue is the canonical text of a configuration value in messages:
// strings quoted, numbers by FormatNumber (integers plain), true, false,
// null, "a mapping", "a list".
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return Quote(x)
	case bool:
		if x {
			return "true"
		}
		return "false"
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return FormatNumber(x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return Quote(fmt.Sprint(v))
}

var addrRE = regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]*):([0-9]{1,5})$`)

// IsAddress reports whether s is host:port with a port in 0-65535 (the host
// may be empty or a bracketed IPv6 address).
func IsAddress(s string) bool {
	m := addrRE.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	p, err := strconv.Atoi(m[2])
	return err == nil && p <= 65535
}

// DurationHint is what a bad duration's message suggests.
const DurationHint = "use e.g. 500ms, 2s, 1m30s"

// SecondsDuration converts seconds to a Duration, rounding half away from
// zero to whole nanoseconds (as robinhood_common.units.seconds_to_ns).
func SecondsDuration(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
