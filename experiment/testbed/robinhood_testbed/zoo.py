"""The scenario zoo (docs/zoo.md): every allocation policy on capacity scenarios drawn
by ``tracegen scenario generate`` for each (experiment, seed), each analysed once by the
oracle, in the simulator — the evaluation nobody tuned a policy for."""
from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robinhood_common.contract import ConfigError, dump_yaml, load_yaml
from robinhood_common.experiment import from_document
from robinhood_common.units import format_duration
from robinhood_controller import policies as allocation

from .analysis import PolicyRun, write_csv
from .deploy import build_topology
from .executor import ArmJob, Executor, LocalExecutor
from .experiment import Arm, Experiment, ExperimentError
from .experiment import arms as experiment_arms
from .plots import _color, plt, save, violation_axis
from .procs import StartError
from . import oracle
from .oracle import HINDSIGHT, ORACLE_FILE, judged_run
from .run import FixedPorts, prepare_inputs, tracegen
from .seeds import RANGES

#: The development and evaluation seed ranges (inclusive), as experiment/zoo defines them.
DEV = (RANGES["dev"].min, RANGES["dev"].max)
EVAL = (RANGES["eval"].min, RANGES["eval"].max)
#: Scenario classes counted as feasible (some allocation keeps every backend under capacity).
FEASIBLE = ("margin", "tight")
#: Arms that are not online policies (they read the scenario and the trace): the oracle
#: (with foresight) and the reactive oracle.
ORACLE, REACTIVE = "oracle", "oracle-reactive"
OFFLINE = (ORACLE, REACTIVE)
#: An online arm beating the oracle by more than this many points means the oracle is not the
#: best schedule known there (the oracle check).
CHECK_POINTS = 3.0
#: What runs on a scenario the oracle's analysis calls infeasible (--infeasible; docs/zoo.md).
INFEASIBLE_ALL, INFEASIBLE_CHECK = "all", "check"
INFEASIBLE = (INFEASIBLE_ALL, INFEASIBLE_CHECK)
#: Noise run k's experiment seed is the scenario's plus k times this: past both seed ranges.
NOISE_STRIDE = 7919


def noise_variant(exp: Experiment, k: int) -> Experiment:
    """The experiment of noise run ``k`` (0: the experiment itself): the seed, which drives
    the backends' noise and the simulator's draws, moved by ``k * NOISE_STRIDE``; the
    trace and scenario files stay the drawn ones."""
    if k == 0:
        return exp
    doc = copy.deepcopy(exp.document)
    doc["seed"] = int(doc["seed"]) + k * NOISE_STRIDE
    return from_document(doc, exp.base_dir)


def parse_seeds(text: str) -> list[int]:
    """--seeds: a range's name (``dev``, ``eval``: its sample, the range's first seeds),
    ``A-B`` ranges and single seeds, comma-separated."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part in RANGES:
            lo, hi = RANGES[part].min, RANGES[part].sample_max
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
    app_servers: int
    dir: Path
    trace: Path
    scenario: Path
    family: str
    cls: str
    worst_utilization: float | None


def family_of(scenario_text: str) -> str:
    """The family the generator wrote in the scenario's header (``# family: NAME``)."""
    for line in scenario_text.splitlines():
        s = line.strip()
        if s.startswith("#") and s[1:].strip().startswith("family:"):
            return s[1:].strip()[len("family:"):].strip().split()[0]
    return "?"


def app_servers_of(seed: int, choices: list[int] | None) -> int | None:
    """The seed's number of app servers: ``choices[seed % len(choices)]`` (None: the
    experiment's own)."""
    return choices[seed % len(choices)] if choices else None


