#!/usr/bin/env python3
"""The gap between app servers' allocations over time (paper §3.2; docs/results.md,
"Several app servers"): for each arm of a results folder, the largest difference, over
partitions, between the app servers' memcached limits at each tick, from the
controllers' timelines (controller-APP.jsonl).

    scripts/convergence.py runs/converge [--plot docs/img/converge.png]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def gaps(arm_dir: Path) -> list[tuple[float, float]]:
    """(seconds since the first tick, gap in MB) per tick number all app servers ran."""
    per_app = {}
    for f in sorted(arm_dir.glob("controller-*.jsonl")):
        recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        per_app[f.stem] = {r["tick"]: r for r in recs}
    if len(per_app) < 2:
        raise SystemExit(f"{arm_dir}: fewer than two controller timelines")
    ticks = sorted(set.intersection(*(set(d) for d in per_app.values())))
    t0 = min(per_app[a][ticks[0]]["time"] for a in per_app)
    out = []
    for k in ticks:
        recs = [per_app[a][k] for a in per_app]
        names = recs[0]["partitions"].keys()
        g = max(max(r["partitions"][n]["limit_bytes"] for r in recs) - min(r["partitions"][n]["limit_bytes"] for r in recs)
                for n in names)
        out.append((recs[0]["time"] - t0, g / 2**20))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--plot")
    ns = ap.parse_args()
    series = {}
    for arm in sorted(p for p in Path(ns.dir).iterdir() if p.is_dir() and list(p.glob("controller-*.jsonl"))):
        series[arm.name] = gaps(arm)
    times = (30, 60, 120, 180, 230)
    print("| arm | gap at the first tick (MB) | " + " | ".join(f"at {t} s" for t in times) + " |")
    print("|---|---|" + "---|" * len(times))
    for arm, s in series.items():
        def at(t: float) -> str:
            pts = [g for x, g in s if x <= t]
            return f"{pts[-1]:.0f}" if pts else ""
        print(f"| {arm} | {s[0][1]:.0f} | " + " | ".join(at(t) for t in times) + " |")
    if ns.plot:  # the testbed's plotting (matplotlib; the project's virtualenv)
        from robinhood_testbed.plots import plt, save
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for arm, s in series.items():
            ax.plot([x for x, _ in s], [g for _, g in s], label=arm)
        ax.set_xlabel("seconds since the first tick")
        ax.set_ylabel("largest gap between app servers (MB)")
        ax.legend()
        ax.grid(alpha=0.3)
        save(fig, Path(ns.plot), dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
