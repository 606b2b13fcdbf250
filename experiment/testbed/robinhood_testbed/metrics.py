"""Reading the components' live state over HTTP: Prometheus text metrics and the RBC
server's JSON snapshot. Failures return None: watching a run never breaks it."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse_prometheus(text: str) -> Samples:
    """Samples by metric name from the Prometheus text exposition format."""
    out: Samples = defaultdict(list)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        lab = {k: bytes(val, "utf-8").decode("unicode_escape") for k, val in _LABEL.findall(labels or "")}
        out[name].append((lab, v))
    return dict(out)


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of a metric's samples whose labels include `match`."""
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in match.items()))


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """A metric's values summed by one label."""
    out: dict[str, float] = defaultdict(float)
    for lab, v in samples.get(name, []):
        if label in lab:
            out[lab[label]] += v
    return dict(out)


def fetch(url: str, timeout: float = 1.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except (urllib.error.URLError, OSError, ValueError):
        return None


def scrape(addr: str, timeout: float = 1.0) -> Samples | None:
    body = fetch(f"http://{addr}/metrics", timeout)
    return None if body is None else parse_prometheus(body.decode(errors="replace"))


def rbc_snapshot(addr: str, timeout: float = 1.0, window_seconds: float | None = None) -> dict[str, Any] | None:
    url = f"http://{addr}/v1/rbc"
    if window_seconds:
        url += f"?window_seconds={window_seconds:g}"
    body = fetch(url, timeout)
    if body is None:
        return None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return None
