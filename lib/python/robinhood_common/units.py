"""Durations, byte sizes and the canonical text of a value, exactly as the Go side.

Durations are Go duration strings ("500ms", "5s", "1m30s"): :func:`parse_duration_ns`
accepts what Go's ``time.ParseDuration`` accepts, with the same nanosecond result, and
:func:`format_duration` writes what Go's ``time.Duration.String`` writes, so one
topology file means the same thing to every component. :func:`format_value` is how
every configuration error shows a value (the Go reader in ``lib/config`` writes the
same text). ``tests/vectors/units.json`` holds the cases both languages are tested on.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

_UNITS_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # µs, MICRO SIGN
    "\u03bcs": 1_000,  # μs, GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_MAX_NS = (1 << 63) - 1
DURATION_HINT = "use e.g. 500ms, 2s, 1m30s"


def parse_duration_ns(text: str) -> int:
    """Nanoseconds of a Go duration string; ValueError naming the text otherwise.

    The grammar is Go's: an optional sign, then one or more decimal numbers each with a
    unit (ns, us, µs, ms, s, m, h), e.g. "1h2m3.5s"; "0" alone is zero.
    """
    if not isinstance(text, str):
        raise ValueError(f"{format_value(text)} is not a duration ({DURATION_HINT})")
    orig, s = text, text
    neg = False
    if s[:1] in ("-", "+"):
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"{format_value(orig)} is not a duration ({DURATION_HINT})")
    total = 0
    while s:
        if not (s[0] == "." or s[0].isascii() and s[0].isdigit()):
            raise ValueError(f"{format_value(orig)} is not a duration ({DURATION_HINT})")
        m = re.match(r"[0-9]*", s)
        assert m is not None
        whole, s = m.group(0), s[m.end():]
        frac = ""
        if s[:1] == ".":
            m = re.match(r"[0-9]*", s[1:])
            assert m is not None
            frac, s = m.group(0), s[1 + m.end():]
            if not whole and not frac:
                raise ValueError(f"{format_value(orig)} is not a duration ({DURATION_HINT})")
        i = 0
        while i < len(s) and not (s[i] == "." or s[i].isascii() and s[i].isdigit()):
            i += 1
        unit, s = s[:i], s[i:]
        if unit not in _UNITS_NS:
            raise ValueError(f"{format_value(orig)} is not a duration ({DURATION_HINT})")
        scale = _UNITS_NS[unit]
        v = int(whole or "0")
        if v > (1 << 63) // scale:
            raise ValueError(f"{format_value(orig)} is out of range")
        v *= scale
        # Go's leadingFraction: accumulate digits while the value fits, then its
        # float64 product (nanosecond-accurate for fractions of hours).
        f, fscale = 0, 1.0
        overflow = False
        for ch in frac:
            if overflow:
                continue
            if f > ((1 << 63) - 1) // 10:
                overflow = True
                continue
            y = f * 10 + int(ch)
            if y > 1 << 63:
                overflow = True
                continue
            f, fscale = y, fscale * 10
        if f > 0:
            v += int(float(f) * (float(scale) / fscale))
            if v > 1 << 63:
                raise ValueError(f"{format_value(orig)} is out of range")
        total += v
        if total > 1 << 63:
            raise ValueError(f"{format_value(orig)} is out of range")
    if neg:
        return -total
    if total > _MAX_NS:
        raise ValueError(f"{format_value(orig)} is out of range")
    return total


def parse_duration(text: str) -> float:
    """Seconds of a Go duration string (nanoseconds / 1e9, as Go's Duration.Seconds)."""
    return parse_duration_ns(text) / 1e9


def _fmt_frac(v: int, prec: int) -> tuple[str, int]:
    digits: list[str] = []
    printed = False
    for _ in range(prec):
        d = v % 10
        printed = printed or d != 0
        if printed:
            digits.append(str(d))
        v //= 10
    return ("." + "".join(reversed(digits)) if printed else ""), v


def format_duration_ns(ns: int) -> str:
    """What Go's time.Duration(ns).String() writes ("1m30s", "250ms", "1.5µs")."""
    neg = ns < 0
    u = -ns if neg else ns
    if u < 1_000_000_000:
        if u == 0:
            return "0s"
        if u < 1_000:
            prec, unit = 0, "ns"
        elif u < 1_000_000:
            prec, unit = 3, "\u00b5s"
        else:
            prec, unit = 6, "ms"
        frac, u = _fmt_frac(u, prec)
        out = f"{u}{frac}{unit}"
    else:
        frac, u = _fmt_frac(u, 9)
        out = f"{u % 60}{frac}s"
        u //= 60
        if u > 0:
            out = f"{u % 60}m{out}"
            u //= 60
            if u > 0:
                out = f"{u}h{out}"
    return "-" + out if neg else out


def seconds_to_ns(seconds: float) -> int:
    """Seconds as whole nanoseconds, rounded half away from zero (Go: math.Round)."""
    x = seconds * 1e9
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def format_duration(seconds: float) -> str:
    """The Go duration string of a number of seconds (format_duration(90) == "1m30s")."""
    return format_duration_ns(seconds_to_ns(seconds))


_BYTE_UNITS: dict[str, int] = {
    "": 1, "B": 1,
    "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
    "kB": 1000, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4,
}
_BYTES_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
BYTES_HINT = "use e.g. 512KiB, 64MiB, 1.5GiB, 1000000"


def parse_bytes(text: str | int) -> int:
    """Bytes of a size: a whole number, or a number with a unit - binary KiB, MiB, GiB,
    TiB (powers of 1024) or decimal kB/KB, MB, GB, TB (powers of 1000). A fraction is
    rounded down to whole bytes. ValueError naming the text otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"{format_value(text)} is not a byte size ({BYTES_HINT})")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{text} is negative")
        return text
    if not isinstance(text, str):
        raise ValueError(f"{format_value(text)} is not a byte size ({BYTES_HINT})")
    m = _BYTES_RE.match(text)
    if m is None or m.group(2) not in _BYTE_UNITS:
        raise ValueError(f"{format_value(text)} is not a byte size ({BYTES_HINT})")
    num, unit = m.group(1), _BYTE_UNITS[m.group(2)]
    if "." in num and unit == 1:
        raise ValueError(f"{format_value(text)} is not a whole number of bytes ({BYTES_HINT})")
    if "." in num:
        whole, frac = num.split(".")
        return int(whole) * unit + int(frac) * unit // 10 ** len(frac)
    return int(num) * unit


def format_bytes(n: int) -> str:
    """A byte count in the largest binary unit that keeps it at least 1, with up to one
    decimal ("512B", "1.5KiB", "64MiB")."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            v = n / size
            text = f"{v:.1f}".removesuffix(".0")
            return f"{text}{unit}"
    return f"{n}B"


def format_number(x: float | int) -> str:
    """A number as every error message writes it: integers in decimal, floats as
    Python's repr (shortest round-trip digits; exponent when < 1e-4 or ≥ 1e16)."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def format_value(v: Any) -> str:
    """The canonical text of a configuration value in messages: strings quoted as JSON,
    numbers by :func:`format_number`, true/false/null, "a mapping"/"a list"."""
    if v is None:
        return "null"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (bool, int, float)):
        return format_number(v)
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, (list, tuple)):
        return "a list"
    return json.dumps(str(v), ensure_ascii=False)
