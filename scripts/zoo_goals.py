#!/usr/bin/env python3
"""A candidate allocation policy's goals on a zoo's results: a maintainer's tool for
deciding whether a policy earns its place, not part of the product. The goals, and their
thresholds WITHIN, FORESIGHT and HURT, are the recommended policy's (docs/zoo.md,
"Judging a candidate").

  scripts/zoo_goals.py runs/zoo --candidate relief [--never-worse-than robinhood,static]

Reads RUN/zoo.csv; an arm missing from it can be added from its folders beside the
points (RUN/[EXPERIMENT/]seed-N/ARM/replay/summary.json) with --extra ARM.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

ORACLE, REACTIVE = "oracle", "oracle-reactive"
FEASIBLE = ("margin", "tight")
WITHIN, FORESIGHT, HURT = 3.0, 5.0, 2.0

Key = tuple[str, int]


def load(run: Path, extra: list[str]) -> tuple[dict[Key, dict[str, float]], dict[Key, str]]:
    """Violation % per feasible scenario and arm, and each scenario's family."""
    per: dict[Key, dict[str, float]] = {}
    family: dict[Key, str] = {}
    multi = False
    with open(run / "zoo.csv") as f:
        for r in csv.DictReader(f):
            if r["class"] not in FEASIBLE or r["violation_pct"] in ("", None):
                continue
            k = (r.get("experiment", ""), int(r["seed"]))
            per.setdefault(k, {})[r["arm"]] = float(r["violation_pct"])
            family[k] = r["family"]
            multi = multi or (run / r.get("experiment", "") / f"seed-{r['seed']}").is_dir() and bool(r.get("experiment"))
    for k, v in per.items():
        point = run / k[0] / f"seed-{k[1]}" if multi else run / f"seed-{k[1]}"
        for arm in extra:
            s = point / arm / "replay" / "summary.json"
            if s.exists():
                v[arm] = float(json.loads(s.read_text())["slo"]["violation_pct"])
    return per, family


def goals(per: dict[Key, dict[str, float]], candidate: str, never_worse: list[str]) -> list[str]:
    """One line per goal: what was measured and whether it is met."""
    need = (candidate, ORACLE, REACTIVE, *never_worse)
    per = {k: v for k, v in per.items() if all(a in v for a in need)}
    if not per:
        return [f"{candidate}: no feasible scenario with runs of {', '.join(need)}"]
    n = len(per)

    def ok(b: bool) -> str:
        return "met" if b else "**not met**"

    within = sum(v[candidate] <= v[REACTIVE] + WITHIN for v in per.values())
    hard = [v for v in per.values() if v[REACTIVE] - v[ORACLE] > FORESIGHT]
    ahead = sum(v[candidate] < v[REACTIVE] for v in hard)
    med = statistics.median(v[candidate] for v in per.values())
    mo = statistics.median(v[ORACLE] for v in per.values())
    bound = max(2 * mo, mo + 5)
    out = [
        f"- within {WITHIN:g} points of the reactive oracle on {within} of {n} ({100 * within / n:.0f}%; goal ≥ 90%): "
        + ok(within >= 0.9 * n),
        f"- below the reactive oracle on {ahead} of the {len(hard)} scenarios where the oracles differ by more than "
        f"{FORESIGHT:g} points ({100 * ahead / len(hard) if hard else 100:.0f}%; goal ≥ 50%): "
        + ok(not hard or ahead >= 0.5 * len(hard)),
        f"- median {med:.1f}% against the oracle's {mo:.1f}% (goal: at most max(2 x, + 5 points) = {bound:.1f}): "
        + ok(med <= bound),
    ]
    for a in never_worse:
        hurt = sorted(k for k, v in per.items() if v[candidate] > v[a] + HURT)
        worst = max((per[k][candidate] - per[k][a] for k in hurt), default=0.0)
        out.append(f"- more than {HURT:g} points worse than {a} on {len(hurt)} of {n}"
                   + (f" (by up to {worst:.1f}: {', '.join(f'{e} {s}'.strip() for e, s in hurt[:8])})" if hurt else "")
                   + " (goal: none): " + ok(not hurt))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a zoo's results folder (with zoo.csv)")
    ap.add_argument("--candidate", required=True, help="the arm judged")
    ap.add_argument("--never-worse-than", default="robinhood,static", help="arms it must never lose to "
                    "(comma-separated; default robinhood,static)")
    ap.add_argument("--extra", default="", help="arms read from their folders beside the points (comma-separated)")
    a = ap.parse_args(argv)
    if not (a.run / "zoo.csv").exists():
        print(f"zoo_goals: {a.run / 'zoo.csv'} does not exist", file=sys.stderr)
        return 2
    per, _ = load(a.run, [x for x in a.extra.split(",") if x])
    print(f"Goals for {a.candidate} on {a.run}:")
    print("\n".join(goals(per, a.candidate, [x for x in a.never_worse_than.split(",") if x])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
