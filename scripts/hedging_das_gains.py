#!/usr/bin/env python3
"""DAS's gains over a single copy at the paper's medium and high load, per model.

Reads the summaries `make hedging` wrote (runs/hedging/<experiment>/summary.json) for
das.yaml (hiccups held by the worker, free purges), das-purge-delay.yaml (the same,
purges 1-10 ms late) and das-response.yaml (the paper's noise model: a sleep before
responding, load counted on P alone), and prints one markdown row per model: at 50% and
80%, the single copy's and DAS's P99 (median of the seeds), DAS's gain, and whether
cloning with purge is stable, against the paper's §6.2 (2.37x at medium load, 1.9x at
high; cloning unstable at both). docs/hedging.md's gains table is this output.

Usage: scripts/hedging_das_gains.py [RUNS_DIR]   (default runs/hedging)
"""
from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

LOADS = (0.5, 0.8)
PAPER = {0.5: 2.37, 0.8: 1.9}
# (experiment, single-copy arm, das arm, cloning-with-purge arm, the model's name)
MODELS = [
    ("das", "single-copy", "das", "cloning-purge", "hiccup in service, purge free and instant (das.yaml)"),
    *[("das-purge-delay", "single-copy", f"das-delay-{d}ms", f"cloning-purge-delay-{d}ms",
       f"hiccup in service, purge {d} ms late (das-purge-delay.yaml)") for d in (1, 3, 5, 10)],
    ("das-response", "single-copy", "das", "cloning-purge", "hiccup in the response, purge free and instant (das-response.yaml)"),
    ("das-response", "single-copy", "das-delay-5ms", "cloning-purge-delay-5ms",
     "hiccup in the response, purge 5 ms late (das-response.yaml)"),
]


@cache
def load(runs: Path, exp: str) -> dict[tuple[str, float], dict]:
    path = runs / exp / "summary.json"
    if not path.is_file():
        sys.exit(f"{path}: missing; run `make hedging` (or bin/sim hedging for {exp}) first")
    return {(s["policy"], round(s["utilization"], 4)): s for s in json.loads(path.read_text())}


def unstable(s: dict, seeds: int = 3) -> bool:
    """Unstable on most seeds."""
    return s["unstable"] * 2 > seeds


def cell(s: dict | None) -> str:
    return "–" if s is None else "unstable" if unstable(s) else f"{s['Tail']:.2f}"


def main() -> None:
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/hedging")
    head = " | ".join(f"{u:.0%}: single / das (ms), gain, cloning + purge" for u in LOADS)
    print(f"| model | {head} |")
    print("|---|" + "---|" * len(LOADS))
    for exp, single, das, clone, name in MODELS:
        sums = load(runs, exp)
        cells = []
        for u in LOADS:
            a, b, c = sums.get((single, u)), sums.get((das, u)), sums.get((clone, u))
            gain = "–"
            if a and b and not a["unstable"] and not b["unstable"] and b["Tail"] > 0:
                g = a["Tail"] / b["Tail"]
                gain = f"**{g:.2f}×**" if abs(g / PAPER[u] - 1) <= 0.2 else f"{g:.2f}×"
            stable = "–" if c is None else "unstable" if unstable(c) else "stable"
            cells.append(f"{cell(a)} / {cell(b)}, {gain}, {stable}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| the paper (§6.2, HDFS on Emulab) | " +
          " | ".join(f"{PAPER[u]}×, cloning unstable" for u in LOADS) + " |")
    print("\nA gain in bold is within 20% of the paper's.")


if __name__ == "__main__":
    main()
