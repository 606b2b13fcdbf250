"""Holding the simulator to the testbed (docs/simulator.md): the same experiment's
results folders from both engines side by side — SLO violation % per arm, its
difference, whether the two rank the arms alike, and P99 over time in one figure."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .analysis import PolicyRun, fmt, results_arms
from .plots import _color, _grid, _p99_frame, _p99_points, save


def common_arms(testbed: Path, sim: Path) -> list[str]:
    """The arms both folders finished, in the testbed folder's order."""
    sm = set(results_arms(sim))
    return [a for a in results_arms(testbed) if a in sm]


def rank(values: dict[str, float]) -> dict[str, int]:
    """Competition rank (1 = fewest violations; ties share the lower rank)."""
    return {a: 1 + sum(1 for w in values.values() if w < v) for a, v in values.items()}


def rows(testbed: Path, sim: Path) -> list[dict[str, Any]]:
    """One row per common arm: violation % and max P99 in each engine, the difference."""
    arms = common_arms(testbed, sim)
    t = {a: PolicyRun.load(testbed / a).figures() for a in arms}
    s = {a: PolicyRun.load(sim / a).figures() for a in arms}
    tv = {a: t[a]["violation_pct"] or 0.0 for a in arms}
    sv = {a: s[a]["violation_pct"] or 0.0 for a in arms}
    tr, sr = rank(tv), rank(sv)
    return [{"arm": a, "testbed_pct": tv[a], "sim_pct": sv[a], "diff_pp": sv[a] - tv[a],
             "testbed_rank": tr[a], "sim_rank": sr[a],
             "testbed_max_p99": t[a]["max_p99_ms"], "sim_max_p99": s[a]["max_p99_ms"],
             "testbed_hit": t[a]["hit_ratio"], "sim_hit": s[a]["hit_ratio"]} for a in arms]


def markdown(table: list[dict[str, Any]], labels: tuple[str, str] = ("testbed", "sim")) -> str:
    """The table; labels name the reference folder and the other (another pair of
    engines or settings: the exact engine against a miniature, say)."""
    a, b = labels
    head = (f"| arm | {a} viol. % | {b} viol. % | difference (pp) | rank {a} / {b} | "
            f"max P99 {a} / {b} (ms) | hit ratio {a} / {b} |\n|---|---|---|---|---|---|---|")
    lines = [head]
    for r in table:
        lines.append(f"| {r['arm']} | {r['testbed_pct']:.1f} | {r['sim_pct']:.1f} | {r['diff_pp']:+.1f} | "
                     f"{r['testbed_rank']} / {r['sim_rank']} | {fmt(r['testbed_max_p99'], '{:.0f}')} / "
                     f"{fmt(r['sim_max_p99'], '{:.0f}')} | {fmt(r['testbed_hit'], '{:.3f}')} / "
                     f"{fmt(r['sim_hit'], '{:.3f}')} |")
    worst = max((abs(r["diff_pp"]) for r in table), default=0.0)
    same = all(r["testbed_rank"] == r["sim_rank"] for r in table)
    lines.append("")
    lines.append(f"Largest difference: {worst:.1f} percentage points; the two engines rank the arms "
                 f"{'alike' if same else 'differently'}.")
    return "\n".join(lines)


def figure(testbed: Path, sim: Path, out: Path, labels: tuple[str, str] = ("testbed", "simulator")) -> Path:
    """P99 over time per arm: the reference (the testbed) solid, the other (the
    simulator) dashed."""
    arms = common_arms(testbed, sim)
    fig, axes = _grid(len(arms), 4.2, 3.0, sharey=True)
    for i, (ax, a) in enumerate(zip(axes, arms)):
        t, s = PolicyRun.load(testbed / a), PolicyRun.load(sim / a)
        _p99_frame(ax, [t], a)
        c = _color(a, i)
        ax.plot(*_p99_points(t), color=c, lw=1.6, label=labels[0])
        ax.plot(*_p99_points(s), color=c, lw=1.4, ls="--", label=labels[1])
        ax.set_xlabel("time (s)")
        if i % 4 == 0:
            ax.set_ylabel("P99 (ms)")
        ax.legend(fontsize=7)
    fig.suptitle(f"P99 request latency over time (windowed): {labels[0]} (solid) and {labels[1]} (dashed)")
    return save(fig, out, dpi=100)
