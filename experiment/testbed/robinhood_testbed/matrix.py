"""The policy matrix (docs/results.md, "The paper's experiments at the paper's scale"):
every arm of every experiment for several seeds in the simulator, summarized as SLO
violation % (median and range over seeds), the highest P99, and the paper's Fig. 8
curves — the share of P99 observations above each SLO — side by side with what the
paper reports for the same experiment.

``make paper`` runs it on examples/paper/*.yaml.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robinhood_common.contract import ConfigError
from robinhood_common.experiment import from_document

from .analysis import PolicyRun, median_range, write_csv
from .executor import ArmJob, Executor, LocalExecutor
from .experiment import Arm, Experiment, ExperimentError
from .plots import _color, plt, save, violation_axis
from .oracle import Comparison, hindsight_rerun
from .run import prepare_inputs

#: What the paper reports for each experiment of examples/paper (§5, quoted from its
#: text), by experiment name: (what, value) pairs shown beside our numbers.
PAPER = {
    "paper-spikes": [("RobinHood, 150 ms P99 SLO violations (§5.2, Fig. 8a)", "0.3%"),
                     ("OneRFpolicy (one shared cache), the next best (§5.2)", "30%")],
    "paper-quick-ramp": [("RobinHood (§5.3, Fig. 10b)", "< 1.5%"), ("LAMA++, the next best (§5.3)", "38%")],
    "paper-slow-ramp": [("RobinHood (§5.3, Fig. 10a)", "never violates"), ("LAMA++ (§5.3)", "3.3%"),
                        ("OneRFpolicy and TAO++", "above 150 ms after 40 min")],
    "paper-quick-ramp-correlated": [("RobinHood (§5.3, Fig. 11b)", "never violates"),
                                    ("OneRFpolicy, the next best (§5.3)", "> 33%")],
    "paper-slow-ramp-correlated": [("RobinHood (§5.3, Fig. 11a)", "never violates"),
                                   ("OneRFpolicy and TAO++ (§5.3)", "> 28%"), ("Cliffhanger++ (§5.3)", "8.2%")],
    "paper-random-walk": [("RobinHood (§5.4, Fig. 12b)", "5%"), ("TAO++, the next best (§5.4)", "> 24%"),
                          ("max P99: RobinHood / TAO++ (§5.4)", "306 ms / > 610 ms")],
}

#: The SLOs of the Fig. 8-style curves, ms.
CURVE_SLOS = [50, 75, 100, 125, 150, 200, 250, 300, 400, 500, 750, 1000]


def variants(exps: list[Experiment], seeds: list[int]) -> list[tuple[Experiment, int]]:
    """Every (experiment, seed), validated before anything runs."""
    out = []
    for exp in exps:
        for s in seeds:
            doc = dict(exp.document)
            doc["seed"] = s
            try:
                out.append((from_document(doc, exp.base_dir), s))
            except ConfigError as e:  # pragma: no cover - a valid document stays valid with another seed
                raise ExperimentError(f"{exp.name} with seed {s}: {e}") from None
    return out


def run(exps: list[Experiment], arms_of: Callable[[Experiment], list[Arm]], seeds: list[int], out: Path,
        jobs: int = 1, sample: float | None = None, calibration: Path | None = None,
        progress: Callable[[str], None] = lambda s: None, full: bool = False,
        executor: Executor | None = None) -> list[dict[str, Any]]:
    """Every arm of every (experiment, seed) in the simulator, on the executor (by
    default `jobs` at once here); one row per run, in the order of the experiments,
    seeds and arms. full: no miniature, whatever the experiments' sim blocks say."""
    todo = []
    for exp, s in variants(exps, seeds):
        point = out / exp.name / f"seed-{s}"
        trace, scenario = prepare_inputs(exp, point, "sim")
        for arm in arms_of(exp):
            todo.append(ArmJob(exp, arm, point, trace, scenario, calibration, sample, full))
    executor = executor or LocalExecutor(jobs)
    progress(f"{len(todo)} runs, {executor.describe()}")
    rows: list[dict[str, Any] | None] = [None] * len(todo)
    start = time.monotonic()
    for n, done in enumerate(executor.run(todo)):
        job, res = done.job, done.result
        row = {"experiment": job.exp.name, "seed": job.exp.seed, "arm": job.arm.name,
               **PolicyRun.load(res.run_dir).figures(),
               "wall_s": round(done.wall_s, 1), "dir": str(res.run_dir)}
        rows[done.index] = row
        progress(f"[{n + 1}/{len(todo)} {time.monotonic() - start:.0f}s] {row['experiment']} seed {row['seed']} "
                 f"{row['arm']}: {row['violation_pct']:.1f}% (max P99 {row['max_p99_ms'] or 0:.0f} ms)"
                 + (f" on {done.worker}" if done.worker else ""))
    # The oracle made at least as good as every online arm's allocation: where its
    # schedule changed, its arm runs again.
    points = [[(n, j, Path(rows[n]["dir"])) for n, j in enumerate(todo) if j.out_dir == p and rows[n] is not None]
              for p in dict.fromkeys(j.out_dir for j in todo)]
    for n, done in hindsight_rerun([Comparison(r[0][1].exp, r[0][1].out_dir, r[0][1].trace, r[0][1].scenario, r)
                                    for r in points if r], executor, progress):
        rows[n] = {**rows[n], **PolicyRun.load(done.result.run_dir).figures(),  # type: ignore[dict-item]
                   "wall_s": round(done.wall_s, 1)}
    return [r for r in rows if r is not None]