def draw(exp: Experiment, seed: int, out: Path, family: str | None = None,
         app_servers: int | None = None, feasible_only: bool = False) -> Point:
    """Draw, write and analyse the scenario of one seed (nothing is simulated): the
    experiment with ``app_servers`` app servers (None: its own), the drawn scenario, and
    the oracle's analysis in ``oracle.json`` (the class, and the schedules the oracle arms
    apply; with ``feasible_only``, none on an infeasible scenario)."""
    point = out / f"seed-{seed}"
    doc = copy.deepcopy(exp.document)
    doc["seed"] = seed
    doc.pop("scenario", None)
    if app_servers is not None:
        doc.setdefault("cache", {})["app_servers"] = app_servers
    try:
        base = from_document(doc, exp.base_dir)
    except ConfigError as e:
        raise ExperimentError(f"seed {seed}: {e}") from None
    base_trace, _ = prepare_inputs(base, point / "calibration", "testbed")
    topology = point / "topology.yaml"
    arm = Arm("static", "partitioned", {"name": "static"}, {"policy": "random"})
    topology.write_text(dump_yaml(build_topology(base, arm, FixedPorts()), sort_keys=False))
    generated = point / "generated.yaml"
    gen = ["scenario", "generate", "--topology", str(topology), "--trace", str(base_trace),
           "--duration", format_duration(exp.duration), "--seed", str(seed),
           "--warmup", format_duration(exp.slo.warmup), "--out", str(generated)]
    if family:
        gen += ["--family", family]
    tracegen(gen, f"seed {seed}: drawing the scenario", timeout=900)
    text = generated.read_text()
    doc["scenario"] = load_yaml(text)
    try:
        variant = from_document(doc, exp.base_dir)
    except ConfigError as e:
        raise ExperimentError(f"seed {seed}: the drawn scenario makes the experiment invalid: {e}") from None
    trace, scenario = prepare_inputs(variant, point, "testbed")
    assert scenario is not None and isinstance(trace, Path)
    try:
        # judged with the arms' dispatch (the experiment's first)
        oracle.schedule(variant, experiment_arms(variant, ["partitioned"], [{"name": ORACLE}])[0], point, trace, scenario,
                        feasible_only=feasible_only)
        check = oracle.read(point / ORACLE_FILE)
    except (ExperimentError, StartError) as e:
        raise ExperimentError(f"seed {seed}: the oracle's analysis: {e}") from None
    return Point(seed, variant, variant.cache.app_servers, point, trace, scenario, family_of(text),
                 str(check.get("class", "?")), check.get("worst_utilization"))


