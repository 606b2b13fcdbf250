"""The controller end to end (issue 3): three filled memcached partitions, the real RBC
server fed with records that blame one backend, and the controller process.

Checks memcached's own limit_maxbytes and total_malloced against the controller's plan
while space flows to the blamed partition and converges; that a memcached killed and
restarted with its command-line limit is reconciled; and that allocations hold when the
RBC server goes away.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from pymemcache.client.base import Client
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

from conftest import wait_tcp

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


class Writer:
    """Keeps every partition full, as an app server filling its cache would."""

    def __init__(self, addrs: dict[str, str]) -> None:
        self.addrs = addrs
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def _run(self) -> None:
        clients = {n: _client(a) for n, a in self.addrs.items()}
        value = b"v" * 1000
        i = 0
        while not self.stop.is_set():
            for n, c in clients.items():
                try:
                    c.set_many({f"{n}{i + j}": value for j in range(300)}, noreply=True)
                except Exception:  # noqa: BLE001 - a partition may be down on purpose
                    c.close()
            i += 300
            self.stop.wait(0.01)
        for c in clients.values():
            c.close()

    def fill(self, mb: int) -> None:
        """Fill every partition with mb MB before the controller starts."""
        for n, a in self.addrs.items():
            c = _client(a)
            for k in range(0, mb * 1000, 500):
                c.set_many({f"fill{n}{k + j}": b"f" * 1000 for j in range(500)}, noreply=True)
            c.get("sync")
            c.close()


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
    """Samples memcached's limit_maxbytes of every partition to check the sum never
    exceeds the budget while the controller moves space."""

    def __init__(self, addrs: dict[str, str]) -> None:
        self.addrs = addrs
        self.max_sum = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def _run(self) -> None:
        clients = {n: _client(a) for n, a in self.addrs.items()}
        while not self.stop.is_set():
            try:
                total = sum(int(c.stats()[b"limit_maxbytes"]) for c in clients.values())
            except Exception:  # noqa: BLE001
                continue
            self.max_sum = max(self.max_sum, total)
            self.samples += 1
            self.stop.wait(0.02)
        for c in clients.values():
            c.close()


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


@pytest.mark.timeout(180)
def test_controller_moves_space_to_the_blamed_backend(procs, gobin, free_address, tmp_path: Path) -> None:
    mcs = {n: procs.memcached(START_MB) for n in IDS}
    addrs = {n: a for n, (_, a) in mcs.items()}
    rbc_grpc, rbc_http = free_address(), free_address()
    topo = tmp_path / "topology.yaml"
    topo.write_text(f"""
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
    partitions: {{a: {addrs['a']}, b: {addrs['b']}, c: {addrs['c']}}}
    controller:
      interval: 500ms
      policy: {{name: robinhood, tax: 0.1}}
      min_partition_mb: {FLOOR_MB}
      shrink_budget: 400ms
      rbc_timeout: 300ms
