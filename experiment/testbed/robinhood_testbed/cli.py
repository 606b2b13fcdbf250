"""robinhood-testbed: run the whole RobinHood topology on this machine.

  robinhood-testbed up      --experiment FILE [--policy P] [--prometheus]
  robinhood-testbed run     --experiment FILE --policy P
  robinhood-testbed compare --experiment FILE --policies robinhood,static,shared
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from . import analysis, plots, report
from .deploy import REPO, Deployment
from .experiment import Experiment, ExperimentError, load
from .live import LiveView
from .procs import StartError
from .run import prepare_inputs, run_policy

log = logging.getLogger("robinhood_testbed")
KNOWN_POLICIES = ("robinhood", "static", "shared", "none")


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _out_dir(args: argparse.Namespace, exp: Experiment) -> Path:
    if args.out:
        return Path(args.out)
    return REPO / "runs" / f"{exp.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _policies(text: str) -> list[str]:
    out = [p.strip() for p in text.split(",") if p.strip()]
    if not out:
        raise ExperimentError("--policies: give at least one policy")
    for p in out:
        if p not in KNOWN_POLICIES:
            raise ExperimentError(f"--policies: unknown policy {p!r} (known: {', '.join(KNOWN_POLICIES)})")
    if len(set(out)) != len(out):
        raise ExperimentError(f"--policies: {text!r} names a policy twice")
    return out


def _load(args: argparse.Namespace) -> Experiment:
    exp = load(args.experiment)
    if getattr(args, "duration", None):
        from .experiment import parse_duration
        try:
            d = parse_duration(args.duration)
        except ValueError as e:
            raise ExperimentError(f"--duration: {e}") from None
        data = exp.model_dump()
        data["duration"] = d
        if exp.slo.warmup >= d:
            data["slo"] = {**data["slo"], "warmup": d / 4}
        exp = Experiment.model_validate(data)
    return exp


#: Short console headings (the report and comparison.md use analysis.COLUMNS' long ones),
#: so the table fits an 80-column terminal.
SHORT_HEADS = {"slo_violation_pct": "SLO viol%", "max_p99_ms": "max P99", "p50_ms": "P50", "p90_ms": "P90",
               "p99_ms": "P99", "hit_ratio": "hit", "requests": "requests", "errors": "errors"}


def print_table(console: Console, rows: list[dict]) -> None:
    t = Table(title="Policy comparison (latencies in ms, after the warm-up)", box=box.SIMPLE_HEAD, pad_edge=False)
    for key, _, _ in analysis.COLUMNS:
        t.add_column(SHORT_HEADS.get(key, key), justify="left" if key == "policy" else "right", no_wrap=True)
    for r in rows:
        t.add_row(*[analysis.fmt(r[k], p) for k, _, p in analysis.COLUMNS])
    console.print(t)


def finish(exp: Experiment, out: Path, policies: list[str], console: Console) -> list[dict]:
    runs = [analysis.PolicyRun.load(out / p) for p in policies]
    rows = analysis.comparison_rows(runs)
    figs = plots.all_plots(runs, out)
    rep = report.write_report(exp, runs, rows, figs, out / "report.html")
    (out / "comparison.md").write_text(analysis.markdown_table(rows) + "\n")
    print_table(console, rows)
    console.print(f"Report: {rep}")
    return rows


def cmd_compare(args: argparse.Namespace, policies: list[str]) -> int:
    console = Console()
    exp = _load(args)
    out = _out_dir(args, exp)
    if out.exists() and any(out.iterdir()):
        raise ExperimentError(f"--out: {out} exists and is not empty")
    console.print(f"Experiment [bold]{exp.name}[/]: {', '.join(policies)}; {exp.duration:g} s each; results in {out}")
    trace, scenario = prepare_inputs(exp, out)
    for policy in policies:
        with LiveView([b.name for b in exp.backends]) as view:
            res = run_policy(exp, policy, out, trace, scenario, out / "data",
                             view=None if args.quiet else view, prometheus=args.prometheus)
        viol = analysis.PolicyRun.load(res.run_dir).violation_pct()
        console.print(f"[bold]{policy}[/] done: P99 SLO violations "
                      f"{analysis.fmt(viol, '{:.1f}')} % (results in {res.run_dir})")
    finish(exp, out, policies, console)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    console = Console()
    exp = _load(args)
    out = _out_dir(args, exp)
    console.print(f"Starting {exp.name} with policy {args.policy} (logs in {out / args.policy / 'logs'})")
    with Deployment(exp, args.policy, out / args.policy, out / "data", prometheus=args.prometheus) as dep:
        ep = dep.ep
        console.print(f"topology file: {dep.topology_path}")
        console.print(f"RBC server:    grpc {ep.rbc_grpc}  http http://{ep.rbc_http}/v1/rbc")
        for app, http in ep.app_http.items():
            console.print(f"app server {app}: POST http://{http}/v1/request   metrics http://{http}/metrics")
            if app in ep.controller_metrics:
                console.print(f"  controller metrics http://{ep.controller_metrics[app]}/metrics")
        for name, reps in ep.backends.items():
            for i, (g, h) in enumerate(reps):
                console.print(f"backend {name}[{i}]: grpc {g}  admin http://{h}/admin/limits")
        if ep.prometheus:
            console.print(f"Prometheus:    http://{ep.prometheus}/")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="robinhood-testbed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--experiment", required=True, help="experiment file (examples/*.yaml)")
        p.add_argument("--out", help="results folder (default runs/<name>-<time>)")
        p.add_argument("--prometheus", action="store_true", help="also run a Prometheus server scraping every component")
        p.add_argument("--duration", help="override the experiment's duration (e.g. 60s)")
        p.add_argument("--log-level", default="warning")

    up = sub.add_parser("up", help="start the topology and keep it running until Ctrl-C")
    common(up)
    up.add_argument("--policy", default="robinhood", choices=KNOWN_POLICIES)
    up.add_argument("--ready-file", help="once everything is up, write the endpoints here (JSON)")
    run = sub.add_parser("run", help="run one experiment with one policy")
    common(run)
    run.add_argument("--policy", required=True, choices=KNOWN_POLICIES)
    run.add_argument("--quiet", action="store_true", help="no live view")
    cmp = sub.add_parser("compare", help="run the same trace, scenario and seed once per policy")
    common(cmp)
    cmp.add_argument("--policies", default="robinhood,static,shared")
    cmp.add_argument("--quiet", action="store_true", help="no live view")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        if args.cmd == "up":
            return cmd_up(args)
        if args.cmd == "run":
            return cmd_compare(args, [args.policy])
        return cmd_compare(args, _policies(args.policies))
    except ExperimentError as e:
        print(f"robinhood-testbed: {e}", file=sys.stderr)
        return 2
    except StartError as e:
        print(f"robinhood-testbed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("robinhood-testbed: interrupted; every process was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
