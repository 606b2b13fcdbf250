"""Start a whole topology as local processes: memcached partitions, backend replicas,
the RBC server, app servers and one controller per app server (plus Prometheus on
request). The topology file every component reads is generated here."""
from __future__ import annotations

import logging
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .experiment import CACHE_MODE_POLICIES, Experiment, format_duration
from .procs import PortAllocator, Proc, StartError, Supervisor, wait_http, wait_tcp

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]


def bin_dir() -> Path:
    """Where the Go binaries are (ROBINHOOD_BIN or the repository's bin/)."""
    return Path(os.environ.get("ROBINHOOD_BIN", REPO / "bin"))


def go_bin(name: str) -> Path:
    p = bin_dir() / name
    if not p.exists():
        raise StartError(f"{p} is missing: run 'make build' first")
    return p


def controller_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "robinhood-controller"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "robinhood_controller.cli"]


def cache_mode(policy: str) -> str:
    return CACHE_MODE_POLICIES.get(policy, "partitioned")


@dataclass
class Endpoints:
    """Every address of one deployment."""

    rbc_grpc: str = ""
    rbc_http: str = ""
    #: backend name -> list of (grpc, http) per replica
    backends: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: app server id -> http address
    app_http: dict[str, str] = field(default_factory=dict)
    #: app server id -> backend name (or "*shared*") -> memcached address
    caches: dict[str, dict[str, str]] = field(default_factory=dict)
    #: app server id -> controller metrics address
    controller_metrics: dict[str, str] = field(default_factory=dict)
    replay_metrics: str = ""
    prometheus: str = ""

    def scrape_targets(self) -> dict[str, list[str]]:
        """Prometheus jobs -> HTTP addresses serving /metrics."""
        jobs: dict[str, list[str]] = {
            "rbcserver": [self.rbc_http],
            "appserver": list(self.app_http.values()),
            "backend": [h for reps in self.backends.values() for _, h in reps],
        }
        if self.controller_metrics:
            jobs["controller"] = list(self.controller_metrics.values())
        if self.replay_metrics:
            jobs["replay"] = [self.replay_metrics]
        return jobs


def app_ids(exp: Experiment) -> list[str]:
    return [f"app{i}" for i in range(exp.cache.app_servers)]


def build_topology(exp: Experiment, policy: str, ports: PortAllocator) -> tuple[dict[str, Any], Endpoints]:
    """The topology document for `policy` and the addresses it uses."""
    ep = Endpoints(rbc_grpc=ports.addr(), rbc_http=ports.addr())
    mode = cache_mode(policy)
    backends = []
    for i, b in enumerate(exp.backends):
        reps = [(ports.addr(), ports.addr()) for _ in range(b.replicas)]
        ep.backends[b.name] = reps
        backends.append({"id": i, "name": b.name, "type": b.type,
                         "replicas": [{"grpc": g, "http": h} for g, h in reps]})
    alloc = exp.initial_allocation()
    apps = []
    for app in app_ids(exp):
        http = ports.addr()
        ep.app_http[app] = http
        entry: dict[str, Any] = {
            "id": app, "http": http, "cache_mode": mode, "cache_budget_mb": exp.cache.budget_mb,
            "request_timeout": format_duration(exp.request_timeout),
            "backend_timeout": format_duration(exp.backend_timeout),
        }
        if mode == "partitioned":
            parts = {b.name: ports.addr() for b in exp.backends}
            ep.caches[app] = parts
            entry["partitions"] = {n: {"addr": a, "initial_mb": alloc[n]} for n, a in parts.items()}
            metrics = ports.addr()
            ep.controller_metrics[app] = metrics
            ctl: dict[str, Any] = {
                "policy": policy, "interval": format_duration(exp.controller.interval),
                "tax": exp.controller.tax, "unused_gap": exp.controller.unused_gap, "metrics": metrics,
            }
            if exp.controller.min_partition_mb is not None:
                ctl["min_partition_mb"] = exp.controller.min_partition_mb
            ctl.update(exp.controller.extra)
            entry["controller"] = ctl
        elif mode == "shared":
            shared = ports.addr()
            ep.caches[app] = {"*shared*": shared}
            entry["shared_cache"] = shared
        apps.append(entry)
    topo = {"rbc_server": {"grpc": ep.rbc_grpc, "http": ep.rbc_http}, "backends": backends, "app_servers": apps}
    return topo, ep