def run(exps: list[Experiment], arms_of: Callable[[Experiment], list[Arm]], seeds: list[int], out: Path,
        jobs: int = 1, family: str | None = None, progress: Callable[[str], None] = lambda s: None,
        executor: Executor | None = None, app_servers: list[int] | None = None,
        infeasible: str = INFEASIBLE_ALL, noise_seeds: int = 1) -> list[dict[str, Any]]:
    """Draw every (experiment, seed)'s scenario (``jobs`` at once), then run every arm on
    each in the simulator, ``noise_seeds`` times (:func:`noise_variant`); one row per
    (experiment, seed, arm), in that order, its figures the medians over the noise runs.
    ``infeasible`` says what runs on an infeasible scenario (docs/zoo.md, "What runs").
    With one experiment its points are in ``out/seed-N``, with several in ``out/<name>/seed-N``."""
    if noise_seeds < 1:
        raise ExperimentError(f"--noise-seeds: {noise_seeds} must be at least 1")
    if infeasible not in INFEASIBLE:
        raise ExperimentError(f"--infeasible: {infeasible!r} is not one of {', '.join(INFEASIBLE)}")
    recommended = allocation.registry.recommended()
    if infeasible == INFEASIBLE_CHECK and not any(a.policy_name == recommended for e in exps for a in arms_of(e)):
        raise ExperimentError(f"--infeasible {INFEASIBLE_CHECK}: the arms do not include the recommended policy "
                              f"({recommended}), the one that runs on an infeasible scenario")
    start = time.monotonic()
    todo_points = [(e, s) for e in exps for s in seeds]

    def one(es: tuple[Experiment, int]) -> tuple[Experiment, Point]:
        e, s = es
        where = out if len(exps) == 1 else out / e.name
        return e, draw(e, s, where, family, app_servers_of(s, app_servers), feasible_only=infeasible == INFEASIBLE_CHECK)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        points = list(pool.map(one, todo_points))
    counts = {c: sum(p.cls == c for _, p in points) for c in dict.fromkeys(p.cls for _, p in points)}
    progress(f"{len(points)} scenarios drawn in {time.monotonic() - start:.0f}s: "
             + ", ".join(f"{n} {c}" for c, n in counts.items()))
    def row(e: Experiment, p: Point, arm: str, runs: list[tuple[Path, float]]) -> dict[str, Any]:
        """The arm's row on the point: the medians over its noise runs."""
        got = [PolicyRun.load(run_dir).figures() for run_dir, _ in runs]

        def med(k: str) -> float | None:
            xs = [g[k] for g in got if g[k] is not None]
            return statistics.median(xs) if xs else None

        viol = [g["violation_pct"] for g in got if g["violation_pct"] is not None]
        return {"experiment": e.name, "seed": p.seed, "app_servers": p.app_servers, "family": p.family,
                "class": p.cls, "worst_utilization": p.worst_utilization, "arm": arm,
                **{k: med(k) for k in ("violation_pct", "max_p99_ms", "hit_ratio")},
                "wall_s": round(sum(w for _, w in runs), 1), "noise_runs": len(runs),
                "violation_min": min(viol) if viol else None, "violation_max": max(viol) if viol else None,
                "oracle_schedule": _chosen(p.dir)}

    # An oracle arm the judge has simulated already is that run (a link to it), not run again.
    slots: list[tuple[Experiment, Point, Arm]] = [(e, p, arm) for e, p in points for arm in arms_of(p.exp)
                                                  if p.cls in FEASIBLE or infeasible == INFEASIBLE_ALL
                                                  or arm.policy_name == recommended]
    runs: list[list[tuple[Path, float] | None]] = [[None] * noise_seeds for _ in slots]
    jobs: dict[tuple[int, int], ArmJob] = {}
    todo: list[tuple[int, int, ArmJob]] = []
    linked = 0
    for i, (e, p, arm) in enumerate(slots):
        for k in range(noise_seeds):
            where = p.dir if k == 0 else p.dir / f"noise-{k}"
            if k > 0 and not where.exists():
                where.mkdir()
                if (p.dir / ORACLE_FILE).exists():  # the oracle arms apply the drawn point's schedules
                    (where / ORACLE_FILE).symlink_to(Path("..") / ORACLE_FILE)
            jobs[i, k] = ArmJob(noise_variant(p.exp, k), arm, where, p.trace, p.scenario)
            src = judged_run(p.dir, arm) if k == 0 else None
            if src is None:
                todo.append((i, k, jobs[i, k]))
                continue
            link = p.dir / arm.name
            if link.exists() or link.is_symlink():
                raise ExperimentError(f"{link} already exists; choose another --out")
            link.symlink_to(src.relative_to(p.dir))
            runs[i][k] = (link, 0.0)
            linked += 1
    executor = executor or LocalExecutor(jobs)
    progress(f"{len(todo)} runs, {executor.describe()}"
             + (f", {noise_seeds} noise seeds per arm" if noise_seeds > 1 else "")
             + (f" ({linked} oracle arms are the judge's runs)" if linked else ""))
    for n, done in enumerate(executor.run([j for _, _, j in todo])):
        i, k, _ = todo[done.index]
        runs[i][k] = (done.result.run_dir, done.wall_s)
        if (n + 1) % 50 == 0 or n + 1 == len(todo):
            progress(f"[{n + 1}/{len(todo)} {time.monotonic() - start:.0f}s]")
    # The oracle made at least as good as every online arm's allocation, point by point:
    # where its schedule changed, its arm (linked to the judge's run: to the new one) and its
    # noise runs run again.
    compared = [oracle.Comparison(p.exp, p.dir, p.trace, p.scenario, [
        ((i, k), jobs[i, k], got[0]) for i, (_, q, _) in enumerate(slots) if q is p for k, got in enumerate(runs[i])
        if got is not None]) for _, p in points if p.cls in FEASIBLE]
    for (i, k), done in oracle.hindsight_rerun(compared, executor, progress):
        runs[i][k] = (done.result.run_dir, done.wall_s)
    return [row(e, p, arm.name, [g for g in got if g is not None]) for (e, p, arm), got in zip(slots, runs)]


