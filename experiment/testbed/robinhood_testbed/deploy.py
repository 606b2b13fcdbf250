"""Start a whole topology as local processes: memcached partitions, backend replicas,
the RBC server, app servers and one controller per partitioned app server (plus
Prometheus on request). Every component starts from the same topology file
(``--topology FILE --id ID``); the testbed writes that file from an experiment arm
(:func:`build_topology`, validated by the shared reader) or takes an existing one."""
from __future__ import annotations

import logging
import os
import shutil
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robinhood_common import topology as topo
from robinhood_common.contract import ConfigError, dump_yaml

from .experiment import Arm, Experiment, ExperimentError
from .procs import PortAllocator, Proc, StartError, Supervisor, wait_http, wait_tcp

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
LOCAL_HOSTS = ("127.0.0.1", "localhost", "", "[::1]")


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


def app_ids(exp: Experiment) -> list[str]:
    return [f"app{i}" for i in range(exp.cache.app_servers)]


def build_topology(exp: Experiment, arm: Arm, ports: PortAllocator | None = None,
                   service_names: bool = False, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """The topology document of one arm of an experiment, validated by the shared
    reader: every address from ``ports``, or with ``service_names`` a
    ``component:fixed-port`` name (for containers, where each component is a host).
    ``run`` (:func:`robinhood_testbed.run.run_block`) goes to every controller."""
    doc = exp.document
    ports = ports or PortAllocator()

    def addr(component: str, port: int) -> str:
        return f"{component}:{port}" if service_names else ports.addr()

    rbc = {k: v for k, v in doc["rbc_server"].items() if k not in ("grpc", "http")}
    topology: dict[str, Any] = {"rbc_server": {"grpc": addr("rbcserver", 7070), "http": addr("rbcserver", 7071), **rbc}}
    backends = []
    for i, b in enumerate(doc["backends"]):
        entry: dict[str, Any] = {
            "id": i, "name": b["name"], "type": b["type"], "seed": exp.seed,
            "replicas": [{"grpc": addr(f"{b['name']}-{r}", 7100), "http": addr(f"{b['name']}-{r}", 7200)}
                         for r in range(b["replicas"])],
            "limits": b["limits"],
        }
        for kind in ("kv", "sql", "compute"):
            if b.get(kind) is not None:
                entry[kind] = b[kind]
        backends.append(entry)
    topology["backends"] = backends
    apps = []
    for i, app in enumerate(app_ids(exp)):
        try:
            alloc = exp.initial_allocation(i)
        except ConfigError as e:
            raise ExperimentError(str(e)) from None
        entry = {
            "id": app, "http": addr(app, 8080), "cache_mode": arm.cache_mode, "cache_budget_mb": exp.cache.budget_mb,
            "request_timeout": doc["request_timeout"], "backend_timeout": doc["backend_timeout"],
            "dispatch": dict(arm.dispatch),
        }
        if arm.cache_mode == "partitioned":
            key, host, port = ("redis", "redis", 6379) if exp.cache.store == "redis" else ("addr", "mc", 11211)
            entry["partitions"] = {b["name"]: {key: addr(f"{host}-{app}-{b['name']}", port),
                                               "initial_mb": alloc[b["name"]]} for b in doc["backends"]}
            ctl = {k: v for k, v in doc["controller"].items() if k != "metrics"}
            ctl["policy"] = dict(arm.policy or {"name": "static"})
            ctl["metrics"] = "0.0.0.0:9100" if service_names else addr(f"controller-{app}", 9100)
            if run:
                ctl["run"] = dict(run)
            entry["controller"] = ctl
        elif arm.cache_mode == "shared":
            entry["shared_cache"] = addr(f"mc-{app}-shared", 11211)
        apps.append(entry)
    topology["app_servers"] = apps
    topology["slo"] = dict(doc["slo"])  # the objective the policies may read (PolicyContext.slo)
    try:
        topo.from_document(topology)
    except ConfigError as e:
        raise ExperimentError(f"arm {arm.name}: the topology it makes is invalid: {e}") from None
    return topology


@dataclass
class Endpoints:
    """Every address of one deployment, from its topology."""

    rbc_grpc: str = ""
    rbc_http: str = ""
    #: backend name -> list of (grpc, http) per replica
    backends: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: app server id -> http address
    app_http: dict[str, str] = field(default_factory=dict)
    #: app server id -> backend name (or "*shared*") -> cache address (memcached or Redis)
    caches: dict[str, dict[str, str]] = field(default_factory=dict)
    #: app server id -> backend name (or "*shared*") -> "memcached" or "redis"
    stores: dict[str, dict[str, str]] = field(default_factory=dict)
    #: app server id -> controller metrics address
    controller_metrics: dict[str, str] = field(default_factory=dict)
    replay_metrics: str = ""
    prometheus: str = ""

    @classmethod
    def of(cls, t: topo.Topology) -> Endpoints:
        ep = cls(rbc_grpc=t.rbc_server.grpc or "", rbc_http=t.rbc_server.http or "")
        for b in t.backends:
            ep.backends[b.name] = [(r.grpc, r.http or "") for r in b.replicas]
        for a in t.app_servers:
            ep.app_http[a.id] = a.http or ""
            if a.cache_mode == "partitioned":
                ep.caches[a.id] = {n: p.endpoint for n, p in a.partitions.items()}
                ep.stores[a.id] = {n: p.store for n, p in a.partitions.items()}
                if a.controller.metrics:
                    ep.controller_metrics[a.id] = a.controller.metrics
            elif a.cache_mode == "shared" and a.shared_cache:
                ep.caches[a.id] = {"*shared*": a.shared_cache}
                ep.stores[a.id] = {"*shared*": "memcached"}
        return ep

    def scrape_targets(self) -> dict[str, list[str]]:
        """Prometheus jobs -> HTTP addresses serving /metrics."""
        jobs: dict[str, list[str]] = {
            "rbcserver": [self.rbc_http] if self.rbc_http else [],
            "appserver": list(self.app_http.values()),
            "backend": [h for reps in self.backends.values() for _, h in reps if h],
        }
        if self.controller_metrics:
            jobs["controller"] = list(self.controller_metrics.values())
        if self.replay_metrics:
            jobs["replay"] = [self.replay_metrics]
        return jobs


def cache_command(store: str, port: str, mb: int, memcached_args: list[str]) -> list[str]:
    """The command line of one cache instance on 127.0.0.1:port with a limit of mb MB: a
    memcached, or a redis-server without persistence that evicts any key by LRU (the
    policy the controller keeps, docs/topology.md)."""
    exe = shutil.which("redis-server" if store == "redis" else "memcached")
    if exe is None:
        raise StartError(f"{'redis-server' if store == 'redis' else 'memcached'} is not installed: run 'make deps'")
    if store == "redis":
        return [exe, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
                "--maxmemory", f"{mb}mb", "--maxmemory-policy", "allkeys-lru"]
    args = [exe, "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", str(mb), *memcached_args]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    return args


def _local_port(addr: str, what: str) -> str:
    host, _, port = addr.rpartition(":")
    if host not in LOCAL_HOSTS:
        raise StartError(f"{what} {addr}: the testbed starts processes on this machine only (host must be 127.0.0.1)")
    return port


@dataclass
class Deployment:
    """A running topology. Use as a context manager: leaving it stops every process.

    ``topology`` is a topology document; ``only`` restricts the start to some
    components (app server ids — with their partitions and controller — backend
    names, or "rbc_server"); ``replay`` reserves an address for the replayer's metrics.
    """

    topology: dict[str, Any]
    run_dir: Path
    data_dir: Path
    memcached_args: list[str] = field(default_factory=lambda: ["-t", "1"])
    only: set[str] | None = None
    prometheus: bool = False
    replay: bool = False
    ports: PortAllocator = field(default_factory=PortAllocator)
    sup: Supervisor = field(init=False)
    topology_path: Path = field(init=False)
    typed: topo.Topology = field(init=False)
    ep: Endpoints = field(init=False)

    def __post_init__(self) -> None:
        try:
            self.typed = topo.from_document(self.topology)
        except ConfigError as e:
            raise ExperimentError(f"invalid topology: {e}") from None
        if self.only:
            known = {"rbc_server"} | {b.name for b in self.typed.backends} | {a.id for a in self.typed.app_servers}
            unknown = sorted(self.only - known)
            if unknown:
                raise ExperimentError(f"--id: {unknown[0]!r} is not rbc_server, a backend or an app server "
                                      f"(known: {', '.join(sorted(known))})")
        for b in self.typed.backends:  # what the testbed starts, it needs the whole of
            if self._wanted(b.name) and (b.type is None or not b.replicas):
                raise ExperimentError(f"backend {b.name!r} has no type or no replicas: the testbed starts every "
                                      "backend of the topology (an external backend can only be left out with --id)")
        for a in self.typed.app_servers:
            if self._wanted(a.id) and not a.http:
                raise ExperimentError(f"app server {a.id!r} has no http address: the testbed starts it "
                                      "(leave it out with --id)")
        self.sup = Supervisor(self.run_dir / "logs")
        self.ep = Endpoints.of(self.typed)
        if self.replay:
            self.ep.replay_metrics = self.ports.addr()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.topology_path = self.run_dir / "topology.yaml"
        self.topology_path.write_text(dump_yaml(self.topology, sort_keys=False))

    @property
    def backend_names(self) -> dict[int, str]:
        return self.typed.backend_ids()

    def __enter__(self) -> Deployment:
        try:
            self.start()
        except BaseException:
            self.sup.stop_all()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.sup.stop_all()

    def _wanted(self, component: str) -> bool:
        return self.only is None or component in self.only

    # -- starting -------------------------------------------------------------------

    def scheme(self) -> str:
        """The scheme of every HTTP listener the deployment starts: https with a tls block."""
        return "https" if self.typed.tls is not None else "http"

    def _ssl_context(self) -> ssl.SSLContext | None:
        """How the readiness checks verify the servers of a topology with a tls block:
        its CA, and under mutual TLS the certificate the clients present."""
        tls = self.typed.tls
        if tls is None:
            return None
        ctx = ssl.create_default_context(cafile=tls.ca)
        if tls.client_auth:
            ctx.load_cert_chain(tls.cert, tls.key)
        return ctx

    def start(self) -> None:
        t, topo_file = self.typed, str(self.topology_path)
        scheme = self.scheme()
        waits: list[tuple[Proc, str]] = []
        for a in t.app_servers:
            if not self._wanted(a.id):
                continue
            caches: dict[str, tuple[str, str, int]] = {}
            if a.cache_mode == "partitioned":
                # At the floor: the controller's first tick takes the configured allocation
                # (plan.adopt), and an instance that restarts comes back below its target, so
                # the limits never sum to more than the budget (docs/reliability.md).
                floor = a.controller.min_partition_mb
                caches = {n: (p.store, p.endpoint, floor) for n, p in a.partitions.items()}
            elif a.cache_mode == "shared" and a.shared_cache:
                caches = {"shared": ("memcached", a.shared_cache, a.cache_budget_mb)}
            for name, (store, addr, mb) in caches.items():
                port = _local_port(addr, f"app_servers {a.id} partition {name}")
                args = cache_command(store, port, mb, self.memcached_args)
                waits.append((self.sup.start(f"{store}-{a.id}-{name}", args), addr))
        for b in t.backends:
            if not self._wanted(b.name):
                continue
            for i, r in enumerate(b.replicas):
                _local_port(r.grpc, f"backend {b.name} replica {i}")
                args: list[Any] = [go_bin("backend"), "--topology", topo_file, "--id", b.name, "--replica", str(i)]
                if b.type == "sql" and (b.sql is None or b.sql.db is None):
                    args += ["--db", str(self.data_dir / f"{b.name}-{i}.db")]
                target = f"{scheme}://{r.http}/healthz" if r.http else r.grpc
                waits.append((self.sup.start(f"backend-{b.name}-{i}", args), target))
        if self._wanted("rbc_server") and t.rbc_server.grpc:
            rbc = self.sup.start("rbcserver", [go_bin("rbcserver"), "--topology", topo_file])
            waits.append((rbc, f"{scheme}://{t.rbc_server.http}/healthz" if t.rbc_server.http else t.rbc_server.grpc))
        self._wait(waits)
        waits = []
        for a in t.app_servers:
            if not self._wanted(a.id):
                continue
            p = self.sup.start(f"appserver-{a.id}", [go_bin("appserver"), "--topology", topo_file, "--id", a.id])
            waits.append((p, f"{scheme}://{a.http}/healthz"))
            if a.cache_mode == "partitioned":
                # ROBINHOOD_BIN: policies that run our tools (the oracle's tracegen) find them.
                p = self.sup.start(f"controller-{a.id}", [
                    *controller_cmd(), "run", "--topology", topo_file, "--id", a.id,
                    "--timeline", str(self.run_dir / f"controller-{a.id}.jsonl"), "--wait"],
                    env={"ROBINHOOD_BIN": str(bin_dir())})
                if a.controller.metrics:  # /metrics needs a token under auth: then the port is the sign
                    waits.append((p, a.controller.metrics if t.auth else f"{scheme}://{a.controller.metrics}/metrics"))
        self._wait(waits)
        self._wait_first_ticks()
        if self.prometheus:
            from .prom import start_prometheus
            self.ep.prometheus = start_prometheus(self)

    def _wait_first_ticks(self, timeout: float = 60.0) -> None:
        """Wait until every started controller has ticked once: its partitions, started
        at the floor, then have the configured allocation before any traffic."""
        pending = {a.id for a in self.typed.app_servers if a.cache_mode == "partitioned" and self._wanted(a.id)}
        deadline = time.monotonic() + timeout
        while pending:
            for aid in list(pending):
                tl = self.run_dir / f"controller-{aid}.jsonl"
                if tl.exists() and tl.stat().st_size > 0:
                    pending.discard(aid)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise StartError(f"controller of {', '.join(sorted(pending))} did not tick within {timeout:g}s "
                                 f"(see {self.run_dir / 'logs'})")
            time.sleep(0.05)

    def _wait(self, waits: list[tuple[Proc, str]]) -> None:
        ctx = self._ssl_context()
        for proc, target in waits:
            if target.startswith(("http://", "https://")):
                wait_http(proc, target, context=ctx)
            else:
                wait_tcp(proc, target)


def check_appserver(topology_path: Path, app_id: str) -> None:
    """Let bin/appserver validate its part of a topology (its dispatch policy's
    parameters among it) before anything starts."""
    import subprocess

    res = subprocess.run([str(go_bin("appserver")), "--topology", str(topology_path), "--id", app_id, "--check"],
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise ExperimentError((res.stderr or res.stdout).strip())
