"""Reading a finished run folder back: the replay's SLO series and request log, the
controller's allocation timeline, the RBC timeline; and the tables made of them."""
from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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

    def violation_pct(self) -> float | None:
        """Share of the P99 observations after the warm-up above the SLO (the replay's number)."""
        if not self.slo.get("points_counted"):
            return None
        return float(self.slo["violation_pct"])

    def max_p99(self) -> float | None:
        """The largest windowed P99 after the warm-up."""
        return max(self.measured_series("p99_ms"), default=None)

    def figures(self) -> dict[str, Any]:
        """A row's figures in the sweep, matrix and zoo tables: SLO violation %, max P99, hit ratio."""
        return {"violation_pct": self.violation_pct(), "max_p99_ms": self.max_p99(),
                "hit_ratio": self.result.get("overall_hit_ratio")}

    def latency_after_warmup(self, key: str) -> float | None:
        """P50/P90/P99 (key "p50", "p90", "p99") of the requests sent after the warm-up, in ms."""
        v = self.summary.get("latency_ms_after_warmup", {}).get(key)
        return None if v is None else float(v)

    def error_count(self) -> int:
        """Requests that failed (HTTP errors, timeouts, refused) or were dropped by the replayer."""
        errors = self.summary.get("errors", {})
        n = sum(errors.values()) if isinstance(errors, dict) else int(errors)
        return int(n) + int(self.summary.get("dropped", 0))

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
        rows.append({
            "policy": r.policy,
            "slo_violation_pct": r.violation_pct(),
            "max_p99_ms": r.max_p99(),
            "p50_ms": r.latency_after_warmup("p50"),
            "p90_ms": r.latency_after_warmup("p90"),
            "p99_ms": r.latency_after_warmup("p99"),
            "hit_ratio": r.result.get("overall_hit_ratio"),
            "requests": int(r.summary.get("sent", 0)),
            "errors": r.error_count(),
        })
    return rows


COLUMNS = [
    ("policy", "policy", "{}"),
    ("slo_violation_pct", "SLO viol. %", "{:.1f}"),
    ("max_p99_ms", "max P99 ms", "{:.0f}"),
    ("p50_ms", "P50 ms", "{:.1f}"),
    ("p90_ms", "P90 ms", "{:.1f}"),
    ("p99_ms", "P99 ms", "{:.0f}"),
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


def median_range(xs: list[float]) -> str:
    """``median [min–max]`` of a table cell, or – without values."""
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}–{max(xs):.1f}]" if xs else "–"


def write_csv(path: Path, rows: list[dict[str, Any]], fields: list[str] | None = None) -> Path:
    """Every row, with the first row's keys (or ``fields``) as the header."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields or list(rows[0]), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def results_arms(out: Path) -> list[str]:
    """The arms in a results folder (sub-folders holding a finished replay), ordered as
    compare orders them: registered allocation policies by role (the recommended one
    first), then cache modes, then anything else by name."""
    from .experiment import CACHE_MODES, allocation

    found = sorted(d.name for d in out.iterdir() if (d / "replay" / "summary.json").is_file())
    rank = {n: i for i, n in enumerate([*allocation.registry.ordered(), *CACHE_MODES])}
    return sorted(found, key=lambda a: (rank.get(a, len(rank)), a))