def _chosen(point: Path) -> str | None:
    """The candidate the oracle's schedule with foresight is on a point (None: not judged)."""
    try:
        return oracle.read(point / ORACLE_FILE)["judged"]["chosen"]
    except (ExperimentError, KeyError):  # no file, or not judged
        return None


def _pct(xs: list[float], q: float) -> float:
    """The q-quantile by nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(-(-q * len(s) // 1)) - 1))]


#: A scenario: (experiment, seed).
Key = tuple[str, int]


def _key(r: dict[str, Any]) -> Key:
    return (str(r.get("experiment", "")), int(r["seed"]))


def table(rows: list[dict[str, Any]]) -> dict[Key, dict[str, float]]:
    """Violation % per feasible scenario and arm (arms without a number are left out)."""
    out: dict[Key, dict[str, float]] = {}
    for r in rows:
        if r["class"] in FEASIBLE and r["violation_pct"] not in (None, ""):
            out.setdefault(_key(r), {})[r["arm"]] = float(r["violation_pct"])
    return out


def _label(k: Key) -> str:
    return f"{k[0]} {k[1]}" if k[0] else str(k[1])


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm, over the feasible scenarios: median, P90, best-online share, worst scenario
    (the most points above the oracle), and for an online arm its distance to the oracle
    split into reaction (arm − reactive oracle) and foresight (reactive oracle − oracle),
    median and P90 of each, and how often it beats the oracle by more than CHECK_POINTS."""
    per = table(rows)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    family = {_key(r): r["family"] for r in rows}
    online = [a for a in arms if a not in OFFLINE]
    out = []
    for a in arms:
        keys = [k for k in per if a in per[k]]
        if not keys:
            continue
        xs = [per[k][a] for k in keys]
        best = [k for k in keys if a in online and per[k][a] <= min(per[k][o] for o in online if o in per[k])]
        worst = max(keys, key=lambda k: (per[k][a] - per[k].get(ORACLE, 0.0), k))
        both = [k for k in keys if ORACLE in per[k] and REACTIVE in per[k]]
        row: dict[str, Any] = {
            "arm": a, "scenarios": len(keys), "median": statistics.median(xs), "p90": _pct(xs, 0.9),
            "best_share": len(best) / len(keys) if a in online else None,
            "worst": worst, "worst_family": family[worst], "worst_pct": per[worst][a],
            "worst_oracle_pct": per[worst].get(ORACLE), "reaction": None, "foresight": None, "to_oracle": None,
            "beats_oracle": None, "beats_reactive": None}
        if a in online and both:
            react = [per[k][a] - per[k][REACTIVE] for k in both]
            fore = [per[k][REACTIVE] - per[k][ORACLE] for k in both]
            dist = [per[k][a] - per[k][ORACLE] for k in both]
            row.update(reaction=(statistics.median(react), _pct(react, 0.9)),
                       foresight=(statistics.median(fore), _pct(fore, 0.9)),
                       to_oracle=(statistics.median(dist), _pct(dist, 0.9)),
                       beats_oracle=[k for k in both if per[k][a] < per[k][ORACLE] - CHECK_POINTS],
                       beats_reactive=[k for k in both if per[k][a] < per[k][REACTIVE] - CHECK_POINTS])
        out.append(row)
    return sorted(out, key=lambda x: (x["median"], x["p90"], x["arm"]))


