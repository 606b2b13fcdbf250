"""Sweeps (docs/simulator.md, "Sweeps"): one experiment run in the simulator at every
value of one parameter (:data:`NAMED`, or a dotted path of the document), for several
seeds, with SLO violations per policy plotted against the parameter."""
from __future__ import annotations

import copy
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robinhood_common.contract import ConfigError
from robinhood_common.experiment import from_document
from robinhood_common.units import format_duration, parse_duration

from .analysis import PolicyRun, median_range, write_csv
from .executor import ArmJob, Executor, LocalExecutor
from .experiment import Arm, Experiment, ExperimentError
from .plots import _color, plt, save, violation_axis
from .run import prepare_inputs

NAMED = ("budget", "interval", "tax", "spike-depth", "ramp-time")

#: Axis labels of the named parameters.
LABELS = {
    "budget": "cache budget per app server (MB)",
    "interval": "controller interval Δ",
    "tax": "RobinHood's tax per interval",
    "spike-depth": "spike depth: the scenario's capacities × this (lower is deeper)",
    "ramp-time": "ramp time: every ramp's length × this (lower is faster)",
}


def _number(param: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ExperimentError(f"--values: {param} needs numbers, got {value!r}") from None


def _events(doc: dict[str, Any], param: str) -> list[dict[str, Any]]:
    sc = doc.get("scenario") or {}
    if not sc.get("events"):
        raise ExperimentError(f"--param {param}: the experiment needs its scenario inline (scenario.events)")
    return sc["events"]


def apply(doc: dict[str, Any], param: str, value: str) -> dict[str, Any]:
    """A copy of the experiment document with the parameter set to the value."""
    doc = copy.deepcopy(doc)
    if param == "budget":
        doc.setdefault("cache", {})["budget_mb"] = int(_number(param, value))
    elif param == "interval":
        try:
            doc.setdefault("controller", {})["interval"] = format_duration(parse_duration(value))
        except ValueError as e:
            raise ExperimentError(f"--values: interval {value!r}: {e}") from None
    elif param == "tax":
        tax = _number(param, value)
        pols = doc.setdefault("compare", {}).get("policies") or []
        doc["compare"]["policies"] = [{**p, "tax": tax} if p.get("name") in ("robinhood", "tao++") else p
                                      for p in (x if isinstance(x, dict) else {"name": x} for x in pols)]
    elif param == "spike-depth":
        f = _number(param, value)
        for ev in _events(doc, param):
            kind = ev.get("kind")
            if kind == "set" and "rate" in (ev.get("set") or {}) and ev["set"]["rate"]:
                ev["set"]["rate"] = round(ev["set"]["rate"] * f, 3)
            elif kind in ("ramp", "random_walk") and ev.get("field") == "rate":
                for k in ("from", "to", "min", "max", "initial"):
                    if ev.get(k):
                        ev[k] = round(ev[k] * f, 3)
    elif param == "ramp-time":
        f = _number(param, value)
        for ev in _events(doc, param):
            if ev.get("kind") == "ramp":
                start, end = parse_duration(str(ev["start"])), parse_duration(str(ev["end"]))
                ev["end"] = format_duration(start + (end - start) * f)
    else:
        node = doc
        keys = param.split(".")
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                raise ExperimentError(f"--param {param}: the experiment has no {k!r} block "
                                      f"(named parameters: {', '.join(NAMED)})")
            node = node[k]
        node[keys[-1]] = value
    return doc


def run(exp: Experiment, arms_of: Callable[[Experiment], list[Arm]], param: str, values: list[str],
        seeds: list[int], out: Path, sample: float | None = None, calibration: Path | None = None,
        progress: Callable[[str], None] = lambda s: None, full: bool = False,
        executor: Executor | None = None) -> list[dict[str, Any]]:
    """Every (value, seed) point in the simulator, on the executor (by default one run
    at a time here); one row per (value, seed, arm), in that order. full: no miniature,
    whatever the experiment's sim block says."""
    variants = []
    for v in values:  # every variant is validated before anything runs
        for s in seeds:
            doc = apply(exp.document, param, v)
            doc["seed"] = s
            try:
                variants.append((v, s, from_document(doc, exp.base_dir)))
            except ConfigError as e:
                raise ExperimentError(f"--param {param} = {v}: the experiment becomes invalid: {e}") from None
    todo: list[tuple[str, int, ArmJob]] = []
    for v, s, variant in variants:
        point = out / f"{param}={v}" / f"seed-{s}"
        trace, scenario = prepare_inputs(variant, point, "sim")
        for arm in arms_of(variant):
            todo.append((v, s, ArmJob(variant, arm, point, trace, scenario, calibration, sample, full)))
    rows: list[dict[str, Any] | None] = [None] * len(todo)
    left = {(v, s): sum(1 for x in todo if x[:2] == (v, s)) for v, s, _ in todo}
    for done in (executor or LocalExecutor()).run([job for _, _, job in todo]):
        v, s, job = todo[done.index]
        rows[done.index] = {"param": param, "value": v, "seed": s, "arm": job.arm.name,
                            **PolicyRun.load(done.result.run_dir).figures()}
        left[v, s] -= 1
        if not left[v, s]:  # every arm of the point is done
            progress(f"{param} = {v}, seed {s}: " + ", ".join(
                f"{x['arm']} {x['violation_pct']:.1f}%" for x in rows if x and x["value"] == v and x["seed"] == s))
    return [r for r in rows if r is not None]


def write(rows: list[dict[str, Any]], out: Path, param: str, values: list[str]) -> tuple[Path, Path, Path]:
    """sweep.csv (every run), sweep.md (median [range] per arm and value), sweep.png."""
    csv_path = write_csv(out / "sweep.csv", rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))

    def cell(arm: str, v: str) -> list[float]:
        return [r["violation_pct"] for r in rows if r["arm"] == arm and r["value"] == v and r["violation_pct"] is not None]

    lines = [f"SLO violation % by {param}: median [min–max] over seeds", "",
             "| policy | " + " | ".join(f"{param} = {v}" for v in values) + " |",
             "|---|" + "---|" * len(values)]
    for a in arms:
        lines.append(f"| {a} | " + " | ".join(median_range(cell(a, v)) for v in values) + " |")
    md_path = out / "sweep.md"
    md_path.write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    numeric = all(_is_number(v) for v in values)
    xs = [float(v) for v in values] if numeric else list(range(len(values)))
    for i, a in enumerate(arms):
        cells = [cell(a, v) or [float("nan")] for v in values]
        c = _color(a, i)
        ax.plot(xs, [statistics.median(x) for x in cells], marker="o", color=c, lw=1.6, label=a)
        ax.fill_between(xs, [min(x) for x in cells], [max(x) for x in cells], color=c, alpha=0.12)
    if not numeric:
        ax.set_xticks(xs, values)
    ax.set_xlabel(LABELS.get(param, param))
    violation_axis(ax, "SLO violation % (median, range over seeds)", f"SLO violations against {param} (simulator)")
    return csv_path, md_path, save(fig, out / "sweep.png")


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True
