"""The scenario zoo (docs/zoo.md): every allocation policy on capacity scenarios drawn
by ``tracegen scenario generate`` (docs/workloads.md, "Scenario zoo"), in the
simulator — the evaluation nobody tuned a policy for.

For every seed the zoo draws one scenario for the experiment's topology from the
family, writes the experiment with that scenario and seed, classifies it with the
oracle's analysis (``tracegen scenario check --trace --json``: margin, tight or
infeasible) and runs every arm on it. The summary is over the feasible scenarios
(margin and tight): per arm the median and P90 of the SLO violation %, the share of
scenarios where it is the best online arm, its violations summed against the oracle's,
and its worst scenario; the figure draws each arm's violations per scenario, sorted.

Seeds 1–999 are the development range, 1000–1999 the evaluation range: a policy's
parameters are never fitted on the evaluation range, and results are reported on it.
"""
from __future__ import annotations

import copy
import csv
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from robinhood_common.contract import ConfigError
from robinhood_common.experiment import from_document
from robinhood_common.units import format_duration

from .analysis import PolicyRun
from .deploy import build_topology, go_bin
from .executor import ArmJob, Executor, LocalExecutor
from .experiment import Arm, Experiment, ExperimentError
from .plots import _color, plt
from .run import FixedPorts, prepare_inputs

#: The development and evaluation seed ranges (inclusive).
DEV = (1, 999)
EVAL = (1000, 1999)
#: The ranges by name, for --seeds.
NAMED = {"dev": (1, 40), "eval": (1000, 1099)}
#: Scenario classes counted as feasible (some allocation keeps every backend under capacity).
FEASIBLE = ("margin", "tight")
#: Arms that are not online policies (they read the scenario and the trace).
OFFLINE = ("oracle",)
#: Two runs differing by less than this many SLO-violation points count as a tie in the
#: goal checks: one run per scenario, and one SLO step is 100 / (measured steps) points.
TIE_POINTS = 2.0


def parse_seeds(text: str) -> list[int]:
    """--seeds: ``eval`` (1000–1099), ``dev`` (1–40), ``A-B`` ranges and single seeds,
    comma-separated."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part in NAMED:
            lo, hi = NAMED[part]
        elif "-" in part:
            a, _, b = part.partition("-")
            try:
                lo, hi = int(a), int(b)
            except ValueError:
                raise ExperimentError(f"--seeds: {part!r} is not a range A-B of integers") from None
            if hi < lo:
                raise ExperimentError(f"--seeds: {part!r} ends before it starts")
        else:
            try:
                lo = hi = int(part)
            except ValueError:
                raise ExperimentError(f"--seeds: {part!r} is not an integer, a range A-B, dev or eval") from None
        if lo < DEV[0] or hi > EVAL[1]:
            raise ExperimentError(f"--seeds: {part!r} is outside the zoo's seeds {DEV[0]}–{EVAL[1]} "
                                  f"(development {DEV[0]}–{DEV[1]}, evaluation {EVAL[0]}–{EVAL[1]})")
        out += range(lo, hi + 1)
    if not out:
        raise ExperimentError("--seeds: give at least one seed")
    return list(dict.fromkeys(out))


def seed_range(seeds: list[int]) -> str:
    """'development', 'evaluation' or 'mixed': which range the seeds are from."""
    if all(DEV[0] <= s <= DEV[1] for s in seeds):
        return "development"
    if all(EVAL[0] <= s <= EVAL[1] for s in seeds):
        return "evaluation"
    return "mixed"


@dataclass
class Point:
    """One drawn scenario: its experiment, inputs and class."""

    seed: int
    exp: Experiment
    dir: Path
    trace: Path
    scenario: Path
    family: str
    cls: str
    worst_utilization: float | None


def _tracegen(args: list[str], what: str) -> str:
    res = subprocess.run([str(go_bin("tracegen")), *args], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise ExperimentError(f"{what} failed (tracegen {' '.join(args)}):\n{res.stderr.strip()}")
    return res.stdout


def family_of(scenario_text: str) -> str:
    """The family the generator wrote in the scenario's header (``# family: NAME``)."""
    for line in scenario_text.splitlines():
        s = line.strip()
        if s.startswith("#") and s[1:].strip().startswith("family:"):
            return s[1:].strip()[len("family:"):].strip().split()[0]
    return "?"


