"""The chaos run (``robinhood-testbed chaos``, ``make chaos``; docs/reliability.md): one
arm on the testbed while the RBC server, a controller, a memcached partition and a backend
replica are killed or hung at seeded random times, one fault at a time; the report counts
the requests failed during each fault and the time to reconcile after it.

The schedule and the analysis are plain functions (tested); the run is their shell.
"""
from __future__ import annotations

import csv
import json
import logging
import random
import signal
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robinhood_common.units import format_duration

from . import metrics
from .deploy import Deployment
from .experiment import Arm, Experiment, ExperimentError
from .procs import Proc, StartError
from .run import check_replay, deployment, prepare_inputs, start_replay

log = logging.getLogger(__name__)

KINDS = ("kill", "hang")
CONTROL_PLANE = ("rbcserver", "controller")
DATA_PLANE = ("memcached", "backend")


@dataclass(frozen=True)
class Fault:
    """One fault: at ``start`` seconds into the run, ``target`` (a supervised process
    name) is killed (restarted ``length`` s later) or hung (resumed ``length`` s
    later)."""

    start: float
    kind: str
    target: str
    length: float

    @property
    def end(self) -> float:
        return self.start + self.length

    @property
    def plane(self) -> str:
        return "control" if self.target.startswith(CONTROL_PLANE) else "data"


def component(target: str) -> str:
    """The component class of a process name: rbcserver, controller, memcached, backend."""
    return target.split("-", 1)[0]


def schedule(seed: int, duration: float, targets: list[str], *, warmup: float = 30.0,
             recovery: float = 30.0, length: tuple[float, float] = (3.0, 15.0)) -> list[Fault]:
    """Faults one at a time from warmup to the end: each class of target (RBC server,
    controller, memcached, backend) is hit in turn, in a seeded random order, with a
    random member of the class, kind and length; between the end of one fault and the
    next at least ``recovery`` s plus a random gap of up to ``recovery`` s pass."""
    rng = random.Random(seed)
    classes: dict[str, list[str]] = {}
    for t in targets:
        classes.setdefault(component(t), []).append(t)
    if not classes:
        raise ExperimentError("chaos: nothing to inject faults into")
    order: list[str] = []
    out: list[Fault] = []
    t = warmup
    while True:
        if not order:
            order = sorted(classes)
            rng.shuffle(order)
        cls = order.pop()
        f = Fault(start=round(t, 1), kind=rng.choice(KINDS), target=rng.choice(sorted(classes[cls])),
                  length=round(rng.uniform(*length), 1))
        if f.end + recovery > duration:
            return out
        out.append(f)
        t = f.end + recovery + rng.uniform(0, recovery)


@dataclass
class FaultResult:
    fault: Fault
    requests: int = 0
    failed: int = 0
    reconcile_s: float | None = None
    """Seconds from the fault's end (restart or resume) to reconciled; None: never."""


@dataclass
class Report:
    faults: list[FaultResult]
    requests: int
    failed_outside: int
    """Requests failed outside every fault window (not attributed to a fault)."""
    control_failed: int
    data_failed: int
    max_limits_bytes: int
    budget_bytes: int
    interval_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def data_failed_pct(self) -> float:
        return 100.0 * self.data_failed / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["data_failed_pct"] = self.data_failed_pct
        return d


def attribute(faults: list[Fault], requests: list[tuple[float, bool]], grace: float) -> tuple[list[FaultResult], int]:
    """Requests (send time in s from the run's start, failed?) to the fault whose window
    [start, end + grace) holds their send time; the second value counts the failed
    requests outside every window."""
    res = [FaultResult(f) for f in faults]
    outside = 0
    for t, failed in requests:
        for r in res:
            if r.fault.start <= t < r.fault.end + grace:
                r.requests += 1
                r.failed += failed
                break
        else:
            outside += failed
    return res, outside


def first_after(times: list[float], t: float) -> float | None:
    """The first time in sorted ``times`` at or after t, minus t (None: none)."""
    for x in times:
        if x >= t:
            return x - t
    return None


# -- the shell ------------------------------------------------------------------------