def _pair(v: tuple[float, float] | None) -> str:
    return "–" if v is None else f"{v[0]:.1f} / {v[1]:.1f}"


def _arm_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| arm | median | P90 | best online | to the oracle (median / P90) | reaction | foresight | "
             "worst scenario (arm / oracle) |", "|---|---|---|---|---|---|---|---|"]
    for s in summary(rows):
        best = "–" if s["best_share"] is None else f"{100 * s['best_share']:.0f}%"
        orc = "–" if s["worst_oracle_pct"] is None else f"{s['worst_oracle_pct']:.1f}"
        lines.append(f"| {s['arm']} | {s['median']:.1f} | {s['p90']:.1f} | {best} | {_pair(s['to_oracle'])} | "
                     f"{_pair(s['reaction'])} | {_pair(s['foresight'])} | "
                     f"{_label(s['worst'])}, {s['worst_family']}: {s['worst_pct']:.1f} / {orc} |")
    return lines


def _oracle_check(rows: list[dict[str, Any]]) -> list[str]:
    per = table(rows)
    family = {_key(r): r["family"] for r in rows}
    lines = [f"- {s['arm']} on {_label(k)} ({family[k]}): {per[k][s['arm']]:.1f} against the oracle's {per[k][ORACLE]:.1f}"
             for s in summary(rows) for k in s["beats_oracle"] or []]
    chosen = {_key(r): str(r.get("oracle_schedule") or "") for r in rows if _key(r) in per}
    replayed = sorted(k for k, c in chosen.items() if c.startswith(HINDSIGHT))
    tail = [f"The oracle's schedule is an online arm's allocation replayed in hindsight on {len(replayed)} of the "
            f"{len(per)} feasible scenarios (its own candidates measured worse there): "
            + ", ".join(f"{_label(k)} ({chosen[k][len(HINDSIGHT):]})" for k in replayed) + "."] if replayed else []
    if not lines:
        return [f"No online arm beats the oracle by more than {CHECK_POINTS:g} points on any feasible scenario.",
                *([""] + tail if tail else [])]
    return [f"Online arms beating the oracle by more than {CHECK_POINTS:g} points (the oracle is not the best schedule known there):", "",
            *lines, *([""] + tail if tail else [])]


def _class_check(rows: list[dict[str, Any]]) -> list[str]:
    """The check of the infeasible class: the least SLO violation any arm had on a scenario
    the oracle's analysis calls infeasible (none of them can meet the SLO throughout), in
    any of its noise runs."""
    def lowest(r: dict[str, Any]) -> float:  # over its noise runs
        v = r.get("violation_min")
        return float(v if v not in (None, "") else r["violation_pct"])

    runs = [r for r in rows if r["class"] not in FEASIBLE and r.get("violation_pct") is not None]
    if not runs:
        return []
    n = len({_key(r) for r in runs})
    least = min(runs, key=lowest)
    where = f"{least['arm']} on {_label(_key(least))} ({least['family']})"
    if lowest(least) == 0:
        return [f"The infeasible class is wrong: {where} met the SLO throughout, on a scenario the analysis "
                "calls infeasible."]
    return [f"The infeasible class holds: on the {n} infeasible scenarios "
            f"({', '.join(sorted(set(r['arm'] for r in runs)))}), the least SLO violation is "
            f"{lowest(least):.1f}% ({where})."]


