"""Running one arm of an experiment: on a fresh topology of real processes (`run_arm`)
or in the simulator (`run_arm_sim`), from the inputs every arm shares (`prepare_inputs`)."""
from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robinhood_common.contract import dump_yaml
from robinhood_common.units import format_duration, parse_duration

from . import metrics
from .deploy import Deployment, build_topology, check_appserver, controller_cmd, go_bin
from .experiment import Arm, Experiment, ExperimentError
from .procs import PortAllocator, Proc, StartError

log = logging.getLogger(__name__)

#: Seconds of trace generated beyond the replay duration, so the replay never runs dry.
TRACE_SLACK_S = 10.0


def rate_schedule(exp: Experiment) -> str | None:
    """The scenario's request_rate events as tracegen synth --rate-schedule takes them
    (``AT:FACTOR,...`` in time order), or None when it has none: the request rate is
    the trace's, so a synthesized trace carries it. ExperimentError names an event whose
    time or factor is not one (tracegen validates the rest)."""
    data = exp.scenario_data()
    events = data.get("events") if isinstance(data, dict) else None
    steps: list[tuple[float, str]] = []
    for i, ev in enumerate(events if isinstance(events, list) else []):
        if not isinstance(ev, dict) or ev.get("kind") != "request_rate":
            continue
        at, factor = ev.get("at"), ev.get("factor")
        try:
            t = parse_duration(at)  # type: ignore[arg-type]
        except ValueError as e:
            raise ExperimentError(f"scenario.events[{i}] (request_rate): at: {e}") from None
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise ExperimentError(f"scenario.events[{i}] (request_rate): factor: {factor!r} is not a number")
        steps.append((t, f"{at}:{factor!r}"))
    if not steps:
        return None
    steps.sort(key=lambda st: st[0])
    return ",".join(item for _, item in steps)


def synth_args(exp: Experiment) -> list[str]:
    """The tracegen synth flags of the experiment's synthesized trace (without
    --duration and --out): what tracegen writes, or what bin/sim --synth generates.
    The scenario's request_rate events become --rate-schedule."""
    s = exp.trace.synth
    assert s is not None
    args = ["--profile", s.profile, "--backends", str(len(exp.backends)),
            "--backend-names", ",".join(b.name for b in exp.backends),
            "--rate", f"{s.rate:g}", "--seed", str(exp.seed)]
    for k, v in s.params.items():
        args.append(f"--{k}={str(v).lower() if isinstance(v, bool) else v}")
    schedule = rate_schedule(exp)
    if schedule is not None:
        args += ["--rate-schedule", schedule]
    return args


def stream_args(exp: Experiment) -> list[str]:
    """The tracegen import --stream flags of the experiment's real key streams
    (``trace.synth.streams``, files resolved against the experiment file); [] without
    streams."""
    streams = exp.trace.synth.streams if exp.trace.synth is not None else None
    args: list[str] = []
    for name, st in (streams or {}).items():
        spec = f"{name}={exp.path(st.file).resolve()}"
        if st.format is not None:
            spec += f",format={st.format}"
        if st.skip:
            spec += f",skip={st.skip}"
        args += ["--stream", spec]
    return args


#: A trace the simulator generates in process: the synth flags.
Generated = list


