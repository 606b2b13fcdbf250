#!/usr/bin/env python3
"""How good the planner policy's online estimates are (docs/algorithms.md, "planner: how
good its estimates are"): its runs in a zoo (or any simulator comparison) against the
truth the simulator records.

    scripts/planner_estimates.py RUN [--arm planner] [--json OUT]

RUN is a results folder of `robinhood-testbed zoo` (or `compare --engine sim`). For every
run of the arm, each controller tick's estimates (the timeline's per-partition "policy"
record) are set against the simulator's truth (rbc.jsonl's "backends": each backend's
capacity, lib/model.Capacity of its replicas' limits, and the queries sent to it each
second):

- capacity: estimate / truth, on the ticks where the truth is below the declared capacity
  (a scenario took capacity away: the only ticks where an estimate matters), per source
  (declared, backlog, latency, remembered);
- query rate: the estimated queries/s sent to the backend (the statistics window's) /
  the true queries sent over the same window;
- miss ratio away from the current size: when the planner gave a partition space or took
  it, its predicted miss ratio at the new size / the miss ratio its curve measured once
  the partition held the new size (20–40 s later, the size unchanged since).

It prints, per estimate, the number of points, the quantiles (P10, P50, P90) of the ratio
and the share within ×1.25 and ×1.5.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Iterator

MIB = 1 << 20


def runs(root: Path, arm: str) -> Iterator[Path]:
    """Every run folder of the arm under root (a scenario's, or its noise runs')."""
    for folder in sorted({tl.parent for tl in root.glob(f"**/{arm}/controller-*.jsonl")}):
        yield folder


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a torn last line
    return out


def points(run: Path, window_s: float) -> dict[str, list[tuple[float, str]]]:
    """The (ratio, source) points of every estimate in one run."""
    truth = {round(d["t"]): d.get("backends") or {} for d in read_jsonl(run / "rbc.jsonl")}
    out: dict[str, list[tuple[float, str]]] = {"capacity": [], "rate": [], "miss_ratio": []}
    for tl in sorted(run.glob("controller-*.jsonl")):
        ticks = read_jsonl(tl)
        if not ticks:
            continue
        t0 = ticks[0]["time"]
        for k, d in enumerate(ticks):
            t = round(d["time"] - t0)
            for n, p in d["partitions"].items():
                e = p.get("policy") or {}
                if "capacity" not in e:
                    continue
                tb = truth.get(t, {}).get(n) or {}
                cap = tb.get("capacity")
                declared = e.get("declared_capacity")
                if cap and declared and cap < 0.99 * declared and e["capacity"] > 0:
                    out["capacity"].append((e["capacity"] / cap, str(e.get("capacity_source"))))
                sent = [truth.get(t - j, {}).get(n, {}).get("sent") for j in range(int(window_s))]
                if all(s is not None for s in sent) and sum(sent) > 0 and t > window_s:
                    out["rate"].append((e["sent"] / (sum(sent) / window_s), "window"))
                planned = e.get("planned_miss_ratio")
                target = p.get("target_bytes")
                before = (ticks[k - 1]["partitions"].get(n) or {}).get("target_bytes") if k else None
                if planned is None or target is None or before is None or abs(target - before) < 0.1 * before:
                    continue
                # The measured curve at the new size once the partition holds it.
                for later in ticks[k + 20:k + 41]:
                    q = later["partitions"].get(n) or {}
                    if q.get("target_bytes") is None or abs(q["target_bytes"] - target) > 0.05 * target:
                        break
                    if (q.get("used_bytes") or 0) >= 0.9 * target and (q.get("policy") or {}).get("miss_ratio"):
                        out["miss_ratio"].append((planned / q["policy"]["miss_ratio"], "moved"))
                        break
    return out


def summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else xs * 9
    within = lambda f: sum(1 for x in xs if 1 / f <= x <= f) / len(xs)  # noqa: E731
    return {"n": len(xs), "p10": q[0], "p50": statistics.median(xs), "p90": q[-1],
            "within_1.25": within(1.25), "within_1.5": within(1.5)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a zoo's (or a simulator comparison's) results folder")
    ap.add_argument("--arm", default="planner", help="the arm whose estimates are checked (default planner)")
    ap.add_argument("--window", type=float, default=5.0, help="the statistics window, seconds (rbc_server.window)")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    ns = ap.parse_args(argv)
    allp: dict[str, list[tuple[float, str]]] = {"capacity": [], "rate": [], "miss_ratio": []}
    n = 0
    for run in runs(ns.run, ns.arm):
        n += 1
        for k, v in points(run, ns.window).items():
            allp[k].extend(v)
    if n == 0:
        print(f"planner_estimates: no runs of arm {ns.arm!r} under {ns.run}", file=sys.stderr)
        return 2
    table: dict[str, dict[str, float]] = {}
    for k, v in allp.items():
        if v:
            table[k] = summary([x for x, _ in v])
        for src in sorted({s for _, s in v}):
            if k == "capacity":
                table[f"capacity ({src})"] = summary([x for x, s in v if s == src])
    print(f"{n} runs of {ns.arm}: estimate / truth")
    print("| estimate | points | P10 | median | P90 | within ×1.25 | within ×1.5 |")
    print("|---|---|---|---|---|---|---|")
    for k, s in table.items():
        print(f"| {k} | {s['n']} | {s['p10']:.2f} | {s['p50']:.2f} | {s['p90']:.2f} | "
              f"{100 * s['within_1.25']:.0f}% | {100 * s['within_1.5']:.0f}% |")
    if ns.json:
        ns.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
