"""Go-style duration strings ("500ms", "5s", "1m30s"), as the topology file writes them.

The Go components parse the same strings with time.ParseDuration; this module accepts
the same units so one topology file means the same thing to every component.
"""
from __future__ import annotations

import re

_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Parse a Go duration string into seconds.

    Accepts what Go's time.ParseDuration accepts: an optional sign and a sequence of
    decimal numbers with units ns, us (µs), ms, s, m, h ("1h2m3.5s"). "0" alone is zero.
    Raises ValueError with the offending text otherwise.
    """
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration string (use e.g. 500ms, 5s)")
    s = text.strip()
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"{text!r} is not a duration (use e.g. 500ms, 5s)")
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(f"{text!r} is not a duration (use e.g. 500ms, 5s)")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Format seconds as a short Go-style duration string (inverse of parse_duration
    for the values the controller uses)."""
    if seconds == 0:
        return "0s"
    if seconds < 1 and (seconds * 1000) == int(seconds * 1000):
        return f"{int(seconds * 1000)}ms"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:g}s"