def draw(exp: Experiment, seed: int, out: Path, family: str | None = None) -> Point:
    """Draw, write and classify the scenario of one seed (nothing is simulated)."""
    point = out / f"seed-{seed}"
    doc = copy.deepcopy(exp.document)
    doc["seed"] = seed
    doc.pop("scenario", None)
    doc.pop("compare", None)
    try:
        base = from_document(doc, exp.base_dir)
    except ConfigError as e:  # pragma: no cover - the experiment was valid with its own seed
        raise ExperimentError(f"seed {seed}: {e}") from None
    base_trace, _ = prepare_inputs(base, point / "calibration", "testbed")
    topology = point / "topology.yaml"
    arm = Arm("static", "partitioned", {"name": "static"}, {"policy": "random"})
    topology.write_text(yaml.safe_dump(build_topology(base, arm, FixedPorts()), sort_keys=False))
    generated = point / "generated.yaml"
    gen = ["scenario", "generate", "--topology", str(topology), "--trace", str(base_trace),
           "--duration", format_duration(exp.duration), "--seed", str(seed),
           "--warmup", format_duration(exp.slo.warmup), "--out", str(generated)]
    if family:
        gen += ["--family", family]
    _tracegen(gen, f"seed {seed}: drawing the scenario")
    text = generated.read_text()
    doc["scenario"] = yaml.safe_load(text)
    try:
        variant = from_document(doc, exp.base_dir)
    except ConfigError as e:
        raise ExperimentError(f"seed {seed}: the drawn scenario makes the experiment invalid: {e}") from None
    trace, scenario = prepare_inputs(variant, point, "testbed")
    assert scenario is not None and isinstance(trace, Path)
    checked = _tracegen(["scenario", "check", str(scenario), "--topology", str(topology),
                     "--duration", format_duration(exp.duration), "--trace", str(trace), "--json"],
                    f"seed {seed}: classifying the scenario")
    check = json.loads(checked[checked.index("{"):])  # after the validation's summary line
    (point / "check.json").write_text(json.dumps(check, indent=1) + "\n")
    return Point(seed, variant, point, trace, scenario, family_of(text), str(check.get("class", "?")),
                 check.get("worst_utilization"))