def _mc_limit(addr: str) -> int | None:
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.3) as s:
            s.sendall(b"stats settings\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    return None
                buf += chunk
    except OSError:
        return None
    for line in buf.split(b"\r\n"):
        parts = line.split()
        if len(parts) == 3 and parts[1] == b"maxbytes":
            return int(parts[2])
    return None


class Monitor(threading.Thread):
    """Samples, every 0.25 s: each partition's memcached limit (the sum against the
    budget; a partition that must reconcile), and each app server's replicas in
    rotation per backend."""

    def __init__(self, dep: Deployment, t0: float) -> None:
        super().__init__(name="chaos-monitor", daemon=True)
        self.dep, self.t0 = dep, t0
        self.stop_ev = threading.Event()
        self.max_sum = 0
        self.limits: list[tuple[float, str, int | None]] = []  # (t, partition process name, maxbytes)
        self.rotation: list[tuple[float, bool]] = []  # (t, every replica of every backend in rotation)
        self.replicas = {b.name: len(b.replicas) for b in dep.typed.backends}

    def run(self) -> None:
        while not self.stop_ev.wait(0.25):
            t = time.time() - self.t0
            for a in self.dep.typed.app_servers:
                total = 0
                for name, p in (a.partitions or {}).items() if a.cache_mode == "partitioned" else []:
                    v = _mc_limit(p.addr)
                    self.limits.append((t, f"memcached-{a.id}-{name}", v))
                    total += v or 0
                self.max_sum = max(self.max_sum, total)
                rot = metrics.by_label(metrics.scrape(a.http, timeout=0.5) or {}, "appserver_replicas_in_rotation",
                                       "backend")
                if rot:
                    self.rotation.append((t, all(rot.get(b, 0) >= n for b, n in self.replicas.items())))

    def stop(self) -> None:
        self.stop_ev.set()
        self.join()


class Injector(threading.Thread):
    """Carries out the schedule on the supervised processes."""

    def __init__(self, dep: Deployment, faults: list[Fault], t0: float, out: Path) -> None:
        super().__init__(name="chaos-injector", daemon=True)
        self.dep, self.faults, self.t0 = dep, faults, t0
        self.stop_ev = threading.Event()
        self.events = open(out, "w")
        self.errors: list[str] = []

    def _proc(self, name: str) -> Proc:
        live = [p for p in self.dep.sup.procs if p.name == name]
        if not live:
            raise StartError(f"chaos: no process {name}")
        return live[-1]

    def _event(self, **kv: Any) -> None:
        kv["t"] = round(time.time() - self.t0, 3)
        self.events.write(json.dumps(kv) + "\n")
        self.events.flush()

    def run(self) -> None:
        try:
            for f in self.faults:
                if self.stop_ev.wait(max(0.0, self.t0 + f.start - time.time())):
                    return
                p = self._proc(f.target)
                if f.kind == "kill":
                    p.popen.kill()
                    p.popen.wait()
                    self._event(event="killed", target=f.target)
                else:
                    p.popen.send_signal(signal.SIGSTOP)
                    self._event(event="hung", target=f.target)
                log.info("chaos: %s %s for %.1fs", f.kind, f.target, f.length)
                self.stop_ev.wait(max(0.0, self.t0 + f.end - time.time()))
                if f.kind == "kill":
                    self.dep.sup.start(p.name, p.args)
                    self._event(event="restarted", target=f.target)
                else:
                    p.popen.send_signal(signal.SIGCONT)
                    self._event(event="resumed", target=f.target)
            # Processes started by this thread die with it (the supervisor sets
            # PR_SET_PDEATHSIG, which fires when the creating thread ends): stay
            # until the run is over.
            self.stop_ev.wait()
        except Exception as e:  # noqa: BLE001 - reported, the run goes on without faults
            self.errors.append(f"{type(e).__name__}: {e}")
            log.exception("chaos injector failed")
            self.stop_ev.wait()
        finally:
            self.events.close()

    def stop(self) -> None:
        self.stop_ev.set()
        self.join()


def targets_of(dep: Deployment) -> list[str]:
    """The processes faults may hit: the RBC server, each controller, each memcached
    partition, and backend replicas of backends with two or more (killing the only
    replica of a backend fails requests by design, which says nothing)."""
    out = []
    for p in dep.sup.procs:
        c = component(p.name)
        if c in ("rbcserver", "controller", "memcached"):
            out.append(p.name)
        elif c == "backend":
            bname = p.name[len("backend-"):].rsplit("-", 1)[0]
            b = next(b for b in dep.typed.backends if b.name == bname)
            if len(b.replicas) >= 2:
                out.append(p.name)
    return sorted(set(out))


def reconcile_times(results: list[FaultResult], ticks: list[tuple[float, bool]],
                    limits: list[tuple[float, str, int | None]], planned: dict[str, list[tuple[float, int]]],
                    rotation: list[tuple[float, bool]]) -> None:
    """Fill reconcile_s of every result. ticks: (time, rbc_ok) of the controller's
    ticks; limits: monitor samples; planned: partition process name → (time, planned
    limit) of the controller's ticks; rotation: (time, all replicas in rotation)."""
    ok_ticks = sorted(t for t, ok in ticks if ok)
    all_ticks = sorted(t for t, _ in ticks)
    for r in results:
        f = r.fault
        c = component(f.target)
        if c == "rbcserver":
            r.reconcile_s = first_after(ok_ticks, f.end)
        elif c == "controller":
            r.reconcile_s = first_after(all_ticks, f.end)
        elif c == "memcached":
            plan = planned.get(f.target, [])
            done = None
            for t, name, v in limits:
                if name != f.target or t < f.end or v is None:
                    continue
                want = [p for pt, p in plan if pt <= t]
                if want and v == want[-1]:
                    done = t - f.end
                    break
            r.reconcile_s = done
        elif c == "backend":
            r.reconcile_s = first_after(sorted(t for t, full in rotation if full), f.end)


def run_chaos(exp: Experiment, arm: Arm, out_dir: Path, data_dir: Path, seed: int) -> Report:
    """Run one arm with faults scheduled from seed; write schedule.json, faults.jsonl,
    chaos.json and chaos.md to out_dir."""
    if exp.cache.store != "memcached":
        raise ExperimentError(f"chaos: cache.store is {exp.cache.store}; the chaos run watches and faults "
                              "memcached partitions only (docs/reliability.md)")
    out_dir.mkdir(parents=True, exist_ok=True)
    trace, scenario = prepare_inputs(exp, out_dir)
    run_dir = out_dir / arm.name
    if run_dir.exists():
        raise ExperimentError(f"{run_dir} already exists; choose another --out")
    dep = deployment(exp, arm, run_dir, data_dir, replay=True, trace=trace, scenario=scenario)
    with dep:
        faults = schedule(seed, exp.duration, targets_of(dep))
        (out_dir / "schedule.json").write_text(json.dumps([asdict(f) for f in faults], indent=1))
        log.info("chaos: %d faults over %s: %s", len(faults), format_duration(exp.duration),
                 ", ".join(f"{f.kind} {f.target}" for f in faults))
        replay, t0 = start_replay(exp, dep, trace, scenario)
        monitor = Monitor(dep, t0)
        injector = Injector(dep, faults, t0, out_dir / "faults.jsonl")
        monitor.start()
        injector.start()
        try:
            while replay.alive():
                time.sleep(0.5)
        finally:
            injector.stop()
            monitor.stop()
        check_replay(replay)
    return analyse(exp, dep, faults, run_dir, monitor, injector.errors, out_dir, t0)


def analyse(exp: Experiment, dep: Deployment, faults: list[Fault], run_dir: Path, monitor: Monitor,
            errors: list[str], out_dir: Path, t0: float) -> Report:
    requests: list[tuple[float, bool]] = []
    with open(run_dir / "replay" / "requests.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            requests.append((float(row["send_ms"]) / 1000.0, row["status"] != "200"))
    interval = min((a.controller.interval for a in dep.typed.app_servers if a.cache_mode == "partitioned"),
                   default=1.0)
    # A fault's window: its length plus the time reconciling may take (2 intervals)
    # plus the request timeout (a request sent before it ends may fail after).
    grace = 2 * interval + max(a.request_timeout for a in dep.typed.app_servers)
    results, outside = attribute(faults, requests, grace)
    ticks: list[tuple[float, bool]] = []
    planned: dict[str, list[tuple[float, int]]] = {}
    for a in dep.typed.app_servers:
        path = run_dir / f"controller-{a.id}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            t = rec["time"] - t0
            ticks.append((t, bool(rec.get("rbc_ok"))))
            for name, p in rec.get("partitions", {}).items():
                if p.get("planned_limit_bytes") is not None:
                    planned.setdefault(f"memcached-{a.id}-{name}", []).append((t, p["planned_limit_bytes"]))
    reconcile_times(results, ticks, monitor.limits, planned, monitor.rotation)
    budget = sum(a.cache_budget_mb for a in dep.typed.app_servers if a.cache_mode == "partitioned") << 20
    rep = Report(
        faults=results, requests=len(requests), failed_outside=outside,
        control_failed=sum(r.failed for r in results if r.fault.plane == "control"),
        data_failed=sum(r.failed for r in results if r.fault.plane == "data"),
        max_limits_bytes=monitor.max_sum, budget_bytes=budget, interval_s=interval, notes=list(errors))
    (out_dir / "chaos.json").write_text(json.dumps(rep.to_json(), indent=1))
    (out_dir / "chaos.md").write_text(markdown(rep, exp))
    return rep


def markdown(rep: Report, exp: Experiment) -> str:
    iv = rep.interval_s
    lines = [f"# Chaos run: {exp.name}, {format_duration(exp.duration)}", "",
             f"- requests: {rep.requests}",
             f"- failed during control-plane faults: **{rep.control_failed}** (goal 0)",
             f"- failed during data-plane faults: **{rep.data_failed}** = {rep.data_failed_pct:.3f} % of all "
             "(goal ≤ 0.1 %)",
             f"- failed outside every fault window: {rep.failed_outside}",
             f"- largest sum of memcached limits: {rep.max_limits_bytes / 2**20:.1f} MiB of a "
             f"{rep.budget_bytes / 2**20:.0f} MiB budget",
             "", "| t (s) | fault | length (s) | requests | failed | reconciled after (s) | intervals |",
             "|---|---|---|---|---|---|---|"]
    for r in rep.faults:
        f = r.fault
        rec = "never" if r.reconcile_s is None else f"{r.reconcile_s:.1f}"
        ivs = "" if r.reconcile_s is None else f"{r.reconcile_s / iv:.1f}"
        lines.append(f"| {f.start:.0f} | {f.kind} {f.target} | {f.length:.1f} | {r.requests} | {r.failed} | "
                     f"{rec} | {ivs} |")
    for n in rep.notes:
        lines.append(f"\nnote: {n}")
    return "\n".join(lines) + "\n"
