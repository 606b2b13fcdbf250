"""robinhood-testbed: run the whole RobinHood topology on this machine.

  robinhood-testbed compare --experiment FILE [--cache-modes partitioned,shared]
                            [--policies robinhood,static] [--dispatch random]
  robinhood-testbed run     --experiment FILE [--cache-mode M] [--policy P] [--dispatch D]
  (run and compare take --engine sim: the same experiment in the simulator, bin/sim)
  robinhood-testbed up      --experiment FILE [--cache-mode M] [--policy P] [--dispatch D] [--prometheus]
  robinhood-testbed up      --topology FILE [--id ID ...] [--prometheus]
  robinhood-testbed compose --experiment FILE [--policy P] --out DIR

A comparison runs one arm per cache mode × allocation policy × dispatch policy (the
experiment's compare block, or the flags), each on a fresh topology with the same
trace, scenario and seed. Allocation policies are the controller's
(`robinhood-controller policies`), dispatch policies the app server's
(`bin/appserver --list-dispatch-policies`).
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from datetime import datetime
from collections.abc import Callable
from pathlib import Path

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from robinhood_common.contract import ConfigError, read_yaml
from robinhood_common.logs import LEVELS, level_arg
from robinhood_common.topology import absolute_files
from robinhood_common.units import parse_duration
from robinhood_controller import policies as allocation

from . import analysis, compose, oracle, plots, report, zoo
from . import seeds as zoo_seeds
from .analysis import results_arms
from .deploy import REPO, Deployment, go_bin
from .executor import EXECUTORS, ArmJob, LocalExecutor, make_executor
from .experiment import CACHE_MODES, Arm, Experiment, ExperimentError, arms, dispatch_policies, load
from .live import LiveView
from .procs import StartError
from .run import RunResult, deployment, prepare_inputs, run_arm

log = logging.getLogger("robinhood_testbed")
#: Seconds an arm takes besides its duration (starting and stopping the processes).
ARM_OVERHEAD_S = 25.0


def _console() -> Console:
    """The console for messages: a long line (a path) is left to the terminal to
    wrap, never broken by us, so it can be copied as it is."""
    return Console(soft_wrap=True)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _out(out: str | None, name: str, fresh: bool = True) -> Path:
    """--out, or runs/<name>-<time>; with ``fresh``, refused unless it is empty or new."""
    path = Path(out) if out else REPO / "runs" / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if fresh and path.exists() and any(path.iterdir()):
        raise ExperimentError(f"--out: {path} exists and is not empty")
    return path


def _at_least_1(value: int, flag: str) -> int:
    if value < 1:
        raise ExperimentError(f"{flag}: {value} must be at least 1")
    return value


def _names(text: str, flag: str) -> list[str]:
    out = [p.strip() for p in text.split(",") if p.strip()]
    if not out:
        raise ExperimentError(f"{flag}: give at least one name")
    if len(set(out)) != len(out):
        raise ExperimentError(f"{flag}: {text!r} names one twice")
    return out


def _arms(args: argparse.Namespace, exp: Experiment, single: bool = False) -> list[Arm]:
    """The arms the command line asks for (the experiment's compare block where a flag
    is not given)."""
    if single:
        modes = [args.cache_mode] if args.cache_mode else None
        pols = [args.policy] if args.policy else None
        disp = [args.dispatch] if args.dispatch else None
    else:
        modes = _names(args.cache_modes, "--cache-modes") if args.cache_modes else None
        pols = _names(args.policies, "--policies") if args.policies else None
        if pols == ["all"]:  # every registered allocation policy, by role (the recommended one first)
            pols = allocation.registry.ordered()
        disp = _names(args.dispatch, "--dispatch") if args.dispatch else None
    for m in modes or []:
        if m not in CACHE_MODES:
            raise ExperimentError(f"--cache-modes: {m!r} is not one of {', '.join(CACHE_MODES)}")
    for p in pols or []:
        if p in CACHE_MODES:
            raise ExperimentError(f"--policies: {p!r} is a cache mode, not an allocation policy: "
                                  f"use --cache-modes partitioned,{p} (allocation policies: {', '.join(allocation.names())})")
        if p not in allocation.names():
            raise ExperimentError(f"--policies: {p!r} is not one of {', '.join(allocation.names())}")
    if single:
        if modes is None:
            modes = ["partitioned"] if pols else [exp.compare.cache_modes[0]]
        # The experiment's first policy; without a compare.policies list, the recommended one.
        pols = pols or [exp.compare.policies[0].name if exp.compare.policies else allocation.registry.recommended()]
        disp = disp or [exp.compare.dispatch[0].policy]
    by_name = {p.name: p.model_dump() for p in exp.compare.policies}
    pol_specs = [by_name.get(p, {"name": p}) for p in pols] if pols else None
    disp_by = {d.policy: d.model_dump() for d in exp.compare.dispatch}
    disp_specs = [disp_by.get(d, {"policy": d}) for d in disp] if disp else None
    return arms(exp, modes, pol_specs, disp_specs, known_dispatch=dispatch_policies(str(go_bin("appserver"))))


def _load(args: argparse.Namespace) -> Experiment:
    """The experiment file, with --duration, --seed, --store, --request-sample and --apps
    applied (and validated again)."""
    exp = load(args.experiment)
    duration, seed, store = (getattr(args, k, None) for k in ("duration", "seed", "store"))
    sim = {k: v for k in ("request_sample", "apps") if (v := getattr(args, k, None)) is not None}
    if not duration and seed is None and store is None and not sim:
        return exp
    from robinhood_common.experiment import from_document
    doc = dict(exp.document)
    if duration:
        try:
            d = parse_duration(duration)
        except ValueError as e:
            raise ExperimentError(f"--duration: {e}") from None
        doc["duration"] = duration
        if exp.slo.warmup >= d:
            doc["slo"] = {**doc["slo"], "warmup": f"{d / 4:g}s"}
    if seed is not None:
        doc["seed"] = seed
    if store is not None:
        doc["cache"] = {**doc["cache"], "store": store}
    if sim:
        doc["sim"] = {**(doc.get("sim") or {}), **sim}
    flag = "--duration" if duration else "--seed" if seed is not None else "--request-sample/--apps"
    try:
        return from_document(doc, exp.base_dir)
    except ConfigError as e:
        raise ExperimentError(f"{flag}: {e}") from None


#: Short console headings (the report and comparison.md use analysis.COLUMNS' long ones).
SHORT_HEADS = {"slo_violation_pct": "SLO viol%", "max_p99_ms": "max P99", "p50_ms": "P50", "p90_ms": "P90",
               "p99_ms": "P99", "hit_ratio": "hit", "requests": "requests", "errors": "errors"}
#: The columns a narrow terminal drops first, in order; policy and SLO viol% always stay.
DROP_ORDER = ["requests", "p90_ms", "p50_ms", "hit_ratio", "errors", "p99_ms", "max_p99_ms"]


def comparison_table(rows: list[dict], width: int) -> tuple[Table, list[str]]:
    """The console table at most ``width`` columns wide, and the headings it leaves out.
    No cell is ever cut short: a narrow terminal loses whole columns (the least telling
    first, :data:`DROP_ORDER`), and only a policy name longer than what is left wraps."""
    keys = [k for k, _, _ in analysis.COLUMNS]
    dropped: list[str] = []

    def build(cols: list[str]) -> Table:
        t = Table(title="Policy comparison (latencies in ms, after the warm-up)", box=box.SIMPLE_HEAD,
                  pad_edge=False, title_justify="left")
        for k in cols:
            t.add_column(SHORT_HEADS.get(k, k), justify="left" if k == "policy" else "right",
                         no_wrap=k != "policy", overflow="fold", min_width=len(SHORT_HEADS.get(k, k)))
        pats = {k: p for k, _, p in analysis.COLUMNS}
        for r in rows:
            t.add_row(*[analysis.fmt(r[k], pats[k]) for k in cols])
        return t

    console = Console(width=10_000)
    for k in [None, *DROP_ORDER]:
        if k is not None:
            dropped.append(k)
        cols = [c for c in keys if c not in dropped]
        t = build(cols)
        if Measurement.get(console, console.options, t).maximum <= width:
            break
    return t, [SHORT_HEADS.get(k, k) for k in keys if k in dropped]


def print_table(console: Console, rows: list[dict]) -> None:
    t, left_out = comparison_table(rows, console.width)
    console.print(t)
    if left_out:
        console.print(f"(not shown at {console.width} columns: {', '.join(left_out)}; comparison.md has every "
                      "column)")


def finish(exp: Experiment, out: Path, arms: list[str], console: Console) -> list[dict]:
    runs = [analysis.PolicyRun.load(out / p) for p in arms]
    rows = analysis.comparison_rows(runs)
    figs = plots.all_plots(runs, out)
    rep = report.write_report(exp, runs, rows, figs, out / "report.html")
    (out / "comparison.md").write_text(analysis.markdown_table(rows) + "\n")
    print_table(console, rows)
    console.print(f"Report: {rep}")
    return rows


#: The most app servers the real testbed starts on one machine.
MAX_TESTBED_APPS = 8


def _sim_options(args: argparse.Namespace, sim: bool) -> tuple[Path | None, float | None]:
    """--calibration and --sample, checked: the simulator's only."""
    calibration = Path(args.calibration) if args.calibration else None
    if calibration is not None and not sim:
        raise ExperimentError("--calibration is for --engine sim")
    if args.sample is not None and not sim:
        raise ExperimentError("--sample is for --engine sim")
    if getattr(args, "full", False) and not sim:
        raise ExperimentError("--full is for --engine sim")
    if getattr(args, "full", False) and args.sample not in (None, 1):
        raise ExperimentError(f"--full simulates every key: it cannot take --sample {args.sample:g}")
    if args.sample is not None and not 0 < args.sample <= 1:
        raise ExperimentError(f"--sample: {args.sample:g} is not in (0, 1]")
    return calibration, args.sample


