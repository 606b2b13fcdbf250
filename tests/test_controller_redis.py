"""The controller end to end on Redis partitions: two real redis-servers and one
memcached as the partitions of one app server, the real RBC server fed with records
that blame one backend, and the controller process.

Checks Redis's own maxmemory and used_memory (and memcached's limit) against the plan
while space flows to the blamed partition; that the sum of the limits never exceeds the
budget; that a Redis restarted with another limit and a non-evicting policy is attached
again and reconciled; and that a policy changed behind the controller's back is repaired.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import redis
from redis.driver_info import DriverInfo
from test_controller_integration import IDS, Feeder, _metrics, _stat, _timeline, _wait_for

from conftest import wait_tcp

MIB = 1 << 20
BUDGET_MB, FLOOR_MB, START_MB = 96, 16, 32
REDIS = ("a", "b")  # c is a memcached


def _r(addr: str) -> redis.Redis:
    host, _, port = addr.rpartition(":")
    return redis.Redis(host=host, port=int(port), socket_timeout=2, socket_connect_timeout=2, protocol=2,
                       driver_info=DriverInfo(name=None, lib_version=None))


def _info(addr: str, key: str) -> int:
    r = _r(addr)
    try:
        return int(r.info("memory")[key])
    finally:
        r.close()


def _limit_mb(name: str, addr: str) -> int:
    return (_info(addr, "maxmemory") if name in REDIS else _stat(addr, "limit_maxbytes")) >> 20


class Writer:
    """Keeps the partitions full, as an app server filling its cache would."""

    def __init__(self, addrs: dict[str, str]) -> None:
        self.addrs = addrs
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def write(self, name: str, keys: range) -> None:
        value = b"v" * 1000
        if name in REDIS:
            r = _r(self.addrs[name])
            try:
                p = r.pipeline(transaction=False)
                for i in keys:
                    p.set(f"{name}{i}", value)
                p.execute()
            finally:
                r.close()
        else:
            from test_controller_integration import _client

            c = _client(self.addrs[name])
            try:
                c.set_many({f"{name}{i}": value for i in keys}, noreply=False)
            finally:
                c.close()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            for n in self.addrs:
                try:
                    self.write(n, range(i, i + 300))
                except Exception:  # noqa: BLE001 - a partition may be down on purpose
                    pass
            i += 300
            self.stop.wait(0.01)


class LimitMonitor:
    """Samples every partition's limit; the sum must never exceed the budget."""

    def __init__(self, addrs: dict[str, str]) -> None:
        self.addrs = addrs
        self.max_sum = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                total = sum(_limit_mb(n, a) for n, a in self.addrs.items())
            except Exception:  # noqa: BLE001 - a partition may be down on purpose
                continue
            self.max_sum = max(self.max_sum, total)
            self.samples += 1
            self.stop.wait(0.02)


@pytest.mark.timeout(180)
def test_controller_resizes_redis_partitions(procs, gobin, free_address, tmp_path: Path) -> None:
    started = {n: procs.redis(START_MB) for n in REDIS}
    started["c"] = procs.memcached(START_MB)
    addrs = {n: a for n, (_, a) in started.items()}
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
    partitions: {{a: {{redis: "{addrs['a']}"}}, b: {{redis: "{addrs['b']}"}}, c: {addrs['c']}}}
    controller:
      interval: 500ms
      policy: {{name: robinhood, tax: 0.1}}
      min_partition_mb: {FLOOR_MB}
      shrink_budget: 400ms
      rbc_timeout: 300ms
""")
    rbc = procs.start([gobin("rbcserver"), "--topology", str(topo)], name="rbcserver")
    wait_tcp(rbc_grpc, proc=rbc)
    writer = Writer(addrs)
    for n in addrs:
        writer.write(n, range(100_000, 100_000 + (START_MB + 8) * 1000))
    for n in REDIS:
        assert _info(addrs[n], "used_memory") >= (START_MB - 2) * MIB

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
        # 1. Space flows to a (Redis) until b (Redis) and c (memcached) sit at the floor.
        converged = {"a": BUDGET_MB - 2 * FLOOR_MB, "b": FLOOR_MB, "c": FLOOR_MB}
        _wait_for("a to collect the budget above the floors",
                  lambda: {n: _limit_mb(n, a) for n, a in addrs.items()} == converged, 60, log)
        _wait_for("b and c to free their memory",
                  lambda: _info(addrs["b"], "used_memory") <= FLOOR_MB * MIB + MIB
                  and _stat(addrs["c"], "total_malloced", "slabs") <= FLOOR_MB * MIB, 30, log)
        _wait_for("a to fill its new space",
                  lambda: _info(addrs["a"], "used_memory") >= (converged["a"] - 8) * MIB, 30, log)
        recs = _timeline(timeline)
        tax = int(START_MB * MIB * 0.1)
        assert recs[0]["partitions"]["a"]["target_bytes"] == START_MB * MIB + 2 * tax
        last = recs[-1]["partitions"]
        for n in IDS:
            assert last[n]["limit_bytes"] == last[n]["planned_limit_bytes"] == converged[n] * MIB

        # 2. Kill b and restart it below its target with a policy that never evicts:
        # attached again (allkeys-lru) and raised to its target within the budget.
        procs.stop(started["b"][0])
        _wait_for("the controller to notice b is gone",
                  lambda: any(not r["partitions"]["b"]["up"] for r in _timeline(timeline)), 10, log)
        procs.redis(8, addr=addrs["b"], policy="noeviction")
        _wait_for("b to be reconciled to its target", lambda: _limit_mb("b", addrs["b"]) == FLOOR_MB, 15, log)
        r = _r(addrs["b"])
        assert r.config_get("maxmemory-policy")["maxmemory-policy"] in ("allkeys-lru", b"allkeys-lru")
        # 3. A policy changed behind the controller's back is set again.
        r.config_set("maxmemory-policy", "noeviction")
        _wait_for("the eviction policy to be repaired",
                  lambda: r.config_get("maxmemory-policy")["maxmemory-policy"] in ("allkeys-lru", b"allkeys-lru"),
                  10, log)
        r.close()
        assert {n: _limit_mb(n, a) for n, a in addrs.items()} == converged

        monitor.stop.set()
        monitor.thread.join()
        assert monitor.samples > 20
        assert monitor.max_sum <= BUDGET_MB, "the sum of the limits exceeded the budget"
        m = _metrics(metrics_addr)
        assert m['controller_errors_total{kind="partition_unreachable"}'] >= 1
        assert m['controller_errors_total{kind="eviction_policy"}'] >= 1
        assert m['controller_partition_limit_bytes{partition="a"}'] == converged["a"] * MIB
        assert m['controller_pages_moved_total{partition="c"}'] >= START_MB - FLOOR_MB - 2
        assert m['controller_pages_moved_total{partition="b"}'] == 0
        assert "event=reattached partition=b" in log() and "store=redis" in log()
    finally:
        writer.stop.set()
        monitor.stop.set()
        feeder.close()
        writer.thread.join(timeout=5)
    assert procs.stop(ctl) == 0, procs.log(ctl)[-3000:]
