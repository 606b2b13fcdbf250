#!/usr/bin/env python3
"""Hold the oracle's latency model to the simulator (docs/algorithms.md, "Feasibility and the oracle").

For one arm of a results folder (``robinhood-testbed run|compare --engine sim``), runs
``tracegen scenario check --trace --json`` on the run's own trace, scenario and topology,
and compares, phase by phase, the request P99 the model predicts for the arm's allocation
(the configured one for ``static``, the oracle's for ``oracle``) with the P99 the run
measured: the median of the SLO series' points whose window lies inside the phase (so the
first window after a change is skipped) and after the warm-up.

    scripts/oracle_model_check.py RUN_DIR [--arm static] [--tracegen bin/tracegen] [--min-points 1] [--json]

Prints a Markdown table; phases without such a point are left out.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def check(run: Path, arm: str, tracegen: str) -> tuple[dict, dict, str]:
    arm_dir = run / arm
    summary = json.loads((arm_dir / "replay" / "summary.json").read_text())
    result = json.loads((arm_dir / "result.json").read_text())
    duration = summary["duration_s"]
    scen = run / "scenario.yaml"
    tmp = None
    if not scen.exists():  # a run without a scenario: one phase
        tmp = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        tmp.write("events: []\n")
        tmp.close()
        scen = Path(tmp.name)
    try:
        args = [tracegen, "scenario", "check", str(scen), "--topology", str(arm_dir / "topology.yaml"),
                "--duration", f"{duration:g}s", "--trace", str(run / "trace.jsonl"), "--json"]
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    return summary, json.loads(out[out.index("{"):]), result.get("policy", arm)


def rows(summary: dict, doc: dict, policy: str, min_points: int) -> list[dict]:
    slo = summary["slo"]
    window, warmup = slo["window_s"], slo["warmup_s"]
    key = "oracle_predicted_p99_ms" if policy == "oracle" else "configured_predicted_p99_ms"
    alloc_key = "oracle_mb" if policy == "oracle" else None
    out = []
    for ph in doc["phases"]:
        start, end = ph["start_s"], ph["end_s"]
        pts = [p["p99_ms"] for p in slo["series"]
               if p["t_s"] - window >= start - 1e-9 and p["t_s"] <= end + 1e-9 and p["t_s"] >= warmup and p["n"] > 0]
        if len(pts) < min_points:
            continue
        measured = statistics.median(pts)
        pred = ph[key]
        alloc = ph[alloc_key] if alloc_key else doc["configured_mb"]
        out.append({"start_s": start, "end_s": end, "points": len(pts), "measured_p99_ms": measured,
                    "predicted_p99_ms": pred, "allocation_mb": alloc,
                    "ratio": (pred / measured) if pred is not None and measured > 0 else None})
    return out


def fmt(v: float | None) -> str:
    if v is None:
        return "∞"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="results folder (trace.jsonl, scenario.yaml, ARM/)")
    ap.add_argument("--arm", default="static", help="the arm (default static)")
    ap.add_argument("--tracegen", default=str(Path(os.environ.get("ROBINHOOD_BIN", REPO / "bin")) / "tracegen"))
    ap.add_argument("--min-points", type=int, default=1, help="phases with fewer SLO points are left out")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    summary, doc, policy = check(args.run, args.arm, args.tracegen)
    rs = rows(summary, doc, policy, args.min_points)
    if args.json:
        json.dump(rs, sys.stdout, indent=2)
        print()
        return 0
    print(f"{args.run} ({args.arm}, policy {policy}): measured P99 (median of the phase's SLO points) against predicted")
    print()
    print("| phase (s) | allocation MB | points | measured P99 ms | predicted P99 ms | predicted / measured |")
    print("|---|---|---|---|---|---|")
    for r in rs:
        alloc = " ".join(f"{k}={v}" for k, v in sorted(r["allocation_mb"].items()))
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"| {r['start_s']:g}–{r['end_s']:g} | {alloc} | {r['points']} | {fmt(r['measured_p99_ms'])} | "
              f"{fmt(r['predicted_p99_ms'])} | {ratio} |")
    finite = [r for r in rs if r["ratio"] is not None]
    if finite:
        logs = [abs(math.log(r["ratio"])) for r in finite]
        print()
        print(f"{len(finite)} phases with a finite prediction: median |log ratio| {statistics.median(logs):.3f} "
              f"(×{math.exp(statistics.median(logs)):.2f}), worst ×{math.exp(max(logs)):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