""")
    # The RBC server starts from the same topology (its rbc_server block).
    rbc = procs.start([gobin("rbcserver"), "--topology", str(topo)], name="rbcserver")
    wait_tcp(rbc_grpc, proc=rbc)
    writer = Writer(addrs)
    writer.fill(START_MB + 8)
    for a in addrs.values():
        assert _stat(a, "total_malloced", "slabs") >= (START_MB - 2) * MIB

    feeder = Feeder(rbc_grpc)
    feeder.thread.start()
    writer.thread.start()
    monitor = LimitMonitor(addrs)
    monitor.thread.start()
    timeline = tmp_path / "timeline.jsonl"
    metrics_addr = free_address()
    ctl = procs.start([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo,
                       "--app-server", "app0", "--timeline", timeline, "--metrics", metrics_addr],
                      name="controller")
    log = lambda: procs.log(ctl)  # noqa: E731
    try:
        # 1. Space flows to a until b and c sit at the floor; memcached follows the plan.
        converged = {"a": BUDGET_MB - 2 * FLOOR_MB, "b": FLOOR_MB, "c": FLOOR_MB}
        _wait_for("a to collect the budget above the floors",
                  lambda: {n: _stat(a, "limit_maxbytes") >> 20 for n, a in addrs.items()} == converged,
                  60, log)
        _wait_for("b and c to free their memory",
                  lambda: all(_stat(addrs[n], "total_malloced", "slabs") <= FLOOR_MB * MIB for n in "bc"),
                  30, log)
        monitor.stop.set()
        monitor.thread.join()
        assert monitor.samples > 20
        assert monitor.max_sum <= BUDGET_MB * MIB, "the sum of the limits exceeded the budget"
        recs = _timeline(timeline)
        # Tick 1 adopts 32/32/32 MB and plans: b and c each pay 10%, a gets both taxes.
        tax = int(START_MB * MIB * 0.1)
        assert recs[0]["partitions"]["a"]["target_bytes"] == START_MB * MIB + 2 * tax
        assert recs[0]["partitions"]["b"]["target_bytes"] == START_MB * MIB - tax
        growth = [r["partitions"]["a"]["planned_limit_bytes"] for r in recs]
        assert growth == sorted(growth) and growth[-1] == converged["a"] * MIB
        assert all(r["rbc_ok"] for r in recs)
        assert any(r["partitions"]["a"]["rbc"] > 0 and r["partitions"]["b"]["rbc"] == 0 for r in recs)
        # Applied limits equal the planned ones whenever no growth was deferred.
        last = recs[-1]["partitions"]
        for n in IDS:
            assert last[n]["limit_bytes"] == last[n]["planned_limit_bytes"] == converged[n] * MIB
        # The filled partition a really uses its new space.
        _wait_for("a to fill its new space",
                  lambda: _stat(addrs["a"], "total_malloced", "slabs") >= (converged["a"] - 8) * MIB, 30, log)

        # 2. Kill b and restart it with its command-line limit: it is reconciled.
        procs.stop(mcs["b"][0])
        _wait_for("the controller to notice b is gone",
                  lambda: any(not r["partitions"]["b"]["up"] for r in _timeline(timeline)), 10, log)
        port = addrs["b"].rpartition(":")[2]
        args = [shutil.which("memcached"), "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", str(START_MB)]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        procs.start(args, name="memcached-restarted")
        wait_tcp(addrs["b"])
        _wait_for("b to be reconciled to its target",
                  lambda: _stat(addrs["b"], "limit_maxbytes") >> 20 == FLOOR_MB, 15, log)
        c = _client(addrs["b"])
        assert c.stats("settings")[b"slab_automove"] is False  # attached again
        c.close()
        assert {n: _stat(a, "limit_maxbytes") >> 20 for n, a in addrs.items()} == converged

        # 3. Blame c now; once space flows to it, stop the RBC server: allocations hold.
        feeder.blamed = "c"
        _wait_for("c to start growing",
                  lambda: _stat(addrs["c"], "limit_maxbytes") >> 20 > FLOOR_MB + 4, 30, log)
        procs.stop(rbc)
        _wait_for("ticks without RBC",
                  lambda: sum(not r["rbc_ok"] for r in _timeline(timeline)) >= 4, 20, log)
        recs = _timeline(timeline)
        first = next(i for i, r in enumerate(recs) if not r["rbc_ok"])
        held = {n: recs[first - 1]["partitions"][n]["target_bytes"] for n in IDS}
        for r in recs[first:]:
            assert not r["rbc_ok"]
            assert {n: r["partitions"][n]["target_bytes"] for n in IDS} == held
        planned = {n: recs[-1]["partitions"][n]["planned_limit_bytes"] >> 20 for n in IDS}
        _wait_for("memcached to hold the last planned limits",
                  lambda: {n: _stat(a, "limit_maxbytes") >> 20 for n, a in addrs.items()} == planned, 10, log)
        assert sum(planned.values()) == BUDGET_MB

        m = _metrics(metrics_addr)
        assert m['controller_errors_total{kind="partition_unreachable"}'] >= 1
        assert m['controller_errors_total{kind="rbc_unavailable"}'] + m['controller_errors_total{kind="rbc_timeout"}'] >= 4
        assert m['controller_pages_moved_total{partition="b"}'] >= START_MB - FLOOR_MB - 2
        assert m["controller_ticks_total"] >= len(recs)
        assert m['controller_partition_limit_bytes{partition="c"}'] == planned["c"] * MIB
        assert m['controller_partition_target_bytes{partition="a"}'] == held["a"]
        assert m['controller_partition_rbc{partition="c"}'] > 0
        assert any(k.startswith("controller_info{") and 'app_server="app0"' in k for k in m)
        assert m["controller_resize_seconds_count"] >= 2
    finally:
        writer.stop.set()
        monitor.stop.set()
        feeder.close()
        writer.thread.join(timeout=5)
    assert procs.stop(ctl) == 0, procs.log(ctl)[-3000:]
    assert "event=stopped" in procs.log(ctl)
