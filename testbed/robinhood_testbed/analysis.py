"""Reading a finished run folder back: the replay's SLO series and request log, the
controller's allocation timeline, the RBC timeline; and the comparison table."""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def nearest_rank(sorted_values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (SPEC §4): the value at rank ceil(pct/100 · n), 1-based."""
    n = len(sorted_values)
    if n == 0:
        return None
    rank = max(1, math.ceil(pct / 100.0 * n - 1e-9))
    return sorted_values[min(rank, n) - 1]


@dataclass
class PolicyRun:
    """One policy's results, as read from its run folder."""

    policy: str
    dir: Path
    summary: dict[str, Any]
    result: dict[str, Any]

    @classmethod
    def load(cls, run_dir: Path) -> "PolicyRun":
        summary = json.loads((run_dir / "replay" / "summary.json").read_text())
        result_path = run_dir / "result.json"
        result = json.loads(result_path.read_text()) if result_path.exists() else {}
        return cls(run_dir.name, run_dir, summary, result)

    # -- the replay's SLO section ---------------------------------------------------

    @property
    def slo(self) -> dict[str, Any]:
        return self.summary.get("slo", {})

    @property
    def slo_ms(self) -> float:
        return float(self.slo.get("slo_ms", 0))

    @property
    def warmup_s(self) -> float:
        return float(self.slo.get("warmup_s", 0))

    def series(self) -> list[dict[str, Any]]:
        """The SLO series: every step the percentiles over the last window."""
        return list(self.slo.get("series", []))

    def measured_series(self, key: str = "p99_ms") -> list[float]:
        """Series values after the warm-up (points with requests in their window)."""
        return [float(p[key]) for p in self.series()
                if float(p.get("t_s", 0)) >= self.warmup_s and p.get("n", 1) and p.get(key) is not None]

    def violation_pct(self, key: str = "p99_ms", slo_ms: float | None = None) -> float | None:
        vals = self.measured_series(key)
        if not vals:
            return None
        slo = self.slo_ms if slo_ms is None else slo_ms
        return 100.0 * sum(1 for v in vals if v > slo) / len(vals)

    # -- the request log ------------------------------------------------------------

    def latencies_after_warmup(self) -> list[float]:
        """End-to-end latencies (ms) of requests sent after the warm-up, sorted."""
        out: list[float] = []
        path = self.dir / "replay" / "requests.csv"
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                try:
                    if float(row["send_ms"]) / 1000.0 < self.warmup_s:
                        continue
                    out.append(float(row["latency_us"]) / 1000.0)
                except (KeyError, ValueError):
                    continue
        out.sort()
        return out

    def error_count(self) -> int:
        errors = self.summary.get("errors", 0)
        if isinstance(errors, dict):
            return int(sum(errors.values()))
        return int(errors)

    # -- timelines ------------------------------------------------------------------

    def allocation_timeline(self) -> list[dict[str, Any]]:
        """The controller's ticks (first app server), or [] for policies without one."""
        files = sorted(self.dir.glob("controller-*.jsonl"))
        if not files:
            return []
        return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]

    def rbc_timeline(self) -> list[dict[str, Any]]:
        path = self.dir / "rbc.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def comparison_rows(runs: list[PolicyRun]) -> list[dict[str, Any]]:
    """One row per policy: SLO violation %, max P99, P50, P90, P99, hit ratio, errors."""
    rows = []
    for r in runs:
        lat = r.latencies_after_warmup()
        p99s = r.measured_series("p99_ms")
        rows.append({
            "policy": r.policy,
            "slo_violation_pct": r.violation_pct("p99_ms"),
            "max_p99_ms": max(p99s) if p99s else None,
            "p50_ms": nearest_rank(lat, 50),
            "p90_ms": nearest_rank(lat, 90),
            "p99_ms": nearest_rank(lat, 99),
            "hit_ratio": r.result.get("overall_hit_ratio"),
            "requests": len(lat),
            "errors": r.error_count(),
        })
    return rows


COLUMNS = [
    ("policy", "policy", "{}"),
    ("slo_violation_pct", "SLO violation %", "{:.1f}"),
    ("max_p99_ms", "max P99 (ms)", "{:.0f}"),
    ("p50_ms", "P50 (ms)", "{:.1f}"),
    ("p90_ms", "P90 (ms)", "{:.1f}"),
    ("p99_ms", "P99 (ms)", "{:.0f}"),
    ("hit_ratio", "hit ratio", "{:.3f}"),
    ("requests", "requests", "{}"),
    ("errors", "errors", "{}"),
]


def fmt(value: Any, pattern: str) -> str:
    return "–" if value is None else pattern.format(value)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(fmt(r[k], p) for k, _, p in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body])
