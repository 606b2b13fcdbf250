"""The controller end to end on Redis partitions: two real redis-servers and one
memcached as the partitions of one app server, the real RBC server fed with records
that blame one backend, and the controller process.

Checks Redis's own maxmemory and used_memory (and memcached's limit) against the plan
while space flows to the blamed partition; that the sum of the limits never exceeds the
budget; that a Redis restarted with another limit and a non-evicting policy is attached
again and reconciled; and that a policy changed behind the controller's back is repaired.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from controller_harness import (BUDGET_MB, FLOOR_MB, IDS, MIB, START_MB, Feeder, LimitMonitor, Partitions, Writer,
                                _metrics, _redis, _timeline, _wait_for, start_controller, topology)

from conftest import wait_tcp

REDIS = ("a", "b")  # c is a memcached


@pytest.mark.timeout(180)
def test_controller_resizes_redis_partitions(procs, gobin, free_address, tmp_path: Path) -> None:
    started = {n: procs.redis(START_MB) for n in REDIS}
    started["c"] = procs.memcached(START_MB)
    addrs = {n: a for n, (_, a) in started.items()}
    parts = Partitions(addrs, REDIS)
    rbc_grpc, rbc_http = free_address(), free_address()
    topo = tmp_path / "topology.yaml"
    topo.write_text(topology(rbc_grpc, rbc_http,
                             f"{{a: {{redis: \"{addrs['a']}\"}}, b: {{redis: \"{addrs['b']}\"}}, c: {addrs['c']}}}"))
    rbc = procs.start([gobin("rbcserver"), "--topology", str(topo)], name="rbcserver")
    wait_tcp(rbc_grpc, proc=rbc)
    writer = Writer(parts)
    writer.fill(START_MB + 8)
    for n in addrs:
        assert parts.held_bytes(n) >= (START_MB - 2) * MIB

    feeder = Feeder(rbc_grpc)
    feeder.thread.start()
    writer.thread.start()
    monitor = LimitMonitor(parts)
    monitor.thread.start()
    timeline = tmp_path / "timeline.jsonl"
    metrics_addr = free_address()
    ctl = start_controller(procs, topo, timeline, metrics_addr)
    log = lambda: procs.log(ctl)  # noqa: E731
    try:
        # 1. Space flows to a (Redis) until b (Redis) and c (memcached) sit at the floor.
        converged = {"a": BUDGET_MB - 2 * FLOOR_MB, "b": FLOOR_MB, "c": FLOOR_MB}
        _wait_for("a to collect the budget above the floors",
                  lambda: parts.limits_mb() == converged, 60, log)
        _wait_for("b and c to free their memory",
                  lambda: parts.held_bytes("b") <= FLOOR_MB * MIB + MIB
                  and parts.held_bytes("c") <= FLOOR_MB * MIB, 30, log)
        _wait_for("a to fill its new space",
                  lambda: parts.held_bytes("a") >= (converged["a"] - 8) * MIB, 30, log)
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
        _wait_for("b to be reconciled to its target", lambda: parts.limit_bytes("b") >> 20 == FLOOR_MB, 15, log)
        r = _redis(addrs["b"])
        assert r.config_get("maxmemory-policy")["maxmemory-policy"] in ("allkeys-lru", b"allkeys-lru")
        # 3. A policy changed behind the controller's back is set again.
        r.config_set("maxmemory-policy", "noeviction")
        _wait_for("the eviction policy to be repaired",
                  lambda: r.config_get("maxmemory-policy")["maxmemory-policy"] in ("allkeys-lru", b"allkeys-lru"),
                  10, log)
        r.close()
        assert parts.limits_mb() == converged

        monitor.finish(BUDGET_MB * MIB)
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
