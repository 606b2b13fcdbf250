"""The controller end to end: three filled memcached partitions, the real RBC
server fed with records that blame one backend, and the controller process.

Checks memcached's own limit_maxbytes and total_malloced against the controller's plan
while space flows to the blamed partition and converges; that a memcached killed and
restarted with its command-line limit is reconciled; and that allocations hold when the
RBC server goes away.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from controller_harness import (BUDGET_MB, FLOOR_MB, IDS, MIB, START_MB, Feeder, LimitMonitor, Partitions, Writer,
                                _client, _metrics, _stat, _timeline, _wait_for, start_controller, topology)

from conftest import wait_tcp


@pytest.mark.timeout(180)
def test_controller_moves_space_to_the_blamed_backend(procs, gobin, free_address, tmp_path: Path) -> None:
    mcs = {n: procs.memcached(START_MB) for n in IDS}
    addrs = {n: a for n, (_, a) in mcs.items()}
    rbc_grpc, rbc_http = free_address(), free_address()
    topo = tmp_path / "topology.yaml"
    topo.write_text(topology(rbc_grpc, rbc_http, f"{{a: {addrs['a']}, b: {addrs['b']}, c: {addrs['c']}}}"))
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
    monitor = LimitMonitor(Partitions(addrs))
    monitor.thread.start()
    timeline = tmp_path / "timeline.jsonl"
    metrics_addr = free_address()
    ctl = start_controller(procs, topo, timeline, metrics_addr)
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
        monitor.finish(BUDGET_MB * MIB)
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