def tracegen(args: list[str], what: str, log: Path | None = None, timeout: float | None = None) -> str:
    """``bin/tracegen ARGS``'s output; ExperimentError with its stderr when it fails. With
    ``log``, the command and everything it printed are written there."""
    cmd = [str(go_bin("tracegen")), *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if log is not None:
        log.write_text("$ " + " ".join(cmd) + "\n" + res.stdout + res.stderr)
    if res.returncode != 0:
        raise ExperimentError(f"{what} failed ({' '.join(cmd)}):\n{res.stderr.strip()}")
    return res.stdout


def prepare_inputs(exp: Experiment, out_dir: Path, engine: str = "testbed") -> tuple[Path | Generated, Path | None]:
    """Synthesise (or locate) the trace and write the scenario; both are shared by
    every policy of a comparison. Returns (trace path, scenario path or None); in the
    simulator with ``sim.generate`` the trace is its synth flags instead (nothing is
    written: bin/sim generates it). With real key streams (``trace.synth.streams``) the
    trace is ``tracegen import``'s: the same synth flags, the streams' keys."""
    streams = stream_args(exp)
    if streams and exp.sim.generate:
        raise ExperimentError("sim.generate: true and trace.synth.streams cannot go together: the simulator "
                              "generates synthetic keys only, and the streams' real keys are put into a trace "
                              "file by tracegen import; set sim.generate: false (the simulator then reads that "
                              "file) or remove trace.synth.streams")
    if exp.trace.file is not None and rate_schedule(exp) is not None:
        raise ExperimentError(f"scenario: request_rate events change the trace's request rate, so they need a "
                              f"synthesized trace (trace.synth; tracegen synth --rate-schedule); trace.file "
                              f"{exp.trace.file} has its own arrival times")
    out_dir.mkdir(parents=True, exist_ok=True)
    if exp.trace.file is not None:
        trace: Path | Generated = exp.path(exp.trace.file).resolve()
    elif engine == "sim" and exp.sim.generate:
        trace = synth_args(exp)
    else:
        trace = out_dir / "trace.jsonl"
        command = "import" if streams else "synth"
        tracegen([command, *synth_args(exp), *streams, "--duration", format_duration(exp.duration + TRACE_SLACK_S),
                  "--out", str(trace)], "trace import" if streams else "trace synthesis",
                 log=out_dir / f"tracegen-{command}.log")
    scenario = None
    data = exp.scenario_data()
    if data is not None:
        scenario = out_dir / "scenario.yaml"
        scenario.write_text(dump_yaml(data, sort_keys=False))
    return trace, scenario


def check_scenario(scenario: Path, topology: Path, duration: float | None = None) -> None:
    """Validate a scenario against a topology before anything starts."""
    args = [str(go_bin("tracegen")), "scenario", "check", str(scenario), "--topology", str(topology)]
    if duration is not None:
        args += ["--duration", format_duration(duration)]
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode != 0:
        raise ExperimentError(f"invalid scenario {scenario}:\n{(res.stderr or res.stdout).strip()}")


@dataclass
class LiveState:
    """What the watcher last saw; read by the live view."""

    policy: str = ""
    started: float = 0.0
    duration: float = 0.0
    sent: float = 0.0
    sent_rate: float = 0.0
    errors: float = 0.0
    p99_ms: float | None = None
    slo_ms: float = 0.0
    hit_ratio: dict[str, float] = field(default_factory=dict)
    alloc_mb: dict[str, float] = field(default_factory=dict)
    rbc_share: dict[str, float] = field(default_factory=dict)
    backend_names: dict[int, str] = field(default_factory=dict)


class Watcher(threading.Thread):
    """Polls the RBC server, app servers, controllers and the replayer once per
    second; records the RBC timeline and keeps the live state up to date."""

    def __init__(self, dep: Deployment, state: LiveState, period: float = 1.0) -> None:
        super().__init__(name="watcher", daemon=True)
        self.dep, self.state, self.period = dep, state, period
        self.stop_event = threading.Event()
        self.rbc_file = open(dep.run_dir / "rbc.jsonl", "w")
        self.names = dep.backend_names
        state.backend_names = self.names
        self._last_sent: tuple[float, float] | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.period):
                self.poll()
        finally:
            self.rbc_file.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5)

    def poll(self) -> None:
        ep, st = self.dep.ep, self.state
        now = time.time()
        snap = metrics.rbc_snapshot(ep.rbc_http, window_seconds=self.dep.typed.rbc_server.window)
        if snap is not None:
            counts = {self.names.get(int(b.get("backend", 0)), str(b.get("backend"))): int(b.get("blocking_count", 0))
                      for b in snap.get("backends", [])}
            band = sum(counts.values())
            st.rbc_share = {n: c / band for n, c in counts.items()} if band else {}
            self.rbc_file.write(json.dumps({"t": now - st.started, "unix": now, "rbc": counts,
                                            "window_requests": int(snap.get("window_requests", 0)),
                                            "p99_latency_us": int(snap.get("p99_latency_us", 0))}) + "\n")
            self.rbc_file.flush()
        st.hit_ratio, _ = hit_ratios([s for addr in ep.app_http.values() if (s := metrics.scrape(addr)) is not None])
        alloc: dict[str, float] = {}
        for addr in ep.controller_metrics.values():
            s = metrics.scrape(addr)
            if s is None:
                continue
            for n, v in metrics.by_label(s, "controller_partition_limit_bytes", "partition").items():
                alloc[n] = alloc.get(n, 0) + v / 2**20 / max(1, len(ep.controller_metrics))
        st.alloc_mb = alloc
        r = metrics.scrape(ep.replay_metrics)
        if r is not None:
            sent = metrics.total(r, "replay_requests_sent_total")
            if self._last_sent is not None and now > self._last_sent[0]:
                st.sent_rate = (sent - self._last_sent[1]) / (now - self._last_sent[0])
            self._last_sent = (now, sent)
            st.sent = sent
            st.errors = sum(v for lab, v in r.get("replay_responses_total", [])
                            if lab.get("status") not in ("200",))
            p99 = metrics.total(r, "replay_window_p99_seconds")
            st.p99_ms = p99 * 1000 if p99 else None