@dataclass
class Deployment:
    """A running topology. Use as a context manager: leaving it stops every process."""

    exp: Experiment
    policy: str
    run_dir: Path
    data_dir: Path
    prometheus: bool = False
    #: A replayer will run against this deployment (its metrics address is reserved
    #: and scraped by Prometheus).
    replay: bool = False
    ports: PortAllocator = field(default_factory=PortAllocator)
    sup: Supervisor = field(init=False)
    topology_path: Path = field(init=False)
    ep: Endpoints = field(init=False)
    topology: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.sup = Supervisor(self.run_dir / "logs")
        self.topology, self.ep = build_topology(self.exp, self.policy, self.ports)
        if self.replay:
            self.ep.replay_metrics = self.ports.addr()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.topology_path = self.run_dir / "topology.yaml"
        self.topology_path.write_text(yaml.safe_dump(self.topology, sort_keys=False))

    def __enter__(self) -> "Deployment":
        try:
            self.start()
        except BaseException:
            self.sup.stop_all()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.sup.stop_all()

    # -- starting -------------------------------------------------------------------

    def start(self) -> None:
        exp = self.exp
        memcached = shutil.which("memcached")
        if memcached is None:
            raise StartError("memcached is not installed: run 'make deps'")
        alloc = exp.initial_allocation()
        waits: list[tuple[Proc, str]] = []
        for app, caches in self.ep.caches.items():
            for name, addr in caches.items():
                mb = exp.cache.budget_mb if name == "*shared*" else alloc[name]
                port = addr.rsplit(":", 1)[1]
                args = [memcached, "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", str(mb), *exp.cache.memcached_args]
                if os.geteuid() == 0:
                    args += ["-u", "root"]
                label = "shared" if name == "*shared*" else name
                waits.append((self.sup.start(f"memcached-{app}-{label}", args), addr))
        for b in exp.backends:
            for i, (grpc, http) in enumerate(self.ep.backends[b.name]):
                args = [go_bin("backend"), "--type", b.type, "--name", b.name,
                        "--grpc-addr", grpc, "--http-addr", http, "--seed", str(exp.seed + i),
                        *b.limits.flags(), *b.args]
                if b.type == "sql" and "--db" not in b.args:
                    args += ["--db", str(self.data_dir / f"{b.name}-{i}.db")]
                waits.append((self.sup.start(f"backend-{b.name}-{i}", args), f"http://{http}/healthz"))
        rbc = self.sup.start("rbcserver", [go_bin("rbcserver"), "--grpc-addr", self.ep.rbc_grpc,
                                           "--http-addr", self.ep.rbc_http,
                                           "--window", format_duration(exp.rbc.window),
                                           "--ring-size", str(exp.rbc.ring_size)])
        waits.append((rbc, f"http://{self.ep.rbc_http}/healthz"))
        self._wait(waits)
        waits = []
        for app, http in self.ep.app_http.items():
            p = self.sup.start(f"appserver-{app}", [go_bin("appserver"), "--topology", self.topology_path, "--id", app])
            waits.append((p, f"http://{http}/healthz"))
        for app, metrics in self.ep.controller_metrics.items():
            p = self.sup.start(f"controller-{app}", [
                *controller_cmd(), "run", "--topology", str(self.topology_path), "--app-server", app,
                "--timeline", str(self.run_dir / f"controller-{app}.jsonl"), "--wait"])
            waits.append((p, f"http://{metrics}/metrics"))
        self._wait(waits)
        if self.prometheus:
            from .prom import start_prometheus
            self.ep.prometheus = start_prometheus(self)

    def _wait(self, waits: list[tuple[Proc, str]]) -> None:
        for proc, target in waits:
            if target.startswith("http://"):
                wait_http(proc, target)
            else:
                wait_tcp(proc, target)