def minutes(seconds: float) -> str:
    """A duration in minutes, with a decimal below ten."""
    m = seconds / 60
    return f"{m:.1f}" if m < 10 else f"{m:.0f}"


def curve(r: PolicyRun) -> list[float]:
    """Fig. 8: the share of P99 observations after the warm-up above each SLO, %."""
    p99 = r.measured_series("p99_ms")
    if not p99:
        return [float("nan")] * len(CURVE_SLOS)
    return [100 * sum(v > slo for v in p99) / len(p99) for slo in CURVE_SLOS]


def write(rows: list[dict[str, Any]], out: Path) -> tuple[Path, Path]:
    """matrix.csv (every run), matrix.md (per experiment: median [range] per arm and the
    paper's figures) and per experiment <name>-curves.png and <name>-p99.png."""
    csv_path = write_csv(out / "matrix.csv", rows, [k for k in rows[0] if k != "dir"])
    exps = list(dict.fromkeys(r["experiment"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    lines = ["# Policy matrix", "",
             f"Every arm of every experiment in the simulator, seeds {', '.join(map(str, seeds))}: "
             "SLO violation % and highest P99 after the warm-up, median [min–max] over the seeds; "
             f"the runs' wall times sum to {minutes(sum(r['wall_s'] for r in rows))} minutes.", ""]
    for e in exps:
        mine = [r for r in rows if r["experiment"] == e]
        arms = list(dict.fromkeys(r["arm"] for r in mine))

        def vals(arm: str, key: str, mine: list[dict[str, Any]] = mine) -> list[float]:
            return [r[key] for r in mine if r["arm"] == arm and r[key] is not None]

        arms.sort(key=lambda a: statistics.median(vals(a, "violation_pct")) if vals(a, "violation_pct") else 1e9)
        lines += [f"## {e}", "", "| arm | SLO violation % | max P99 (ms) | hit ratio |", "|---|---|---|---|"]
        for a in arms:
            hr = vals(a, "hit_ratio")
            lines.append(f"| {a} | {median_range(vals(a, 'violation_pct'))} | {median_range(vals(a, 'max_p99_ms'))} | "
                         + (f"{statistics.median(hr):.3f} |" if hr else "– |"))
        if e in PAPER:
            lines += ["", "The paper reports: " + "; ".join(f"{w}: {v}" for w, v in PAPER[e]) + "."]
        curves_png = _curves(mine, arms, out / f"{e}-curves.png", e)
        p99_png = _p99(mine, arms, out / f"{e}-p99.png", e, seeds[0])
        lines += ["", f"![{e}: violations against the SLO]({curves_png.name}) ![{e}: P99 over time]({p99_png.name})", ""]
    md = out / "matrix.md"
    md.write_text("\n".join(lines) + "\n")
    return csv_path, md


def _curves(rows: list[dict[str, Any]], arms: list[str], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, a in enumerate(arms):
        cs = [curve(PolicyRun.load(Path(r["dir"]))) for r in rows if r["arm"] == a]
        med = [statistics.median(c[j] for c in cs) for j in range(len(CURVE_SLOS))]
        ax.plot(CURVE_SLOS, med, marker=".", color=_color(a, i), lw=1.5, label=a)
    ax.axvline(150, color="grey", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xticks(CURVE_SLOS, [str(s) for s in CURVE_SLOS], fontsize=7)
    ax.set_xlabel("P99 SLO (ms)")
    violation_axis(ax, "SLO violations % (median over seeds)", f"{title}: violations against the SLO (cf. paper Fig. 8)",
                   legend_size=7, fontsize=9)
    return save(fig, path, dpi=100)


def _p99(rows: list[dict[str, Any]], arms: list[str], path: Path, title: str, seed: int) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for i, a in enumerate(arms):
        for r in rows:
            if r["arm"] == a and r["seed"] == seed:
                pr = PolicyRun.load(Path(r["dir"]))
                pts = [(float(p["t_s"]) / 60, float(p["p99_ms"])) for p in pr.series() if p.get("p99_ms") is not None]
                if pts:
                    ax.plot(*zip(*pts), color=_color(a, i), lw=1, label=a)
    ax.axhline(150, color="grey", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("minutes")
    ax.set_ylabel("P99 over the last window (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=4)
    ax.set_title(f"{title}, seed {seed}: P99 over time", fontsize=9)
    return save(fig, path, dpi=100)