def write(rows: list[dict[str, Any]], out: Path, seeds: list[int], wall_s: float) -> tuple[Path, Path, Path]:
    """zoo.csv (every run), zoo.md (the summary: every scenario, then per key source and
    per number of app servers, per family, the oracle check) and zoo.png
    (violations per scenario, sorted, one line per arm)."""
    csv_path = write_csv(out / "zoo.csv", rows)
    classes: dict[Key, str] = {_key(r): r["class"] for r in rows}
    fams: dict[Key, str] = {_key(r): r["family"] for r in rows}
    apps: dict[Key, int] = {_key(r): int(r.get("app_servers") or 1) for r in rows}
    exps = list(dict.fromkeys(k[0] for k in classes))
    counts = {c: sum(1 for v in classes.values() if v == c) for c in ("margin", "tight", "infeasible")}
    feasible = counts["margin"] + counts["tight"]
    lines = [f"# Scenario zoo: {len(classes)} scenarios ({seed_range(seeds)} seeds {min(seeds)}–{max(seeds)}"
             + (f"; experiments {', '.join(exps)}" if len(exps) > 1 or exps[0] else "") + "), "
             f"{len(set(r['arm'] for r in rows))} arms, {wall_s / 60:.1f} min", "",
             f"Classes (the oracle's analysis): {counts['margin']} margin, {counts['tight']} tight, "
             f"{counts['infeasible']} infeasible. SLO violation % over the {feasible} feasible scenarios "
             "(margin and tight). An online arm's distance to the oracle (with foresight) splits into "
             "*reaction* (its distance to the reactive oracle, which learns each phase when it starts) and "
             "*foresight* (the reactive oracle's distance to the oracle); each is a median / P90 over the "
             "scenarios, in points:", "", *_arm_table(rows), "", *_oracle_check(rows)]
    noise = max(int(r.get("noise_runs") or 1) for r in rows)
    if noise > 1:
        lines[2:2] = [f"Every figure is the median of {noise} runs of the arm on the scenario, the backends' and the "
                      "simulator's noise seeded differently (--noise-seeds; the least and the most of each: "
                      "zoo.csv).", ""]
    if check := _class_check(rows):
        lines += ["", *check]
    groups: list[tuple[str, Callable[[Key], bool]]] = []
    if len(exps) > 1:
        groups += [(f"experiment {e}", (lambda e: lambda k: k[0] == e)(e)) for e in exps]
    if len(set(apps.values())) > 1:
        groups += [(f"{n} app server{'s' if n > 1 else ''}", (lambda n: lambda k: apps[k] == n)(n))
                   for n in sorted(set(apps.values()))]
    for title, keep in groups:
        sub = [r for r in rows if keep(_key(r))]
        n = sum(1 for k, c in classes.items() if keep(k) and c in FEASIBLE)
        if n:
            lines += ["", f"## {title} ({n} feasible scenarios)", "", *_arm_table(sub)]
    per = table(rows)
    arms = [s["arm"] for s in summary(rows)]
    families = sorted(set(fams[k] for k in per))
    lines += ["", "Median SLO violation % per family (feasible scenarios; their number in brackets):", "",
              "| arm | " + " | ".join(f"{f} ({sum(fams[k] == f for k in per)})" for f in families) + " |",
              "|---|" + "---|" * len(families)]
    for a in arms:
        cells = []
        for f in families:
            xs = [per[k][a] for k in per if fams[k] == f and a in per[k]]
            cells.append(f"{statistics.median(xs):.1f}" if xs else "–")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    md_path = out / "zoo.md"
    md_path.write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, a in enumerate(arms):
        ys = sorted(per[k][a] for k in per if a in per[k])
        style = ({"color": "black", "lw": 2.2} if a == ORACLE else
                 {"color": "black", "lw": 1.6, "ls": "--"} if a == REACTIVE else {"color": _color(a, i), "lw": 1.4})
        ax.plot(range(1, len(ys) + 1), ys, label=a, **style)
    ax.set_xlabel("feasible scenarios, each arm's sorted by its violations")
    violation_axis(ax, "SLO violation %", f"Scenario zoo, {len(per)} feasible scenarios (simulator)")
    return csv_path, md_path, save(fig, out / "zoo.png")