def run(exp: Experiment, arms_of: Callable[[Experiment], list[Arm]], seeds: list[int], out: Path,
        jobs: int = 1, family: str | None = None, progress: Callable[[str], None] = lambda s: None,
        executor: Executor | None = None) -> list[dict[str, Any]]:
    """Draw every seed's scenario (``jobs`` at once), then run every arm on each in the
    simulator; one row per (seed, arm), in seed order."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        points = list(pool.map(lambda s: draw(exp, s, out, family), seeds))
    counts = {c: sum(p.cls == c for p in points) for c in dict.fromkeys(p.cls for p in points)}
    progress(f"{len(points)} scenarios drawn in {time.monotonic() - start:.0f}s: "
             + ", ".join(f"{n} {c}" for c, n in counts.items()))
    todo: list[tuple[Point, ArmJob]] = []
    for p in points:
        for arm in arms_of(p.exp):
            todo.append((p, ArmJob(p.exp, arm, p.dir, p.trace, p.scenario)))
    executor = executor or LocalExecutor(jobs)
    progress(f"{len(todo)} runs, {executor.describe()}")
    rows: list[dict[str, Any] | None] = [None] * len(todo)
    for n, done in enumerate(executor.run([j for _, j in todo])):
        p, job = todo[done.index]
        r = PolicyRun.load(done.result.run_dir)
        p99 = r.measured_series("p99_ms")
        rows[done.index] = {"seed": p.seed, "family": p.family, "class": p.cls,
                            "worst_utilization": p.worst_utilization, "arm": job.arm.name,
                            "violation_pct": r.violation_pct(), "max_p99_ms": max(p99) if p99 else None,
                            "hit_ratio": r.result.get("overall_hit_ratio"), "wall_s": round(done.wall_s, 1)}
        if (n + 1) % 50 == 0 or n + 1 == len(todo):
            progress(f"[{n + 1}/{len(todo)} {time.monotonic() - start:.0f}s]")
    return [r for r in rows if r is not None]


def _pct(xs: list[float], q: float) -> float:
    """The q-quantile by nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(-(-q * len(s) // 1)) - 1))]


def table(rows: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Violation % per feasible seed and arm (arms without a number are left out)."""
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        if r["class"] in FEASIBLE and r["violation_pct"] is not None:
            out.setdefault(r["seed"], {})[r["arm"]] = float(r["violation_pct"])
    return out


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm, over the feasible scenarios: median, P90, best-online share, violations
    against the oracle's, worst scenario (the most points above the oracle)."""
    per = table(rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    family = {r["seed"]: r["family"] for r in rows}
    online = [a for a in arms if a not in OFFLINE]
    out = []
    for a in arms:
        seeds = [s for s in per if a in per[s]]
        if not seeds:
            continue
        xs = [per[s][a] for s in seeds]
        best = [s for s in seeds if a in online and per[s][a] <= min(per[s][o] for o in online if o in per[s])]
        orc = [s for s in seeds if "oracle" in per[s]]
        ratio = (sum(per[s][a] for s in orc) / sum(per[s]["oracle"] for s in orc)
                 if orc and sum(per[s]["oracle"] for s in orc) > 0 else None)
        worst = max(seeds, key=lambda s: (per[s][a] - per[s].get("oracle", 0.0), -s))
        out.append({"arm": a, "scenarios": len(seeds), "median": statistics.median(xs), "p90": _pct(xs, 0.9),
                    "best_share": len(best) / len(seeds) if a in online else None, "oracle_ratio": ratio,
                    "worst_seed": worst, "worst_family": family[worst], "worst_pct": per[worst][a],
                    "worst_oracle_pct": per[worst].get("oracle")})
    return sorted(out, key=lambda x: (x["median"], x["p90"], x["arm"]))


def goals(rows: list[dict[str, Any]], candidate: str) -> list[str]:
    """The issue's goals for a candidate policy, as measured (docs/zoo.md)."""
    per = {s: v for s, v in table(rows).items() if candidate in v}
    need = ("robinhood", "lama++", "static", "oracle")
    per = {s: v for s, v in per.items() if all(n in v for n in need)}
    if not per:
        return [f"{candidate}: no feasible scenario with robinhood, lama++, static and oracle runs"]
    c = [v[candidate] for v in per.values()]
    o = [v["oracle"] for v in per.values()]
    mc, mo = statistics.median(c), statistics.median(o)
    no_worse = sum(v[candidate] <= min(v["robinhood"], v["lama++"]) + TIE_POINTS for v in per.values())
    hard = [v for v in per.values() if max(v["robinhood"], v["lama++"]) > v["oracle"] + 5]
    better = sum(v[candidate] < min(v["robinhood"], v["lama++"]) - TIE_POINTS for v in hard)
    vs_static = sum(v[candidate] > v["static"] + 5 for v in per.values())
    n = len(per)

    def ok(b: bool) -> str:
        return "met" if b else "**not met**"

    return [
        f"- median {mc:.1f}% against the oracle's {mo:.1f}% (goal: at most twice, or within 5 points): "
        + ok(mc <= 2 * mo or mc <= mo + 5),
        f"- no worse than both robinhood and lama++ (within {TIE_POINTS:g} points) on {no_worse} of {n} "
        f"({100 * no_worse / n:.0f}%; goal ≥ 90%): " + ok(no_worse >= 0.9 * n),
        f"- better than both (by more than {TIE_POINTS:g} points) on {better} of the {len(hard)} scenarios where "
        f"either is more than 5 points above the oracle ({100 * better / len(hard) if hard else 100:.0f}%; goal ≥ 80%): "
        + ok(not hard or better >= 0.8 * len(hard)),
        f"- more than 5 points worse than the static split on {vs_static} of {n} (goal: none): " + ok(vs_static == 0),
    ]


def write(rows: list[dict[str, Any]], out: Path, seeds: list[int], wall_s: float,
          candidate: str | None = None) -> tuple[Path, Path, Path]:
    """zoo.csv (every run), zoo.md (the summary, per family, the goals) and zoo.png
    (violations per scenario, sorted, one line per arm)."""
    csv_path = out / "zoo.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    classes: dict[int, str] = {r["seed"]: r["class"] for r in rows}
    fams: dict[int, str] = {r["seed"]: r["family"] for r in rows}
    counts = {c: sum(1 for v in classes.values() if v == c) for c in ("margin", "tight", "infeasible")}
    lines = [f"# Scenario zoo: {len(classes)} scenarios ({seed_range(seeds)} seeds {min(seeds)}–{max(seeds)}), "
             f"{len(set(r['arm'] for r in rows))} arms, {wall_s / 60:.1f} min", "",
             f"Classes (the oracle's analysis): {counts['margin']} margin, {counts['tight']} tight, "
             f"{counts['infeasible']} infeasible. SLO violation % over the {counts['margin'] + counts['tight']} "
             "feasible scenarios (margin and tight):", "",
             "| arm | median | P90 | best online | ÷ oracle (sums) | worst scenario (seed, family: arm / oracle) |",
             "|---|---|---|---|---|---|"]
    for s in summary(rows):
        best = "–" if s["best_share"] is None else f"{100 * s['best_share']:.0f}%"
        ratio = "–" if s["oracle_ratio"] is None else f"{s['oracle_ratio']:.1f}×"
        orc = "–" if s["worst_oracle_pct"] is None else f"{s['worst_oracle_pct']:.1f}"
        lines.append(f"| {s['arm']} | {s['median']:.1f} | {s['p90']:.1f} | {best} | {ratio} | "
                     f"{s['worst_seed']}, {s['worst_family']}: {s['worst_pct']:.1f} / {orc} |")
    per = table(rows)
    arms = [s["arm"] for s in summary(rows)]
    families = sorted(set(fams[s] for s in per))
    lines += ["", "Median SLO violation % per family (feasible scenarios; their number in brackets):", "",
              "| arm | " + " | ".join(f"{f} ({sum(fams[s] == f for s in per)})" for f in families) + " |",
              "|---|" + "---|" * len(families)]
    for a in arms:
        cells = []
        for f in families:
            xs = [per[s][a] for s in per if fams[s] == f and a in per[s]]
            cells.append(f"{statistics.median(xs):.1f}" if xs else "–")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    if candidate and candidate in arms:
        lines += ["", f"Goals for {candidate} (docs/zoo.md):", "", *goals(rows, candidate)]
    md_path = out / "zoo.md"
    md_path.write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, a in enumerate(arms):
        ys = sorted(per[s][a] for s in per if a in per[s])
        style = {"color": "black", "lw": 2.2} if a == "oracle" else {"color": _color(a, i), "lw": 1.4}
        ax.plot(range(1, len(ys) + 1), ys, label=a, **style)
    ax.set_xlabel("feasible scenarios, each arm's sorted by its violations")
    ax.set_ylabel("SLO violation %")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(f"Scenario zoo, {len(per)} feasible scenarios (simulator)")
    fig.tight_layout()
    png_path = out / "zoo.png"
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return csv_path, md_path, png_path
