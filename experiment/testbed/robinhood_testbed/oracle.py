"""The oracle's schedule file of a comparison folder (``oracle.json``, checked against
schema/oracle.schema.yaml at every read; docs/algorithms.md, "Judged in the simulator"):
:func:`schedule` has ``tracegen oracle`` write it and the judge simulate its candidates;
:func:`hindsight_rerun` judges the online arms' allocations too, once they have run."""
from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robinhood_common import schedule as schedule_file
from robinhood_common.contract import dump_yaml
from robinhood_common.units import format_duration

from .analysis import PolicyRun
from .deploy import build_topology
from .executor import ArmJob, Done, Executor
from .experiment import Arm, Experiment, ExperimentError, allocation
from .run import RUN_START, FixedPorts, Generated, run_arm_sim, tracegen

#: The oracle's schedules of a run (tracegen oracle), in the comparison's folder:
#: computed once, read by every arm whose policy needs them (controller.run.oracle).
ORACLE_FILE = "oracle.json"
_oracle_locks: dict[Path, threading.Lock] = {}
_oracle_locks_guard = threading.Lock()


def _oracle_lock(path: Path) -> threading.Lock:
    """One lock per oracle file: its computation happens once, others' alongside."""
    with _oracle_locks_guard:
        return _oracle_locks.setdefault(path.resolve(), threading.Lock())


def read(path: Path) -> dict[str, Any]:
    """A schedule file, checked against schema/oracle.schema.yaml; ExperimentError names
    the file and the field at fault."""
    try:
        return schedule_file.read(path)
    except schedule_file.ScheduleError as e:
        raise ExperimentError(str(e)) from None


def needs_schedule(arm: Arm) -> bool:
    """Whether the arm's allocation policy applies the oracle's schedule."""
    name = arm.policy_name
    return name is not None and name in allocation.names() and allocation.get(name).needs_run


def schedule(exp: Experiment, arm: Arm, out_dir: Path, trace: Path, scenario: Path | None,
             feasible_only: bool = False) -> Path:
    """The run's oracle schedules (``tracegen oracle``: every partitioned app server, with
    foresight and reactive), computed once per comparison folder from the arm's topology
    (every partitioned arm has the same backends, budgets and trace). With
    ``feasible_only`` (``--feasible-only``), an infeasible run's file has its class and no
    schedule: an oracle arm cannot run on it."""
    path = out_dir / ORACLE_FILE
    with _oracle_lock(path):
        if path.exists():
            return path.resolve()
        topo = out_dir / "oracle-topology.yaml"
        topo.write_text(dump_yaml(build_topology(exp, arm, FixedPorts()), sort_keys=False))
        model = out_dir / MODEL_FILE
        args = ["oracle", "--topology", str(topo), "--trace", str(trace), "--duration", format_duration(exp.duration),
                "--seed", str(exp.seed), "--out", str(model)]
        args += ["--scenario", str(scenario)] if scenario is not None else []
        args += ["--feasible-only"] if feasible_only else []
        tracegen(args, "the oracle's schedule", log=out_dir / "tracegen-oracle.log")
        _judge(exp, arm, model, path, trace, scenario)
        return path.resolve()


#: tracegen oracle's file (the model's analysis and candidates) before the judge, and
#: where the judge simulates the candidates, next to the oracle's file.
MODEL_FILE, JUDGE_DIR = "oracle-model.json", "oracle-judge"