@dataclass
class RunResult:
    policy: str
    run_dir: Path
    summary: dict[str, Any]
    hit_ratio: dict[str, float]
    overall_hit_ratio: float | None


def hit_ratios(app_servers: list[metrics.Samples]) -> tuple[dict[str, float], float | None]:
    """Per-backend and overall hit ratios of the app servers' cache counters together."""
    hits: Counter[str] = Counter()
    misses: Counter[str] = Counter()
    for s in app_servers:
        hits.update(metrics.by_label(s, "appserver_cache_hits_total", "backend"))
        misses.update(metrics.by_label(s, "appserver_cache_misses_total", "backend"))
    ratios = {n: hits[n] / (hits[n] + misses[n]) for n in sorted(hits | misses) if hits[n] + misses[n] > 0}
    h, m = hits.total(), misses.total()
    return ratios, (h / (h + m) if h + m > 0 else None)


def snapshot_appservers(dep: Deployment) -> tuple[dict[str, float], float | None]:
    """Final per-backend and overall hit ratios; the raw metrics are saved in the run folder."""
    samples = []
    for app, addr in dep.ep.app_http.items():
        body = metrics.fetch(f"http://{addr}/metrics", timeout=3)
        if body is not None:
            (dep.run_dir / f"appserver-{app}.prom").write_bytes(body)
            samples.append(metrics.parse_prometheus(body.decode(errors="replace")))
    return hit_ratios(samples)


def write_result(arm: Arm, run_dir: Path, summary: dict[str, Any], ratios: dict[str, float],
                 overall: float | None, **extra: Any) -> RunResult:
    """Write the arm's result.json; its RunResult."""
    (run_dir / "result.json").write_text(json.dumps({
        "policy": arm.name, "cache_mode": arm.cache_mode, "allocation": arm.policy, "dispatch": arm.dispatch,
        "hit_ratio": ratios, "overall_hit_ratio": overall, **extra}, indent=2))
    return RunResult(arm.name, run_dir, summary, ratios, overall)


#: The file the testbed writes, in an arm's folder, when the run's clock starts: the
#: Unix time (controller.run.start_file).
RUN_START = "run-start"


def deployment(exp: Experiment, arm: Arm, run_dir: Path, data_dir: Path, prometheus: bool = False,
               replay: bool = False, trace: Path | None = None, scenario: Path | None = None) -> Deployment:
    """A deployment (not started) of one arm of an experiment. With a trace, every
    controller is told about the run (controller.run)."""
    run = None if trace is None else run_block(exp, arm, run_dir, trace, scenario)
    return Deployment(build_topology(exp, arm, run=run), run_dir, data_dir, memcached_args=list(exp.cache.memcached_args),
                      prometheus=prometheus, replay=replay)


def run_block(exp: Experiment, arm: Arm, run_dir: Path, trace: Path | Generated, scenario: Path | None) -> dict[str, Any]:
    """What every controller is told about the run (controller.run): its length, start
    file and topology, the trace file, the scenario, and the oracle's schedule when the
    arm's policy applies one."""
    run = {"seconds": format_duration(exp.duration), "start_file": str((run_dir / RUN_START).resolve()),
           "topology": str((run_dir / "topology.yaml").resolve())}
    if not isinstance(trace, list):
        run["trace"] = str(Path(trace).resolve())
    if scenario is not None:
        run["scenario"] = str(Path(scenario).resolve())
    from . import oracle  # it simulates arms: it imports this module
    if oracle.needs_schedule(arm):
        if isinstance(trace, list):
            raise ExperimentError(f"arm {arm.name}: the oracle reads the trace file, and sim.generate writes none "
                                  "(set sim.generate: false, or leave the oracle out)")
        run["oracle"] = str(oracle.schedule(exp, arm, run_dir.parent, Path(trace), scenario))
    return run


