"""`robinhood-controller run|plan|status --topology FILE --id ID [overrides]`,
`robinhood-controller policies` and `robinhood-controller policy-server` (the
simulator's controller: JSON lines on stdin/stdout, docs/controller.md).

Exit status: 0 done, 1 the controller could not start (a partition is unreachable or
cannot be resized), 2 invalid configuration or usage (nothing was contacted).
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import ssl
import sys
import threading
import urllib.request
from collections.abc import Sequence
from typing import Any, TextIO

from robinhood_common import console
from prometheus_client.parser import text_string_to_metric_families
from robinhood_common.auth import AuthError, load_credential
from robinhood_common.logs import LEVELS, level_arg

from . import policies
from .config import ConfigError, ControllerConfig, Overrides, PartitionConfig, load, parse_param
from .controller import Controller, StartupError, TickReport
from .partition import PartitionError, PartitionStats, open_partition
from .metrics import Metrics
from .plan import MIB
from .policy_server import serve_forking, serve_stdio
from .timeline import TimelineWriter

log = logging.getLogger("robinhood_controller")

EXIT_OK, EXIT_FAIL, EXIT_CONFIG = 0, 1, 2

# Flag → setting; every setting of the controller: block can be overridden.
_OVERRIDES: list[tuple[str, str, Any, str]] = [
    ("--interval", "interval", str, "time between ticks, e.g. 5s"),
    ("--min-partition-mb", "min_partition_mb", int, "floor of every partition's limit, MB (48)"),
    ("--metrics", "metrics", str, "host:port serving /metrics ('' disables)"),
    ("--rbc-timeout", "rbc_timeout", str, "deadline of a GetRBC call (1s)"),
    ("--shrink-budget", "shrink_budget", str, "time per tick for moving pages (default: interval/2)"),
    ("--used-source", "used_source", str, "u_i: malloced (total_malloced) | bytes"),
    ("--memcached-timeout", "memcached_timeout", str, "socket timeout of a memcached command (1s)"),
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"robinhood-controller: {message}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be at least 1")
    return n


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--topology", required=True, metavar="FILE", help="the topology YAML file")
    common.add_argument("--id", "--app-server", dest="app_server", required=True, metavar="ID",
                        help="the app server this controller manages")
    common.add_argument("--policy", default=None, metavar="NAME",
                        help="allocation policy (replaces controller.policy; see `robinhood-controller policies`)")
    common.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                        help="a parameter of the policy (repeatable), e.g. --policy-param tax=0.02")
    for flag, dest, typ, helptext in _OVERRIDES:
        common.add_argument(flag, dest=dest, type=typ, default=None, help=helptext)
    common.add_argument("--dry-run", dest="dry_run", action=argparse.BooleanOptionalAction, default=None,
                        help="plan and report but never change memcached")
    common.add_argument("--log-level", default="info", type=level_arg, metavar="|".join(LEVELS),
                        help="log level (default info; warning is taken for warn)")

    p = _Parser(prog="robinhood-controller", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", parents=[common], help="run the control loop")
    run.add_argument("--wait", action="store_true", help="wait for unreachable partitions instead of failing")
    run.add_argument("--timeline", metavar="FILE", help="append one JSON line per tick to FILE")
    run.add_argument("--max-ticks", type=_positive_int, default=None, metavar="N", help="stop after N ticks")
    run.add_argument("--restore-settings", action="store_true",
                     help="at exit, put back what the controller took over: memcached's slab automover, "
                          "Redis's eviction policy (default: leave them as the controller set them, and say so)")
    run.add_argument("--insecure", action="store_true",
                     help="serve /metrics on a non-loopback address without the topology's auth block "
                          "(docs/security.md)")
    plan = sub.add_parser("plan", parents=[common], help="one dry-run tick: current vs planned allocation")
    plan.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status = sub.add_parser("status", parents=[common], help="per-partition limit, used, malloced, hit ratio")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pol = sub.add_parser("policies", help="list the allocation policies, one a line: name, parameters with defaults")
    pol.add_argument("--json", action="store_true", help="print JSON (with descriptions) instead")
    srv = sub.add_parser("policy-server", help="run the policies for the simulator: JSON requests on stdin, "
                                                "one JSON answer a line on stdout (docs/controller.md)")
    srv.add_argument("--log-level", default="info", type=level_arg, metavar="|".join(LEVELS),
                     help="logs go to stderr (default info)")
    srv.add_argument("--listen", metavar="PATH", default=None,
                     help="serve many sessions instead: one per connection to a Unix socket created at PATH, "
                          "each in a process forked from this one (bin/sim --policy-server PATH); stops on "
                          "SIGTERM or at the end of stdin")
    return p


def _overrides(ns: argparse.Namespace) -> Overrides:
    settings = {dest: getattr(ns, dest) for _, dest, _, _ in _OVERRIDES}
    settings["dry_run"] = ns.dry_run
    params = dict(parse_param(t) for t in ns.policy_param) if ns.policy_param else None
    return Overrides(settings=settings, policy=ns.policy, policy_params=params)


def load_config(ns: argparse.Namespace) -> ControllerConfig:
    """Topology + app server + overrides → ControllerConfig (ConfigError when invalid)."""
    return load(ns.topology, ns.app_server, _overrides(ns))


def cmd_policies(as_json: bool, out: TextIO) -> int:
    """Every registered allocation policy, one a line under a line naming its role
    (``# ROLE: what it means``): its name (the default marked), its parameters with
    their defaults, and what it does."""
    desc = policies.describe()
    if as_json:
        out.write(json.dumps(desc, indent=1) + "\n")
        return EXIT_OK
    role = None
    for d in desc:
        if d["role"] != role:
            role = d["role"]
            out.write(f"# {role}: {policies.registry.ROLES[role]}\n")
        params = " ".join(f"{p['name']}={p['default']}" for p in d["params"])
        name = d["name"] + (" (default)" if d["default"] else "")
        out.write(" ".join(x for x in (name, params) if x) + f" -- {d['summary']}\n")
    return EXIT_OK


def _mb(v: int | None) -> str:
    return "-" if v is None else f"{v / MIB:.1f}"


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        out.write("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        out.write("\n")
        if j == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


def _not_partitioned(cfg: ControllerConfig, command: str, out: TextIO) -> int:
    if cfg.cache_mode == "shared":
        msg = (f"app server {cfg.app_server}: cache_mode shared — one memcached ({cfg.shared_cache}) holds the "
               f"whole {cfg.budget_mb} MB budget, so the controller has nothing to {command}.")
        if command != "status":
            msg += " `robinhood-controller status` shows that cache."
    else:
        msg = f"app server {cfg.app_server}: cache_mode none — it has no cache; the controller has nothing to do."
    out.write(msg + "\n")
    return EXIT_OK


def policy_view(cfg: ControllerConfig, timeout: float = 2.0) -> tuple[dict[str, dict[str, Any]], str]:
    """What the running controller of cfg's app server says of each partition on its
    /metrics (controller.metrics): its backend's predicted utilization and why it last
    moved, for policies that export them; and "" or why it could not be read. Over TLS
    with the topology's CA (and its certificate under mutual TLS), with the operator's
    token when the topology has an auth block."""
    addr = cfg.settings.metrics
    if not addr:
        return {}, "controller.metrics is not set: no running controller to ask"
    host, _, port = addr.rpartition(":")
    host = host or "127.0.0.1"
    ctx = None
    scheme = "http"
    if cfg.tls is not None:
        scheme = "https"
        ctx = ssl.create_default_context(cafile=cfg.tls.ca)
        if cfg.tls.client_auth:
            ctx.load_cert_chain(cfg.tls.cert, cfg.tls.key)
    req = urllib.request.Request(f"{scheme}://{host}:{port}/metrics")
    if cfg.auth is not None:
        try:
            req.add_header("Authorization", "Bearer " + load_credential(cfg.auth.token_file("operator")).token)
        except (OSError, AuthError) as e:
            return {}, f"the operator's token: {e}"
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            text = r.read(16 << 20).decode()
    except (OSError, ValueError) as e:
        return {}, f"the controller at {addr}: {getattr(e, 'reason', None) or e}"
    view: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            n = smp.labels.get("partition")
            if n is None:
                continue
            if smp.name == "controller_partition_predicted_utilization":
                view.setdefault(n, {})["predicted_utilization"] = smp.value
            elif smp.name == "controller_partition_move_reason" and smp.value == 1:
                view.setdefault(n, {})["move_reason"] = smp.labels.get("reason")
    return view, ""


def cmd_status(cfg: ControllerConfig, as_json: bool, out: TextIO) -> int:
    """Print limit, used, malloced, items, evictions, hit ratio per partition."""
    if cfg.cache_mode == "none":
        return _not_partitioned(cfg, "status", out)
    targets = (list(cfg.partitions) if cfg.cache_mode == "partitioned"
               else [PartitionConfig(name="shared", addr=cfg.shared_cache, backend_id=-1, initial_mb=0)])
    rows: list[dict[str, Any]] = []
    failed = False
    for p in targets:
        name, store, addr = p.name, p.store, p.addr
        d = open_partition(name, store, addr, cfg.settings.memcached_timeout, username=p.user, password=p.password)
        st: PartitionStats | None
        err = ""
        try:
            st = d.read()
        except PartitionError as e:
            st, err, failed = None, str(e), True
        finally:
            d.close()
        rows.append({
            "partition": name, "store": store, "addr": addr,
            "limit_bytes": st.limit_bytes if st else None,
            "used_bytes": st.item_bytes if st else None,
            "malloced_bytes": st.malloced_bytes if st else None,
            "floor_bytes": st.floor_bytes if st else None,
            "items": st.items if st else None,
            "evictions": st.evictions if st else None,
            "hit_ratio": st.hit_ratio if st else None,
            "error": err or None,
        })
    view, view_error = policy_view(cfg) if cfg.cache_mode == "partitioned" else ({}, "")
    for r in rows:
        v = view.get(r["partition"], {})
        r["predicted_utilization"] = v.get("predicted_utilization")
        r["move_reason"] = v.get("move_reason")
    # The floor matters where the controller sets limits, not for a shared cache.
    notes = floor_notes(rows, cfg.settings.min_partition_mb) if cfg.cache_mode == "partitioned" else []
    if as_json:
        out.write(json.dumps({"app_server": cfg.app_server, "cache_mode": cfg.cache_mode,
                              "budget_bytes": cfg.budget_bytes, "partitions": rows,
                              "notes": notes, "controller_error": view_error or None}, indent=1) + "\n")
        return EXIT_FAIL if failed else EXIT_OK
    out.write(f"app server {cfg.app_server}: cache_mode {cfg.cache_mode}, budget {cfg.budget_mb} MB\n")
    table = [["partition", "addr", "limit_mb", "used_mb", "malloced_mb", "floor_mb", "items", "evictions",
              "hit_ratio", "predicted_util", "last_move"]]
    for r in rows:
        pu = "-" if r["predicted_utilization"] is None else f"{r['predicted_utilization']:.2f}"
        why = r["move_reason"] or "-"
        if r["error"]:
            table.append([r["partition"], r["addr"], "unreachable", "-", "-", "-", "-", "-", "-", pu, why])
            continue
        hr = "-" if r["hit_ratio"] is None else f"{r['hit_ratio']:.3f}"
        table.append([r["partition"], r["addr"], _mb(r["limit_bytes"]), _mb(r["used_bytes"]),
                      _mb(r["malloced_bytes"]), _mb(r["floor_bytes"]), str(r["items"]), str(r["evictions"]), hr,
                      pu, why])
    ok = [r for r in rows if not r["error"]]
    table.append(["total", "", _mb(sum(r["limit_bytes"] for r in ok)), _mb(sum(r["used_bytes"] for r in ok)),
                  _mb(sum(r["malloced_bytes"] for r in ok)), _mb(sum(r["floor_bytes"] for r in ok)),
                  str(sum(r["items"] for r in ok)),
                  str(sum(r["evictions"] for r in ok)), "", "", ""])
    _table(table, out)
    for note in notes:
        out.write(f"note: {note}\n")
    if view_error and cfg.cache_mode == "partitioned" and cfg.settings.metrics:
        out.write(f"note: predicted_util and last_move come from the running controller's /metrics: {view_error}\n")
    for r in rows:
        if r["error"]:
            out.write(f"error: {r['error']}\n")
    return EXIT_FAIL if failed else EXIT_OK


def plan_rows(ctl: Controller, r: TickReport) -> list[dict[str, Any]]:
    """Per-partition current vs planned allocation of a dry-run tick."""
    rows = []
    for n in ctl.names:
        st = r.stats[n]
        before = r.targets_before[n] if r.targets_before else None
        rows.append({
            "partition": n,
            "limit_bytes": st.limit_bytes if st else None,
            "malloced_bytes": st.malloced_bytes if st else None,
            "floor_bytes": st.floor_bytes if st else None,
            "used_bytes": r.used.get(n),
            "rbc": r.rbc.counts.get(n, 0) if r.rbc else None,
            "eligible": r.eligible.get(n),
            "start_target_bytes": before,
            "target_bytes": r.targets[n] if r.targets else None,
            "planned_limit_bytes": r.limits_planned[n] * MIB if r.limits_planned else None,
        })
    return rows


def floor_notes(rows: list[dict[str, Any]], min_partition_mb: int) -> list[str]:
    """Why shrinks of a partition would be stuck: memcached keeps one page in every
    slab class in use, so a partition cannot go below that many MB; a min_partition_mb
    under it lets the plan ask for less (docs/controller.md, "Stuck shrinks")."""
    notes = []
    for r in rows:
        floor = r.get("floor_bytes")
        if floor and floor > min_partition_mb * MIB:
            notes.append(
                f"partition {r['partition']} holds pages in {floor // MIB} slab classes and memcached keeps one "
                f"1 MB page in each, so it cannot shrink below {floor // MIB} MB; min_partition_mb is "
                f"{min_partition_mb}: a smaller limit leaves its shrink stuck (shrink_stuck); "
                f"raise min_partition_mb to at least {floor // MIB}")
    return notes


def taken_over(setting: str) -> str | None:
    """What `run` does to a setting attach found ("slab_automove=1"), in words; None
    when it leaves it as it is."""
    key, _, value = setting.partition("=")
    if key == "slab_automove" and value != "0":
        return f"turns memcached's slab automover off ({setting} -> 0): the controller moves pages itself"
    if key == "maxmemory-policy" and not value.startswith("allkeys-"):
        return f"sets Redis's eviction policy to allkeys-lru ({setting}): a lowered limit must evict any key"
    return None


def cmd_plan(cfg: ControllerConfig, as_json: bool, out: TextIO) -> int:
    """One read-only tick; print the current and the planned allocation."""
    if cfg.cache_mode != "partitioned":
        return _not_partitioned(cfg, "plan", out)
    try:
        ctl = Controller(cfg, read_only=True)
    except (policies.PolicyError, AuthError) as e:
        print(f"robinhood-controller: invalid configuration: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        try:
            ctl.start(wait=False)
        except StartupError as e:
            hint = " (plan reads every partition: start it)" if e.unreachable else ""
            print(f"robinhood-controller: {e}{hint}", file=sys.stderr)
            return EXIT_FAIL
        r = ctl.tick()
    finally:
        ctl.close()
    rows = plan_rows(ctl, r)
    if as_json:
        out.write(json.dumps({"app_server": cfg.app_server, "policy": cfg.policy,
                              "policy_params": cfg.policy_params.model_dump(),
                              "budget_bytes": cfg.budget_bytes, "rbc_error": r.rbc_error,
                              "window_requests": r.rbc.window_requests if r.rbc else None,
                              "notes": r.notes + floor_notes(rows, cfg.settings.min_partition_mb),
                              "partitions": rows,
                              "run_takes_over": {n: s for n, s in sorted(ctl.took_over.items()) if taken_over(s)}},
                             indent=1) + "\n")
        return EXIT_OK
    s = cfg.settings
    params = "".join(f", {k} {v:g}" if isinstance(v, float) else f", {k} {v}"
                     for k, v in cfg.policy_params.model_dump().items())
    out.write(f"app server {cfg.app_server}: policy {cfg.policy}{params}, budget {cfg.budget_mb} MB, "
              f"min_partition_mb {s.min_partition_mb}, used_source {s.used_source}\n")
    if r.rbc is not None:
        out.write(f"RBC: {r.rbc.window_requests} requests in the last {cfg.rbc_window:g}s, "
                  f"{r.rbc.band_requests} in the P{r.rbc.low_pct:g}-P{r.rbc.high_pct:g} band\n")
    else:
        out.write(f"RBC: unavailable ({r.rbc_error}); the plan keeps the current allocation\n")
    for note in r.notes + floor_notes(rows, s.min_partition_mb):
        out.write(f"note: {note}\n")
    for name, setting in sorted(ctl.took_over.items()):
        if (what := taken_over(setting)) is not None:
            out.write(f"note: on {name}, run {what}; it stays so after run exits unless run has --restore-settings\n")
    table = [["partition", "limit_mb", "malloced_mb", "floor_mb", "used_mb", "rbc", "eligible", "target_mb",
              "planned_mb", "change_mb"]]
    for row in rows:
        if row["limit_bytes"] is None:
            table.append([row["partition"], "unreachable"] + ["-"] * 8)
            continue
        planned = row["planned_limit_bytes"]
        change = "-" if planned is None else f"{(planned - row['limit_bytes']) / MIB:+.0f}"
        table.append([row["partition"], _mb(row["limit_bytes"]), _mb(row["malloced_bytes"]),
                      _mb(row["floor_bytes"]), _mb(row["used_bytes"]),
                      "-" if row["rbc"] is None else str(row["rbc"]),
                      "-" if row["eligible"] is None else ("yes" if row["eligible"] else "no"),
                      "-" if row["target_bytes"] is None else f"{row['target_bytes'] / MIB:.2f}",
                      _mb(planned), change])
    _table(table, out)
    out.write("nothing was changed (plan is read-only)\n")
    return EXIT_OK


def cmd_run(cfg: ControllerConfig, ns: argparse.Namespace) -> int:
    """The control loop until SIGTERM/SIGINT (or --max-ticks)."""
    if cfg.cache_mode != "partitioned":
        return _not_partitioned(cfg, "run", sys.stdout)
    s = cfg.settings
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("event=stopping signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = Metrics(cfg.app_server, cfg.policy, [p.name for p in cfg.partitions])
    timeline = TimelineWriter(ns.timeline) if ns.timeline else None
    ctl: Controller | None = None

    def reload_credentials() -> None:
        """SIGHUP (docs/security.md, "Rotation"): the servers' token file and the TLS
        files of /metrics, and the controller's own token file and TLS files for the RBC
        server, re-read; a file that does not read keeps the previous one."""
        done = metrics.reload()
        if ctl is not None and ctl.rbc is not None:
            done += [f"rbc_{x}" for x in ctl.rbc.reload()]
        log.info("event=reloaded signal=SIGHUP reread=%s", ",".join(done) or "-")

    def on_hup(_signum: int, _frame: object) -> None:
        # The reading happens on a thread of its own: the handler runs on the main
        # thread between two bytecodes, maybe inside a lock the reading needs.
        threading.Thread(target=reload_credentials, name="sighup", daemon=True).start()

    signal.signal(signal.SIGHUP, on_hup)
    try:
        # Every credential and the policy are read before anything listens: a refused
        # token file (shared-readable, missing) leaves no /metrics open behind it.
        try:
            ctl = Controller(cfg, metrics=metrics, timeline=timeline)
        except (policies.PolicyError, AuthError) as e:
            print(f"robinhood-controller: invalid configuration: {e}", file=sys.stderr)
            return EXIT_CONFIG
        if s.metrics:
            try:
                port = metrics.serve(s.metrics, tokens=cfg.auth.tokens if cfg.auth else None, tls=cfg.tls,
                                     insecure=ns.insecure)
            except AuthError as e:
                print(f"robinhood-controller: {e}", file=sys.stderr)
                return EXIT_CONFIG
            except OSError as e:
                print(f"robinhood-controller: controller.metrics: cannot listen on {s.metrics!r}: {e.strerror}",
                      file=sys.stderr)
                return EXIT_FAIL
            log.info("event=metrics addr=%s port=%d", s.metrics, port)
        log.info("event=start app_server=%s policy=%s params=%s budget_mb=%d partitions=%s interval=%gs "
                 "min_partition_mb=%d dry_run=%s rbc=%s rbc_window=%gs",
                 cfg.app_server, cfg.policy, json.dumps(cfg.policy_params.model_dump(), separators=(",", ":")),
                 cfg.budget_mb, ",".join(f"{p.name}@{p.addr}" for p in cfg.partitions), s.interval,
                 s.min_partition_mb, s.dry_run, cfg.rbc_addr or "-", cfg.rbc_window)
        try:
            ctl.start(wait=ns.wait, stop=stop)
        except StartupError as e:
            if stop.is_set():  # asked to stop while waiting for partitions
                log.info("event=stopped ticks=0")
                return EXIT_OK
            hint = " (start it, or run with --wait)" if e.unreachable else ""
            print(f"robinhood-controller: {e}{hint}", file=sys.stderr)
            return EXIT_FAIL
        ctl.run(stop, max_ticks=ns.max_ticks)
        log.info("event=stopped ticks=%d", ctl.ticks)
        if ctl.read_only:
            pass  # a dry run took nothing over: nothing to put back, nothing to say it left
        elif ns.restore_settings:
            for name, setting in ctl.release().items():
                log.info("event=restored partition=%s setting=%s", name, setting)
        else:
            for name, was in sorted(ctl.took_over.items()):
                if taken_over(was):
                    log.info("event=left partition=%s took_over=%s msg=%r", name, was,
                             "left as the controller set it; run with --restore-settings to put it back at exit")
        if timeline is not None:
            timeline.close()
            if timeline.lost:
                log.error("event=timeline_incomplete path=%s lost=%d (exit 1)", timeline.path, timeline.lost)
                return EXIT_FAIL
        return EXIT_OK
    finally:
        if ctl is not None:
            ctl.close()
        if timeline is not None:
            timeline.close()
        metrics.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the robinhood-controller console script."""
    return console.run(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    ns = build_parser().parse_args(argv)
    if ns.command == "policies":
        return cmd_policies(ns.json, sys.stdout)
    logging.basicConfig(level=ns.log_level, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s %(message)s")
    if ns.command == "policy-server":
        if ns.listen is not None:
            return serve_forking(ns.listen, sys.stdout)
        return serve_stdio()
    try:
        cfg = load_config(ns)
    except ConfigError as e:
        print(f"robinhood-controller: invalid configuration: {e}", file=sys.stderr)
        return EXIT_CONFIG
    if ns.command == "status":
        return cmd_status(cfg, ns.json, sys.stdout)
    if ns.command == "plan":
        return cmd_plan(cfg, ns.json, sys.stdout)
    return cmd_run(cfg, ns)


if __name__ == "__main__":
    sys.exit(main())