def _judge(exp: Experiment, arm: Arm, model: Path, path: Path, trace: Path, scenario: Path | None) -> None:
    """Simulate the model's candidate schedules (docs/algorithms.md, "Judged in the
    simulator") and write ``path``: the model's file with the best measured candidate as
    its foresight schedule and every candidate's figures in ``judged`` (unjudged where
    the model calls the run infeasible or has one candidate)."""
    doc = read(model)
    apps = doc.get("app_server_schedules", {})
    cands = doc.get("app_server_candidates", {})
    names = [c["name"] for c in next(iter(cands.values()), [])]
    if len(names) < 2 or doc.get("class") == "infeasible":
        _write_atomic(path, doc)
        return
    judge = Arm("oracle", arm.cache_mode, {"name": "oracle"}, arm.dispatch)
    by_name = {app: {c["name"]: c for c in cs} for app, cs in cands.items()}
    measured: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for name in names:
        # Every app server lists every name (tracegen); a combination of the app
        # servers' schedules simulated already is not simulated again.
        key = json.dumps({app: by_name[app][name]["steps"] for app in sorted(apps)}, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        measured[name] = _simulate_candidate(exp, judge, doc, model.parent / JUDGE_DIR / name,
                                             {app: by_name[app][name] for app in apps}, trace, scenario)
        if measured[name]["violation_pct"] == 0:
            break  # none can do better: the later candidates are not simulated
    best = min(measured, key=lambda n: _rank(measured[n]))  # the first of the best, in the model's order
    for app, sch in apps.items():
        c = by_name[app][best]
        sch["foresight"] = {**sch["foresight"], "steps": c["steps"], "predicted_violation_pct": c["predicted_violation_pct"]}
    doc["judged"] = {"chosen": best, "candidates": measured, "dispatch": judge.dispatch,
                     "how": "each candidate simulated with the experiment's seed (bin/sim); the fewest SLO "
                            "violations, then the lowest request P99"}
    _write_atomic(path, doc)


def _simulate_candidate(exp: Experiment, judge: Arm, doc: dict[str, Any], where: Path,
                        steps: dict[str, dict[str, Any]], trace: Path | Generated,
                        scenario: Path | None) -> dict[str, Any]:
    """Simulate the oracle file ``doc`` with ``steps`` (per app server: its ``steps`` and
    ``predicted_violation_pct``) as the schedule with foresight, in ``where``; the
    measured SLO violation % and request P99 after the warm-up."""
    where.mkdir(parents=True, exist_ok=True)
    cand = json.loads(json.dumps(doc))
    for app, sch in cand["app_server_schedules"].items():
        sch["foresight"] = {"steps": steps[app]["steps"], "predicted_violation_pct": steps[app].get("predicted_violation_pct")}
    (where / ORACLE_FILE).write_text(json.dumps(cand, indent=1) + "\n")
    shutil.rmtree(where / judge.name, ignore_errors=True)
    r = run_arm_sim(exp, judge, where, trace, scenario)
    slo = r.summary.get("slo", {})
    return {"violation_pct": float(slo["violation_pct"]) if slo.get("points_counted") else None,
            "p99_ms": r.summary.get("latency_ms_after_warmup", {}).get("p99")}


def _rank(m: dict[str, Any]) -> tuple[float, float]:
    """A measured candidate's rank: the fewest SLO violations, then the lowest request P99."""
    return (m["violation_pct"] if m.get("violation_pct") is not None else float("inf"),
            m["p99_ms"] if m.get("p99_ms") is not None else float("inf"))


#: The judge's candidates that replay an online arm's recorded allocation: this prefix
#: and the arm's name (also their folder in JUDGE_DIR).
HINDSIGHT = "hindsight-"


def recorded_schedule(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """An arm's allocation as it happened, as oracle steps per app server (``at_s``: the
    time since the run's start; ``mb``: the whole-MB limits it planned), one step at
    each change: from its controller timelines (``controller-<app>.jsonl``) and the run's
    start (``run-start``). Empty for an arm without a controller. ExperimentError names
    a timeline it cannot read."""
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        start = float((run_dir / RUN_START).read_text().split()[0])
    except (OSError, ValueError, IndexError) as e:
        raise ExperimentError(f"{run_dir / RUN_START}: no run start to put the timeline on: {e}") from None
    for f in sorted(run_dir.glob("controller-*.jsonl")):
        steps: list[dict[str, Any]] = []
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                tick = json.loads(line)
                mb = {name: int(p["planned_limit_bytes"]) // (1 << 20) for name, p in tick["partitions"].items()}
                at = max(0.0, round(float(tick["time"]) - start, 3))
            except (ValueError, KeyError, TypeError) as e:
                raise ExperimentError(f"{f}:{n}: not a controller tick with planned limits: {e!r}") from None
            if not steps or steps[-1]["mb"] != mb:
                steps.append({"at_s": at if steps else 0, "mb": mb})
        if steps:
            out[str(tick["app_server"])] = steps
    return out


def _hindsight(exp: Experiment, folder: Path, runs: dict[str, Path], trace: Path | Generated,
               scenario: Path | None) -> bool:
    """Each of ``runs`` (name → run folder) that measured fewer SLO violations than the
    judged oracle's choice is simulated as a candidate ``hindsight-<arm>``, and the best
    candidate becomes the schedule with foresight (docs/algorithms.md, "Judged in the
    simulator"). Whether the choice changed; an oracle not judged is left as it is."""
    path = folder / ORACLE_FILE
    doc = read(path)
    judged = doc.get("judged")
    if not judged:
        return False
    measured, chosen = judged["candidates"], judged["chosen"]
    judge = Arm("oracle", "partitioned", {"name": "oracle"}, judged["dispatch"])
    apps = doc.get("app_server_schedules", {})
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for name, run_dir in sorted(runs.items()):
        try:
            viol = PolicyRun.load(run_dir).violation_pct()
        except (OSError, ValueError):
            continue
        if viol is None or viol >= _rank(measured[chosen])[0]:
            continue  # not fewer violations (a lower P99 alone is not replayed)
        rec = recorded_schedule(run_dir)
        if set(rec) != set(apps):
            continue
        cand = HINDSIGHT + name
        steps[cand] = {app: {"steps": s, "predicted_violation_pct": None} for app, s in rec.items()}
        measured[cand] = _simulate_candidate(exp, judge, doc, folder / JUDGE_DIR / cand, steps[cand], trace, scenario)
    best = min(measured, key=lambda n: _rank(measured[n]))  # the first of the best, in the judge's order
    if best != chosen:
        for app, sch in apps.items():
            sch["foresight"] = {**sch["foresight"], **steps[best][app]}
        judged["chosen"] = best
    if steps:
        _write_atomic(path, doc)
    return best != chosen


@dataclass
class Comparison:
    """A comparison folder's finished runs: (the caller's key, the job that ran it, its
    folder). A job in another folder (a zoo noise run) is not judged, only run again."""

    exp: Experiment
    folder: Path
    trace: Path | Generated
    scenario: Path | None
    runs: list[tuple[Any, ArmJob, Path]]


def hindsight_rerun(comparisons: list[Comparison], executor: Executor,
                    progress: Callable[[str], None] = lambda s: None) -> Iterator[tuple[Any, Done]]:
    """Hindsight, then the stale arms again: in each comparison, :func:`_hindsight` on its
    online arms' runs (partitioned, a policy whose role is not ``bound``); where the
    oracle's schedule changed, each run of the ``oracle`` arm is out of date: a link to
    the judge's run is linked to the new one, any other run is removed and run again on
    the executor. Yields (key, Done) for each run run again, as it finishes."""
    changed, again = [], []
    for c in comparisons:
        arms = [(job.arm, d) for _, job, d in c.runs if job.out_dir == c.folder and job.arm.cache_mode == "partitioned"]
        online = {a.name: d for a, d in arms if a.policy_name in allocation.names()
                  and allocation.get(a.policy_name).role != "bound"}
        if not (online and (c.folder / ORACLE_FILE).exists() and _hindsight(c.exp, c.folder, online, c.trace, c.scenario)):
            continue
        changed.append(f"{c.exp.name} seed {c.exp.seed}")
        for key, job, d in c.runs:
            if job.arm.policy_name != "oracle":
                continue
            src = judged_run(c.folder, job.arm) if d.is_symlink() else None
            if src is not None:
                d.unlink()
                d.symlink_to(src.relative_to(c.folder))
            else:
                shutil.rmtree(d, ignore_errors=True)
                again.append((key, job))
    if changed:
        progress(f"the oracle replays an online arm's allocation (it measured better than the oracle's candidates) "
                 f"on {len(changed)} of the scenarios ({', '.join(changed)}); {len(again)} oracle runs again")
    for done in executor.run([job for _, job in again]):
        yield again[done.index][0], done


def judged_run(folder: Path, arm: Arm) -> Path | None:
    """The judge's simulation of exactly this arm in this comparison folder (None: there is
    none): the oracle's is the chosen candidate's run, the reactive oracle's the
    ``reactive`` candidate's when that is every app server's reactive schedule. It has the
    arm's own inputs, so the same results to the byte: running the arm again is spared."""
    if (arm.cache_mode != "partitioned" or arm.policy_name not in ("oracle", "oracle-reactive")
            or set(arm.policy or {}) != {"name"} or not (folder / ORACLE_FILE).exists()):
        return None
    doc = read(folder / ORACLE_FILE)
    judged = doc.get("judged") or {}
    if judged.get("dispatch") != arm.dispatch:
        return None
    reactive = arm.policy_name == "oracle-reactive"
    name = "reactive" if reactive else judged.get("chosen")
    if name not in judged.get("candidates", {}):
        return None
    if reactive:
        for app, sch in doc.get("app_server_schedules", {}).items():
            cand = {c["name"]: c for c in doc.get("app_server_candidates", {}).get(app, [])}.get(name)
            if cand is None or cand.get("steps") != (sch.get("reactive") or {}).get("steps"):
                return None
    run = folder / JUDGE_DIR / name / "oracle"
    return run if (run / "replay" / "summary.json").exists() else None


def _write_atomic(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)