def slo_flags(exp: Experiment) -> list[str]:
    """The run's length, seed and SLO method, as tracegen replay and bin/sim take them."""
    return ["--duration", format_duration(exp.duration), "--seed", str(exp.seed),
            "--slo", format_duration(exp.slo.latency), "--slo-step", format_duration(exp.slo.step),
            "--slo-window", format_duration(exp.slo.window), "--warmup", format_duration(exp.slo.warmup)]


def replay_args(exp: Experiment, dep: Deployment, trace: Path, scenario: Path | None, out: Path) -> list[str]:
    """The `tracegen replay` command of one run: the experiment's trace, duration,
    seed, SLO method and scenario against the deployment's topology."""
    args = [str(go_bin("tracegen")), "replay", "--topology", str(dep.topology_path), "--trace", str(trace),
            "--out", str(out), *slo_flags(exp), "--metrics", dep.ep.replay_metrics]
    return args + (["--scenario", str(scenario)] if scenario is not None else [])


def start_replay(exp: Experiment, dep: Deployment, trace: Path, scenario: Path | None) -> tuple[Proc, float]:
    """Start the run's clock (its start file) and its replay; the replay's process and the start."""
    args = replay_args(exp, dep, trace, scenario, dep.run_dir / "replay")
    started = time.time()
    (dep.run_dir / RUN_START).write_text(f"{started:.6f}\n")
    return dep.sup.start("replay", args), started


def check_replay(replay: Proc) -> None:
    if replay.popen.returncode != 0:
        raise replay.exited()


def run_arm(exp: Experiment, arm: Arm, out_dir: Path, trace: Path, scenario: Path | None,
            data_dir: Path, view: Callable[[LiveState], Any] | None = None,
            prometheus: bool = False) -> RunResult:
    """Run one arm on a fresh topology and return its results."""
    policy = arm.name
    run_dir = out_dir / policy
    if run_dir.exists():
        raise ExperimentError(f"{run_dir} already exists; choose another --out")
    dep = deployment(exp, arm, run_dir, data_dir, prometheus=prometheus, replay=True, trace=trace, scenario=scenario)
    for app in dep.ep.app_http:
        check_appserver(dep.topology_path, app)
    if scenario is not None:
        check_scenario(scenario, dep.topology_path, exp.duration)
    state = LiveState(policy=policy, duration=exp.duration, slo_ms=exp.slo.latency * 1000)
    log.info("policy %s: starting the topology (logs in %s)", policy, dep.sup.log_dir)
    with dep:
        watcher = Watcher(dep, state)
        replay, state.started = start_replay(exp, dep, trace, scenario)
        watcher.start()
        try:
            while replay.alive():
                dep.sup.check_alive(but=replay, when=" during the run")
                if view is not None:
                    view(state)
                time.sleep(0.5)
        finally:
            watcher.stop()
        check_replay(replay)
        ratios, overall = snapshot_appservers(dep)
    summary_path = run_dir / "replay" / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StartError(f"replay wrote no readable {summary_path}: {e}") from None
    return write_result(arm, run_dir, summary, ratios, overall)


#: The simulated run's start (Unix seconds), written to its start file: a fixed time
#: keeps a simulated run deterministic.
SIM_EPOCH = 1_000_000_000.0


class FixedPorts(PortAllocator):
    """A simulated arm's addresses (127.0.0.1:20000, :20001, … in the order asked): the
    simulator binds none, and its folder comes out the same on every run and machine."""

    def __init__(self, first: int = 20000) -> None:
        self.next = first

    def addr(self) -> str:
        self.next += 1
        return f"127.0.0.1:{self.next - 1}"


@dataclass
class SimArm:
    """One simulated arm, prepared (:func:`prepare_arm_sim`): its folder, the bin/sim
    command that fills it (run here by :func:`execute_arm_sim` or on a Dask worker) and
    every file the command reads; :func:`finish_arm_sim` reads the results."""

    arm: Arm
    run_dir: Path
    args: list[str]
    inputs: list[Path]

    @property
    def shown(self) -> str:
        """The command as sim.log's first line shows it (after "$ ")."""
        return " ".join(a if " " not in a else repr(a) for a in self.args)


