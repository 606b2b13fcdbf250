#!/usr/bin/env python3
"""Hold the oracle's model to the simulator (docs/algorithms.md, "How good the model is").

Runs the zoo's experiment (or --experiment) in the simulator with each number of app
servers and phase length, one backend's rate limit stepping through LEVELS times its miss
load, arms static and oracle, and compares each point of their SLO series (and each phase's
median) with `tracegen oracle --series`' prediction; the method and the measurements are in
docs/notebook/2026-12-02-algorithms-derivations.md, "How good the model is".

    scripts/oracle_model_check.py [--out runs/oracle-model-check] [--apps 1,2,4] [--phases 5,20,60,180]
                                  [--experiment examples/zoo.yaml] [--json]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("ROBINHOOD_BIN", REPO / "bin"))
VENV = REPO / ".venv" / "bin"
#: The stepped backend's rate limit as multiples of its miss load under the configured split.
LEVELS = [2.0, 1.4, 1.15, 3.0, 1.0, 1.6]
RHO_MAX = 0.95
FACTOR = 1.5


def miss_load(topology: Path, trace: Path, duration: str, backend: str) -> float:
    """The backend's miss load under the configured split (the zoo's draw reads the same)."""
    out = subprocess.run([str(BIN / "tracegen"), "scenario", "generate", "--topology", str(topology), "--trace",
                          str(trace), "--duration", duration, "--seed", "1", "--family", "drop", "--json"],
                         capture_output=True, text=True, check=True).stdout
    text = json.loads(out)["scenario"]
    for line in text.splitlines():
        if line.startswith("# miss loads"):
            for part in line.split(":", 1)[1].split():
                name, _, v = part.partition("=")
                if name == backend:
                    return float(v)
    raise SystemExit(f"no miss load for {backend} in the generator's header")


def scenario(backend: str, load: float, phase_s: int, start_s: int, end_s: int) -> dict:
    events, t, i = [], start_s, 0
    while t < end_s:
        events.append({"kind": "set", "at": f"{t}s", "backend": backend,
                       "set": {"rate": round(LEVELS[i % len(LEVELS)] * load, 2)}})
        t += phase_s
        i += 1
    return {"events": events}


def absolute(doc: dict, base_dir: Path) -> None:
    """The experiment's files (a trace file, real key streams) as absolute paths: the
    copies are written elsewhere."""
    trace = doc.get("trace", {})
    if "file" in trace:
        trace["file"] = str((base_dir / trace["file"]).resolve())
    for name, st in (trace.get("synth") or {}).get("streams", {}).items():
        if isinstance(st, str):
            trace["synth"]["streams"][name] = str((base_dir / st).resolve())
        else:
            st["file"] = str((base_dir / st["file"]).resolve())


def run_one(base: dict, base_dir: Path, apps: int, phase_s: int, out: Path, reuse: bool = False) -> list[dict]:
    doc = copy.deepcopy(base)
    doc["name"] = f"{base['name']}-n{apps}-p{phase_s}"
    doc["cache"]["app_servers"] = apps
    doc.pop("compare", None)
    dur = int(str(doc["duration"]).rstrip("s"))
    warm = int(str(doc["slo"]["warmup"]).rstrip("s"))
    backend = doc["backends"][0]["name"]  # catalog: the most queried
    exp_path = out / f"{doc['name']}.yaml"
    run_dir = out / doc["name"]
    absolute(doc, base_dir)
    if reuse and (run_dir / "oracle-series.json").exists():
        doc = yaml.safe_load(exp_path.read_text())
        return compare(doc, run_dir, apps, phase_s)
    # First a run without a scenario, for the trace and topology the miss load is read from.
    probe = dict(doc, name=doc["name"] + "-probe")
    exp_path.write_text(yaml.safe_dump(probe, sort_keys=False))
    probe_out = out / probe["name"]
    subprocess.run([str(VENV / "robinhood-testbed"), "run", "--engine", "sim", "--experiment", str(exp_path),
                    "--policy", "static", "--out", str(probe_out)], capture_output=True, text=True, check=True)
    load = miss_load(probe_out / "static" / "topology.yaml", probe_out / "trace.jsonl", f"{dur}s", backend)
    doc["scenario"] = scenario(backend, load, phase_s, warm, dur - 10)
    exp_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run_dir = out / doc["name"]
    res = subprocess.run([str(VENV / "robinhood-testbed"), "compare", "--engine", "sim", "--experiment", str(exp_path),
                          "--policies", "static,oracle", "--cache-modes", "partitioned", "--out", str(run_dir)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{doc['name']}: {res.stderr[-2000:]}")
    pred_path = run_dir / "oracle-series.json"
    subprocess.run([str(BIN / "tracegen"), "oracle", "--topology", str(run_dir / "oracle" / "topology.yaml"),
                    "--trace", str(run_dir / "trace.jsonl"), "--scenario", str(run_dir / "scenario.yaml"),
                    "--duration", f"{dur}s", "--seed", str(doc.get("seed", 1)), "--variants", "foresight",
                    "--series", "--out", str(pred_path)], capture_output=True, text=True, check=True)
    return compare(doc, run_dir, apps, phase_s)


def compare(doc: dict, run_dir: Path, apps: int, phase_s: int) -> list[dict]:
    """One row per counted point of the SLO series of each arm: the measured and the
    predicted P99 of its window, the highest predicted utilization in it, and the scenario
    phase its window ends in (inside: the window lies within that phase)."""
    dur = int(str(doc["duration"]).rstrip("s"))
    warm = int(str(doc["slo"]["warmup"]).rstrip("s"))
    window = float(str(doc["slo"]["window"]).rstrip("s"))
    pred = json.loads((run_dir / "oracle-series.json").read_text())
    series = {"static": pred["configured_series"],
              "oracle": pred["app_server_schedules"]["app0"]["foresight"]["series"]}
    bounds = [0] + [int(e["at"].rstrip("s")) for e in doc["scenario"]["events"]] + [dur]
    phases = list(zip(bounds, bounds[1:]))
    rows = []
    for arm in ("static", "oracle"):
        measured = {p["t_s"]: p for p in json.loads((run_dir / arm / "replay" / "summary.json").read_text())["slo"]["series"]}
        for pt in series[arm]:
            t = pt["t_s"]
            m = measured.get(t)
            if m is None or m["n"] == 0 or t <= warm:
                continue
            k = next(i for i, (a, b) in enumerate(phases) if a < t <= b)
            p = pt["p99_ms"]
            rows.append({"apps": apps, "phase_s": phase_s, "arm": arm, "t_s": t, "phase": k,
                         "inside": t - window >= phases[k][0] - 1e-9, "measured_p99_ms": m["p99_ms"],
                         "predicted_p99_ms": p, "rho": pt["rho"],
                         "ratio": None if p is None or m["p99_ms"] <= 0 else p / m["p99_ms"]})
    return rows


def within(r: dict) -> bool:
    return r["ratio"] is not None and 1 / FACTOR <= r["ratio"] <= FACTOR


def phase_rows(rows: list[dict]) -> list[dict]:
    """Per scenario phase of each run and arm: the median of the points whose window lies
    inside it (phases shorter than the window have none)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["inside"]:
            groups.setdefault((r["apps"], r["phase_s"], r["arm"], r["phase"]), []).append(r)
    out = []
    for (apps, phase_s, arm, k), rs in groups.items():
        m = statistics.median(r["measured_p99_ms"] for r in rs)
        ps = [r["predicted_p99_ms"] for r in rs]
        p = None if any(v is None for v in ps) else statistics.median(ps)
        out.append({"apps": apps, "phase_s": phase_s, "arm": arm, "phase": k, "measured_p99_ms": m,
                    "predicted_p99_ms": p, "rho": max(r["rho"] for r in rs),
                    "ratio": None if p is None or m <= 0 else p / m})
    return out


