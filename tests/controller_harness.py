"""What the controller's end-to-end tests share: one app server's partitions (memcached
or Redis) read and written as an app server would, a feeder of request records that
blame one backend, a monitor of the sum of the limits, and the controller process.

Used by test_controller_integration.py (memcached partitions), test_controller_redis.py
(Redis and memcached in one budget) and test_convergence.py (several app servers).
"""
from __future__ import annotations

import json
import random
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import redis
from pymemcache.client.base import Client
from redis.driver_info import DriverInfo
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

MIB = 1 << 20
BUDGET_MB, FLOOR_MB, START_MB = 96, 16, 32
IDS = {"a": 0, "b": 1, "c": 2}


def _client(addr: str) -> Client:
    host, _, port = addr.rpartition(":")
    return Client((host, int(port)), connect_timeout=1, timeout=2, no_delay=True)


def _stat(addr: str, key: str, *args: str) -> int:
    c = _client(addr)
    try:
        return int(c.stats(*args)[key.encode()])
    finally:
        c.close()


def _redis(addr: str) -> redis.Redis:
    host, _, port = addr.rpartition(":")
    return redis.Redis(host=host, port=int(port), socket_timeout=2, socket_connect_timeout=2, protocol=2,
                       driver_info=DriverInfo(name=None, lib_version=None))


def _redis_info(addr: str, key: str) -> int:
    r = _redis(addr)
    try:
        return int(r.info("memory")[key])
    finally:
        r.close()


class Partitions:
    """One app server's partitions, name → address; the names in `redis` are Redis
    instances, the others memcached."""

    def __init__(self, addrs: dict[str, str], redis_names: Iterable[str] = ()) -> None:
        self.addrs = addrs
        self.redis = frozenset(redis_names)

    def limit_bytes(self, name: str) -> int:
        """The limit the store itself holds: maxmemory or limit_maxbytes."""
        addr = self.addrs[name]
        return _redis_info(addr, "maxmemory") if name in self.redis else _stat(addr, "limit_maxbytes")

    def limits_mb(self) -> dict[str, int]:
        return {n: self.limit_bytes(n) >> 20 for n in self.addrs}

    def held_bytes(self, name: str) -> int:
        """The memory the store holds: used_memory or the slab pages (total_malloced)."""
        addr = self.addrs[name]
        return _redis_info(addr, "used_memory") if name in self.redis else _stat(addr, "total_malloced", "slabs")

    def write(self, name: str, keys: Iterable[str], value: bytes = b"v" * 1000) -> None:
        """Store value under every key, and wait until the store has taken them."""
        addr = self.addrs[name]
        if name in self.redis:
            r = _redis(addr)
            try:
                p = r.pipeline(transaction=False)
                for k in keys:
                    p.set(k, value)
                p.execute()
            finally:
                r.close()
            return
        c = _client(addr)
        try:
            c.set_many({k: value for k in keys}, noreply=True)
            c.get("sync")  # answered after every set before it
        finally:
            c.close()


class Writer:
    """Keeps every partition full, as an app server filling its cache would."""

    def __init__(self, parts: Partitions | dict[str, str]) -> None:
        self.parts = parts if isinstance(parts, Partitions) else Partitions(parts)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            for n in self.parts.addrs:
                try:
                    self.parts.write(n, (f"{n}{i + j}" for j in range(300)))
                except Exception:  # noqa: BLE001 - a partition may be down on purpose
                    pass
            i += 300
            self.stop.wait(0.01)

    def fill(self, mb: int) -> None:
        """Fill every partition with mb MB (of 1,000-byte values) before the controller starts."""
        for n in self.parts.addrs:
            for k in range(0, mb * 1000, 500):
                self.parts.write(n, (f"fill{n}{k + j}" for j in range(500)))


class Feeder:
    """Streams request records to the RBC server: the slowest requests are blocked by
    the backend named in `blamed`, the others by the remaining backends."""

    def __init__(self, addr: str) -> None:
        self.blamed = "a"
        self.stop = threading.Event()
        self.channel = grpc.insecure_channel(addr)
        self.stub = rbc_pb2_grpc.RBCServiceStub(self.channel)
        self.thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.error: str | None = None

    def _batches(self) -> Iterator[rbc_pb2.ReportRequest]:
        rnd = random.Random(7)
        while not self.stop.is_set():
            lat, blk = [], []
            for _ in range(400):
                ms = rnd.uniform(5, 50)
                if rnd.random() < 0.05:
                    ms = rnd.uniform(200, 400)
                    b = IDS[self.blamed]
                else:
                    b = rnd.choice([i for n, i in IDS.items() if n != self.blamed])
                lat.append(int(ms * 1000))
                blk.append(b)
            yield rbc_pb2.ReportRequest(app_server_id="app0", latency_us=lat, blocking_backend=blk)
            self.stop.wait(0.1)

    def _run(self) -> None:
        try:
            self.stub.Report(self._batches())
        except grpc.RpcError as e:  # the RBC server is stopped on purpose
            self.error = str(e.code())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.channel.close()


class LimitMonitor:
    """Samples every partition's limit to check the sum never exceeds the budget while
    the controller moves space."""

    def __init__(self, parts: Partitions) -> None:
        self.parts = parts
        self.max_sum = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                total = sum(self.parts.limit_bytes(n) for n in self.parts.addrs)
            except Exception:  # noqa: BLE001 - a partition may be down on purpose
                continue
            self.max_sum = max(self.max_sum, total)
            self.samples += 1
            self.stop.wait(0.02)

    def finish(self, budget_bytes: int) -> None:
        self.stop.set()
        self.thread.join()
        assert self.samples > 20
        assert self.max_sum <= budget_bytes, "the sum of the limits exceeded the budget"


def topology(rbc_grpc: str, rbc_http: str, partitions: str) -> str:
    """One app server app0 with partitions a, b, c (a YAML flow mapping) of three kv
    backends, RobinHood with a 10% tax every 500 ms."""
    return f"""
rbc_server: {{grpc: {rbc_grpc}, http: {rbc_http}, window: 1s}}
backends:
  - {{id: 0, name: a, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}
  - {{id: 1, name: b, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}
  - {{id: 2, name: c, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}
app_servers:
  - id: app0
    http: 127.0.0.1:1
    cache_mode: partitioned
    cache_budget_mb: {BUDGET_MB}
    partitions: {partitions}
    controller:
      interval: 500ms
      policy: {{name: robinhood, tax: 0.1}}
      min_partition_mb: {FLOOR_MB}
      shrink_budget: 400ms
      rbc_timeout: 300ms
"""


def start_controller(procs: Any, topo: Path, timeline: Path, metrics_addr: str) -> Any:
    """The controller of app0, writing its timeline and serving its metrics."""
    return procs.start([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo,
                        "--app-server", "app0", "--timeline", timeline, "--metrics", metrics_addr],
                       name="controller")


def _timeline(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for(what: str, cond: Callable[[], bool], timeout: float, log: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n--- controller log (tail) ---\n{log()[-3000:]}")


def _metrics(addr: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