def prepare_arm_sim(exp: Experiment, arm: Arm, out_dir: Path, trace: Path | Generated, scenario: Path | None,
                    calibration: Path | None = None, sample: float | None = None, full: bool = False) -> SimArm:
    """Write the arm's folder (topology, start file), check the scenario against the
    topology, and build bin/sim's command line."""
    policy = arm.name
    run_dir = out_dir / policy
    if run_dir.exists():
        raise ExperimentError(f"{run_dir} already exists; choose another --out")
    run_dir.mkdir(parents=True)
    topo_path = run_dir / "topology.yaml"
    run = run_block(exp, arm, run_dir, trace, scenario)
    doc = build_topology(exp, arm, FixedPorts(), run=run)
    topo_path.write_text(dump_yaml(doc, sort_keys=False))
    (run_dir / RUN_START).write_text(f"{SIM_EPOCH:.6f}\n")
    if scenario is not None:
        check_scenario(scenario, topo_path, exp.duration)
    inputs = [topo_path, run_dir / RUN_START]
    if "oracle" in run:
        inputs.append(Path(run["oracle"]))
    source = ["--synth", " ".join(trace)] if isinstance(trace, list) else ["--trace", str(trace)]
    if not isinstance(trace, list):
        inputs.append(Path(trace))
    args = [str(go_bin("sim")), "arm", "--topology", str(topo_path), *source, "--out", str(run_dir),
            *slo_flags(exp), "--controller", " ".join(controller_cmd())]
    if scenario is not None:
        args += ["--scenario", str(scenario)]
        inputs.append(Path(scenario))
    if calibration is not None:
        args += ["--calibration", str(calibration)]
        inputs.append(Path(calibration))
    if sample is None and not full:
        sample = exp.sim.sample
    if sample is not None:
        args += ["--sample", f"{sample:g}"]
    if isinstance(trace, list) and sample is not None and not full:
        if exp.sim.request_sample is not None:
            args += ["--request-sample", f"{exp.sim.request_sample:g}"]
        if exp.sim.apps is not None:
            args += ["--apps", str(exp.sim.apps)]
    return SimArm(arm, run_dir, args, inputs)


def execute_arm_sim(p: SimArm) -> None:
    """Run a prepared arm's bin/sim here, its output into sim.log."""
    log.info("policy %s: simulating (%s)", p.arm.name, " ".join(p.args))
    # The log is written as the run goes: a long run's progress lines can be followed.
    with (p.run_dir / "sim.log").open("w") as out:
        out.write("$ " + p.shown + "\n")
        out.flush()
        res = subprocess.run(p.args, stdout=out, stderr=subprocess.STDOUT)
    check_sim_status(p, res.returncode)


def check_sim_status(p: SimArm, returncode: int) -> None:
    """StartError with the end of sim.log when bin/sim failed."""
    if returncode != 0:
        said = (p.run_dir / "sim.log").read_text().split("\n", 1)[-1].strip()
        raise StartError(f"bin/sim failed with status {returncode} for arm {p.arm.name}:\n{said[-3000:]}")


def finish_arm_sim(p: SimArm) -> RunResult:
    """Read a simulated arm's results (sim.json, the summary) and write result.json."""
    sim = json.loads((p.run_dir / "sim.json").read_text())
    summary = json.loads((p.run_dir / "replay" / "summary.json").read_text())
    return write_result(p.arm, p.run_dir, summary, sim.get("hit_ratio", {}), sim.get("overall_hit_ratio"), engine="sim")


def run_arm_sim(exp: Experiment, arm: Arm, out_dir: Path, trace: Path | Generated, scenario: Path | None,
                calibration: Path | None = None, sample: float | None = None, full: bool = False) -> RunResult:
    """Simulate one arm with bin/sim (docs/simulator.md): the same topology, trace,
    scenario, SLO settings and results folder as :func:`run_arm`, in simulated time."""
    p = prepare_arm_sim(exp, arm, out_dir, trace, scenario, calibration, sample, full)
    execute_arm_sim(p)
    return finish_arm_sim(p)