def table(rows: list[dict], slo_ms: float, unit: str) -> tuple[list[str], int, int]:
    lines = [f"| app servers | phases of | {unit} (ρ < {RHO_MAX}) | within ×{FACTOR} | median ratio | range | "
             f"{unit} at ρ ≥ {RHO_MAX}: agree on the SLO |", "|---|---|---|---|---|---|---|"]
    ok_all = n_all = 0
    for apps in sorted({r["apps"] for r in rows}):
        for phase in sorted({r["phase_s"] for r in rows}):
            sel = [r for r in rows if r["apps"] == apps and r["phase_s"] == phase]
            calm = [r for r in sel if r["rho"] < RHO_MAX and r["ratio"] is not None]
            hot = [r for r in sel if not (r["rho"] < RHO_MAX and r["ratio"] is not None)]
            ok = sum(within(r) for r in calm)
            ok_all, n_all = ok_all + ok, n_all + len(calm)
            ratios = sorted(r["ratio"] for r in calm)
            agree = sum((r["predicted_p99_ms"] is None or r["predicted_p99_ms"] > slo_ms) == (r["measured_p99_ms"] > slo_ms)
                        for r in hot)
            med = f"{statistics.median(ratios):.2f}" if ratios else "–"
            rng = f"{ratios[0]:.2f}–{ratios[-1]:.2f}" if ratios else "–"
            share = f"{100 * ok / len(calm):.0f}%" if calm else "–"
            lines.append(f"| {apps} | {phase} s | {len(calm)} | {ok} ({share}) | {med} | {rng} | {agree} of {len(hot)} |")
    return lines, ok_all, n_all


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "oracle-model-check")
    ap.add_argument("--apps", default="1,2,4")
    ap.add_argument("--phases", default="5,20,60,180", help="phase lengths, seconds")
    ap.add_argument("--experiment", type=Path, default=REPO / "examples" / "zoo.yaml")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--reuse", action="store_true", help="compare the runs already in --out instead of running them")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load(args.experiment.read_text())
    slo_ms = float(str(base["slo"]["latency"]).removesuffix("ms"))
    rows = []
    for apps in (int(x) for x in args.apps.split(",")):
        for phase in (int(x) for x in args.phases.split(",")):
            doc = copy.deepcopy(base)
            if phase * 3 > int(str(doc["duration"]).rstrip("s")) - 40:  # room for three phases
                doc["duration"] = f"{phase * 3 + 40}s"
            rows += run_one(doc, args.experiment.parent, apps, phase, args.out, args.reuse)
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    phases = phase_rows(rows)
    if args.json:
        json.dump({"points": rows, "phases": phases}, sys.stdout, indent=2)
        return 0
    print(f"Predicted against measured P99 ({args.experiment.name}; arms static and oracle), per point of the SLO "
          f"series (each a {base['slo']['window']} window), utilization the highest the model predicts in the window:")
    print()
    lines, ok, n = table(rows, slo_ms, "points")
    print("\n".join(lines))
    print()
    print(f"All points: {ok} of {n} with ρ < {RHO_MAX} within ×{FACTOR} ({100 * ok / n if n else 0:.0f}%; goal ≥ 90%).")
    print()
    print("Per phase (the median of the points whose window lies inside it; phases shorter than a window have none):")
    print()
    lines, ok, n = table(phases, slo_ms, "phases")
    print("\n".join(lines))
    print()
    print(f"All phases: {ok} of {n} with ρ < {RHO_MAX} within ×{FACTOR} ({100 * ok / n if n else 0:.0f}%). "
          f"Rows: {args.out / 'rows.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