def cmd_compare(args: argparse.Namespace, single: bool = False) -> int:
    console = _console()
    exp = _load(args)
    todo = _arms(args, exp, single=single)
    out = _out(args.out, exp.name)
    names = [a.name for a in todo]
    sim = args.engine == "sim"
    if sim and args.prometheus:
        raise ExperimentError("--prometheus: the simulator runs no processes to scrape (use --engine testbed)")
    calibration, sample = _sim_options(args, sim)
    if not sim and exp.cache.app_servers > MAX_TESTBED_APPS:
        raise ExperimentError(f"cache.app_servers: {exp.cache.app_servers} app servers are more than the real testbed "
                              f"runs ({MAX_TESTBED_APPS}); use --engine sim")
    if sim:
        console.print(f"Experiment [bold]{exp.name}[/] in the simulator: {len(todo)} arms ({', '.join(names)}), "
                      f"{exp.duration:g} simulated s each; results in {out}")
    else:
        minutes = len(todo) * (exp.duration + ARM_OVERHEAD_S) / 60
        console.print(f"Experiment [bold]{exp.name}[/]: {len(todo)} arms ({', '.join(names)}), {exp.duration:g} s each: "
                      f"about {minutes:.0f} minutes in all; results in {out}")
    trace, scenario = prepare_inputs(exp, out, args.engine)
    jobs = _at_least_1(getattr(args, "jobs", 1) or 1, "--jobs")
    if jobs > 1 and not sim:
        raise ExperimentError("--jobs: the real testbed runs one arm at a time (use --engine sim)")

    def done(arm: Arm, res: RunResult) -> None:
        viol = analysis.PolicyRun.load(res.run_dir).violation_pct()
        console.print(f"[bold]{arm.name}[/] done: P99 SLO violations "
                      f"{analysis.fmt(viol, '{:.1f}')} % (results in {res.run_dir})")

    if sim:
        local, finished = LocalExecutor(jobs), []
        for d in local.run([ArmJob(exp, arm, out, trace, scenario, calibration, sample, getattr(args, "full", False))
                            for arm in todo]):
            finished.append(d)
            done(d.job.arm, d.result)
        # The oracle made at least as good as every online arm's allocation: where its
        # schedule changed, its arm runs again.
        compared = oracle.Comparison(exp, out, trace, scenario, [(d.job.arm, d.job, d.result.run_dir) for d in finished])
        for arm, d in oracle.hindsight_rerun([compared], local, console.print):
            done(arm, d.result)
    else:
        for arm in todo:
            with LiveView([b.name for b in exp.backends]) as view:
                res = run_arm(exp, arm, out, trace, scenario, out / "data",
                              view=None if args.quiet else view, prometheus=args.prometheus)
            done(arm, res)
    finish(exp, out, names, console)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild the report, plots and table of a results folder (after re-running an arm
    into it, or with newer plotting code); runs nothing."""
    console = _console()
    exp = _load(args)
    out = Path(args.dir)
    if not out.is_dir():
        raise ExperimentError(f"--dir: {out} is not a folder")
    present = results_arms(out)
    if args.arms:
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        missing = [a for a in arms if a not in present]
        if missing:
            raise ExperimentError(f"--arms: {missing[0]!r} has no finished run in {out} "
                                  f"(found: {', '.join(present) or 'none'})")
    else:
        arms = present
    if not arms:
        raise ExperimentError(f"--dir: {out} holds no finished run (no <arm>/replay/summary.json)")
    finish(exp, out, arms, console)
    return 0


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ExperimentError(f"{flag}: {text!r} is not a list of integers") from None


def _seeds(text: str) -> list[int]:
    if not (seeds := _ints(text, "--seeds")):
        raise ExperimentError("--seeds: give at least one seed")
    return seeds


def _experiments(text: str, flag: str, load_one: Callable[[str], Experiment] = load) -> list[Experiment]:
    """The comma-separated experiment files of ``flag``, each of its own name."""
    exps = [load_one(f) for f in _names(text, flag)]
    names = [e.name for e in exps]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ExperimentError(f"{flag}: two experiments are named {dup[0]!r}")
    return exps


def cmd_zoo(args: argparse.Namespace) -> int:
    """Every arm on scenarios drawn from the zoo's family, in the simulator (docs/zoo.md)."""
    console = _console()
    exps = _experiments(args.experiment, "--experiment")
    names = [e.name for e in exps]
    exp = exps[0]
    seeds = zoo.parse_seeds(args.seeds)
    _at_least_1(args.jobs, "--jobs")
    _at_least_1(args.noise_seeds, "--noise-seeds")
    app_servers = None
    if args.app_servers:
        app_servers = _ints(args.app_servers, "--app-servers")
        if not app_servers or any(n < 1 for n in app_servers):
            raise ExperimentError(f"--app-servers: {args.app_servers!r}: give numbers of app servers, each at least 1")
    arms = _arms(args, exp)  # policies and cache modes are checked before anything runs
    out = _out(args.out, "zoo")
    try:  # before drawing anything: a folder that cannot be made is a bad --out
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExperimentError(f"--out: cannot create {out}: {e.strerror}") from None
    start = time.monotonic()
    with make_executor(args.executor, args.scheduler, args.jobs) as executor:
        console.print(f"Scenario zoo: {', '.join(names)}, {len(seeds)} {zoo.seed_range(seeds)} seeds, "
                      f"{len(arms)} arms, {executor.describe()}, in the simulator; results in {out}")
        rows = zoo.run(exps, lambda e: _arms(args, e), seeds, out, args.jobs, args.family,
                       progress=console.print, executor=executor, app_servers=app_servers,
                       infeasible=args.infeasible, noise_seeds=args.noise_seeds)
    csv_path, md, png = zoo.write(rows, out, seeds, time.monotonic() - start)
    console.print(md.read_text())
    console.print(f"Every run: {csv_path}; summary: {md}; figure: {png}")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    """Every arm of several experiments for several seeds, in the simulator."""
    from . import matrix
    console = _console()
    exps = _experiments(args.experiments, "--experiments", lambda f: _load(argparse.Namespace(
        experiment=f, duration=args.duration, seed=None, request_sample=args.request_sample, apps=args.apps)))
    names = [e.name for e in exps]
    seeds = _seeds(args.seeds)
    _at_least_1(args.jobs, "--jobs")
    for e in exps:
        _arms(args, e)  # policies and cache modes are checked before anything runs
    out = _out(args.out, "matrix")
    calibration, sample = _sim_options(args, True)
    with make_executor(args.executor, args.scheduler, args.jobs) as executor:
        console.print(f"Policy matrix: {len(exps)} experiments ({', '.join(names)}), seeds {args.seeds}, "
                      f"{executor.describe()}, in the simulator; results in {out}")
        rows = matrix.run(exps, lambda e: _arms(args, e), seeds, out, args.jobs, sample, calibration,
                          progress=console.print, full=args.full, executor=executor)
    csv_path, md = matrix.write(rows, out)
    console.print(md.read_text())
    console.print(f"Every run: {csv_path}; report: {md}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """One parameter over a range, every point in the simulator, several seeds."""
    from . import sweep
    console = _console()
    exp = _load(args)
    out = _out(args.out, exp.name)
    values = [v.strip() for v in args.values.split(",") if v.strip()]
    if not values:
        raise ExperimentError("--values: give at least one value")
    seeds = _seeds(args.seeds)
    calibration, sample = _sim_options(args, True)
    _arms(args, exp)  # the policies and cache modes are checked before anything runs
    with make_executor(args.executor, args.scheduler, args.jobs) as executor:
        console.print(f"Sweep of {args.param} over {', '.join(values)} on {exp.name}, seeds {args.seeds}, "
                      f"{executor.describe()}, in the simulator; results in {out}")
        rows = sweep.run(exp, lambda e: _arms(args, e), args.param, values, seeds, out, sample, calibration,
                         progress=console.print, full=args.full, executor=executor)
    csv_path, md, png = sweep.write(rows, out, args.param, values)
    console.print(md.read_text())
    console.print(f"Every run: {csv_path}; figure: {png}")
    return 0


def cmd_versus(args: argparse.Namespace) -> int:
    """The same experiment from both engines: the table (and with --plot the figure)."""
    from . import versus
    tb, sm = Path(args.testbed), Path(args.sim)
    for flag, d in (("--testbed", tb), ("--sim", sm)):
        if not d.is_dir():
            raise ExperimentError(f"{flag}: {d} is not a folder")
    labels = ("testbed", "sim")
    if args.labels is not None:
        parts = tuple(p.strip() for p in args.labels.split(","))
        if len(parts) != 2 or not all(parts):
            raise ExperimentError(f"--labels: {args.labels!r} is not two comma-separated names")
        labels = (parts[0], parts[1])
    table = versus.rows(tb, sm)
    if not table:
        raise ExperimentError(f"{tb} and {sm} have no finished arm in common")
    print(versus.markdown(table, labels))
    if args.plot:
        fig_labels = labels if args.labels is not None else ("testbed", "simulator")
        print(f"figure: {versus.figure(tb, sm, Path(args.plot), fig_labels)}")
    return 0


def _print_endpoints(console: Console, dep: Deployment) -> None:
    ep, s = dep.ep, dep.scheme()  # with the topology's tls block every listener speaks HTTPS
    console.print(f"topology file: {dep.topology_path}")
    if ep.rbc_http:
        console.print(f"RBC server:    grpc {ep.rbc_grpc}  http {s}://{ep.rbc_http}/v1/rbc")
    for app, http in ep.app_http.items():
        console.print(f"app server {app}: POST {s}://{http}/v1/request   metrics {s}://{http}/metrics")
        if app in ep.controller_metrics:
            console.print(f"  controller metrics {s}://{ep.controller_metrics[app]}/metrics")
    for name, reps in ep.backends.items():
        for i, (g, h) in enumerate(reps):
            console.print(f"backend {name}[{i}]: grpc {g}  admin {s}://{h}/admin/limits")
    if ep.prometheus:  # the testbed's own Prometheus, never started with a tls block
        console.print(f"Prometheus:    http://{ep.prometheus}/")


def cmd_up(args: argparse.Namespace) -> int:
    console = _console()
    if args.topology:
        if args.experiment:
            raise ExperimentError("give --experiment or --topology, not both")
        path = Path(args.topology)
        try:
            doc = read_yaml(path.read_text(), "topology")
        except OSError as e:
            raise ExperimentError(f"--topology: cannot read {path}: {e.strerror}") from None
        except ConfigError as e:
            raise ExperimentError(f"topology {path}: {e}") from None
        if isinstance(doc, dict):  # the copy in the run folder reads its secrets where the file said
            doc = absolute_files(doc, path.resolve().parent)
        if args.prometheus and isinstance(doc, dict) and (doc.get("auth") or doc.get("tls")):
            raise ExperimentError("--prometheus: the testbed's Prometheus scrapes without tokens or TLS; with a "
                                  "topology's auth or tls block, run Prometheus as docs/security.md shows")
        out = _out(args.out, "up", fresh=False)
        dep = Deployment(doc, out, out / "data", only=set(args.id) if args.id else None, prometheus=args.prometheus)
        what = f"{path}" + (f" ({', '.join(args.id)})" if args.id else "")
    else:
        if not args.experiment:
            raise ExperimentError("give --experiment FILE or --topology FILE")
        if args.id:
            raise ExperimentError("--id selects components of --topology")
        exp = _load(args)
        arm = _arms(args, exp, single=True)[0]
        out = _out(args.out, exp.name, fresh=False)
        dep = deployment(exp, arm, out / arm.name, out / "data", prometheus=args.prometheus)
        what = f"{exp.name} with {arm.name}"
    console.print(f"Starting {what} (logs in {dep.run_dir / 'logs'})")
    with dep:
        _print_endpoints(console, dep)
        ep = dep.ep
        if args.ready_file:
            info = {"topology": str(dep.topology_path), "rbc_http": ep.rbc_http, "app_http": ep.app_http,
                    "controller_metrics": ep.controller_metrics, "prometheus": ep.prometheus}
            tmp = Path(args.ready_file + ".tmp")
            tmp.write_text(json.dumps(info, indent=2) + "\n")
            tmp.rename(args.ready_file)
        console.print("Running; Ctrl-C stops everything.")
        while True:
            dep.sup.check_alive()
            time.sleep(1)


def cmd_compose(args: argparse.Namespace) -> int:
    exp = _load(args)
    arm = _arms(args, exp, single=True)[0]
    files = compose.generate(exp, arm, Path(args.experiment))
    out = Path(args.out)
    for rel, text in files.items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        print(f"wrote {p}")
    return 0


def cmd_chaos(args: argparse.Namespace) -> int:
    from .chaos import run_chaos
    console = _console()
    exp = _load(args)
    arm = _arms(args, exp, single=True)[0]
    out = _out(args.out, exp.name)
    seed = args.seed if args.seed is not None else exp.seed
    console.print(f"Chaos run of [bold]{exp.name}[/] (arm {arm.name}), {exp.duration:g} s, fault seed {seed}; "
                  f"results in {out}")
    run_chaos(exp, arm, out, out / "data", seed)
    console.print((out / "chaos.md").read_text())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per job (docs/testbed.md)."""
    ap = argparse.ArgumentParser(prog="robinhood-testbed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser, experiment_required: bool = True) -> None:
        p.add_argument("--experiment", required=experiment_required, help="experiment file (examples/*.yaml)")
        p.add_argument("--out", help="results folder (default runs/<name>-<time>)")
        p.add_argument("--prometheus", action="store_true", help="also run a Prometheus server scraping every component")
        p.add_argument("--duration", help="override the experiment's duration (e.g. 60s)")
        p.add_argument("--seed", type=int, help="override the experiment's seed (trace, hiccups, random choices)")
        p.add_argument("--store", choices=("memcached", "redis"),
                       help="override cache.store: what the partitions are (docs/topology.md, \"Redis partitions\")")

    def one_arm(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cache-mode", choices=CACHE_MODES, help="cache mode (default: partitioned when --policy is "
                       "given, else the experiment's first)")
        p.add_argument("--policy", help="allocation policy (default: the experiment's first)")
        p.add_argument("--dispatch", help="dispatch policy (default: the experiment's first)")

    def axes(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cache-modes", help="comma-separated cache modes (default: the experiment's compare.cache_modes)")
        p.add_argument("--policies", help="comma-separated allocation policies, or all (default: compare.policies)")
        p.add_argument("--dispatch", help="comma-separated dispatch policies (default: compare.dispatch)")

    def sim_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--calibration", help="simulator: a calibration file replacing the measured defaults")
        p.add_argument("--sample", type=float, help="simulator: a miniature simulation of this fraction of the keys, "
                       "in (0, 1]")
        p.add_argument("--request-sample", type=float, help="simulator: with a generated trace, the fraction of "
                       "requests a miniature simulates (the experiment's sim.request_sample)")
        p.add_argument("--apps", type=int, help="simulator: with a generated trace, how many app servers a miniature "
                       "simulates (the experiment's sim.apps)")
        p.add_argument("--full", action="store_true", help="simulator: no miniature, whatever the experiment's sim "
                       "block says (every app server, key and request)")

    def executor_options(p: argparse.ArgumentParser) -> None:
        """The arms (--cache-modes, --policies, --dispatch) and where their runs execute."""
        axes(p)
        p.add_argument("--jobs", type=int, default=1, help="runs simulated at once here, or the local Dask cluster's "
                       "worker processes (default 1)")
        p.add_argument("--executor", choices=EXECUTORS, default="local",
                       help="where the simulator's runs execute: local, --jobs at a time on this machine (default); "
                            "dask, on a Dask distributed cluster (docs/testbed.md, \"Executors\")")
        p.add_argument("--scheduler", metavar="ADDRESS",
                       help="with --executor dask: the Dask scheduler, tcp://HOST:8786 (default: start a local "
                            "cluster of --jobs worker processes for the run)")

    def engine(p: argparse.ArgumentParser) -> None:
        p.add_argument("--engine", choices=("testbed", "sim"), default="testbed",
                       help="testbed: real processes in real time (default); sim: bin/sim, the discrete-event "
                            "simulator (docs/simulator.md)")
        sim_options(p)
        p.add_argument("--quiet", action="store_true", help="no live view")

    up = sub.add_parser("up", help="start a topology and keep it running until Ctrl-C")
    common(up, experiment_required=False)
    one_arm(up)
    up.add_argument("--topology", help="start this topology file instead of an experiment's")
    up.add_argument("--id", action="append", metavar="ID",
                    help="with --topology: start only this component (app server id, backend name or rbc_server); "
                         "repeatable")
    up.add_argument("--ready-file", help="once everything is up, write the endpoints here (JSON)")
    run = sub.add_parser("run", help="run one arm of an experiment")
    common(run)
    one_arm(run)
    engine(run)
    cmp = sub.add_parser("compare", help="run the same trace, scenario and seed once per arm")
    common(cmp)
    axes(cmp)
    engine(cmp)
    cmp.add_argument("--jobs", type=int, default=1, help="simulator: arms simulated at once (default 1)")
    rep = sub.add_parser("report", help="rebuild the report, plots and table of a results folder (runs nothing)")
    rep.add_argument("--experiment", required=True, help="the experiment file the folder was run from")
    rep.add_argument("--dir", required=True, help="the results folder")
    rep.add_argument("--arms", help="comma-separated arms, in this order (default: every finished arm)")
    sw = sub.add_parser("sweep", help="one parameter over a range, in the simulator: SLO violations per policy")
    common(sw)
    sw.add_argument("--param", required=True, help="budget, interval, tax, spike-depth, ramp-time, or a dotted path "
                    "of the experiment (docs/simulator.md)")
    sw.add_argument("--values", required=True, help="comma-separated values of the parameter")
    mx = sub.add_parser("matrix", help="every arm of several experiments for several seeds, in the simulator: "
                        "the policy matrix (make paper)")
    mx.add_argument("--experiments", required=True, help="comma-separated experiment files")
    mx.add_argument("--out", help="results folder (default runs/matrix-<time>)")
    mx.add_argument("--duration", help="override every experiment's duration (e.g. 30m)")
    for p in (sw, mx):
        p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
        sim_options(p)
        executor_options(p)
    zo = sub.add_parser("zoo", help="every arm on scenarios drawn from the zoo's family, in the simulator: "
                        "median, P90 and worst SLO violations per policy (make zoo)")
    zo.add_argument("--experiment", required=True, help="the experiments (comma-separated: a key source each) "
                    "whose topology, trace and SLO the scenarios are drawn for (their own scenario is replaced)")
    zo.add_argument("--app-servers", help="numbers of app servers, comma-separated: seed N runs with the "
                    "(N mod count)-th (default: each experiment's own)")
    zo.add_argument("--seeds", default="dev", help="seeds, ranges A-B, or a range's name for its sample ("
                    + ", ".join(f"{r.name}: {r.min}-{r.sample_max} of {r.meaning.split(':')[0]} {r.min}-{r.max}"
                                for r in zoo_seeds.RANGES.values()) + "), comma-separated (default dev)")
    zo.add_argument("--family", help="draw every scenario from this family (default: one per seed, drawn)")
    zo.add_argument("--out", help="results folder (default runs/zoo-<time>)")
    zo.add_argument("--infeasible", choices=zoo.INFEASIBLE, default=zoo.INFEASIBLE_ALL,
                    help="what runs on a scenario the oracle's analysis calls infeasible (no allocation meets the "
                         "SLO throughout: nothing to compare the arms with): all, every arm and the oracle's schedules; "
                         "check, only the recommended policy, which checks the class (an arm meeting the SLO "
                         "there proves the analysis wrong), and no schedule is computed (default all)")
    zo.add_argument("--noise-seeds", type=int, default=1, metavar="K",
                    help="run every arm K times on each scenario, the backends' and the simulator's noise seeded "
                         "differently each time (the trace and the scenario stay the drawn ones); a scenario's "
                         "figure is the median of the K, with their least and most in zoo.csv (default 1)")
    executor_options(zo)
    vs = sub.add_parser("versus", help="hold the simulator to the testbed: two results folders of one experiment")
    vs.add_argument("--testbed", required=True, help="results folder of the testbed (engine testbed)")
    vs.add_argument("--sim", required=True, help="results folder of the simulator (engine sim)")
    vs.add_argument("--plot", help="write the P99-over-time figure of both here (PNG)")
    vs.add_argument("--labels", help="names of the two folders in the table and figure, comma-separated "
                                     "(default testbed,sim): e.g. exact,miniature for two runs of the simulator")
    ch = sub.add_parser("chaos", help="run one arm while killing and hanging the RBC server, a controller, a "
                        "memcached and a backend replica at seeded random times (docs/reliability.md)")
    common(ch)
    one_arm(ch)
    cmps = sub.add_parser("compose", help="write docker-compose.yml and its configuration for one arm")
    cmps.add_argument("--experiment", required=True, help="experiment file")
    one_arm(cmps)
    cmps.add_argument("--out", required=True, help="the repository root to write into (docker-compose.yml, deploy/compose/)")
    cmps.add_argument("--store", choices=("memcached", "redis"), help="override cache.store")
    for p in sub.choices.values():
        p.add_argument("--log-level", default="warn", type=level_arg, metavar="|".join(LEVELS))
    return ap


#: What each subcommand runs.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "up": cmd_up, "run": lambda a: cmd_compare(a, single=True), "compose": cmd_compose, "report": cmd_report,
    "versus": cmd_versus, "sweep": cmd_sweep, "matrix": cmd_matrix, "zoo": cmd_zoo, "chaos": cmd_chaos,
    "compare": cmd_compare,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not hasattr(args, "duration"):
        args.duration = None
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        return COMMANDS[args.cmd](args)
    except ExperimentError as e:
        print(f"robinhood-testbed: {e}", file=sys.stderr)
        return 2
    except StartError as e:
        print(f"robinhood-testbed: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # standard output closed by its reader: console.run ends quietly
    except OSError as e:  # a file or folder the run needs (--out on a full or read-only disk, ...)
        where = f": {e.filename}" if e.filename else ""
        print(f"robinhood-testbed: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("robinhood-testbed: interrupted; every process was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
