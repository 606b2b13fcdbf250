"""The controller loop against real memcached processes, without an RBC server (the
RBC address is a closed port, so GetRBC really fails)."""
from __future__ import annotations

import threading
from pathlib import Path

from conftest import wait_tcp
from mcdata import client, fill, limit_mb, malloced, stats

from robinhood_common.contract import read_yaml
from robinhood_controller.config import resolve_document
from robinhood_controller.controller import Controller
from robinhood_controller.metrics import Metrics
from robinhood_controller.plan import MIB
from robinhood_controller.timeline import TimelineWriter, read_timeline


def _topology(addrs: dict[str, str], budget: int, rbc: str, controller: str, initial: dict[str, int] | None = None) -> str:
    initial = initial or {}
    parts = ", ".join(
        f"{n}: {{addr: {a}, initial_mb: {initial[n]}}}" if n in initial else f"{n}: {a}" for n, a in addrs.items()
    )
    backends = "\n".join(
        f"  - {{id: {i}, name: {n}, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}" for i, n in enumerate(addrs)
    )
    return f"""
rbc_server: {{grpc: {rbc}}}
backends:
{backends}
app_servers:
  - id: app0
    http: 127.0.0.1:1
    cache_mode: partitioned
    cache_budget_mb: {budget}
    partitions: {{{parts}}}
    controller: {controller}
"""


def _controller(text: str, **kw) -> Controller:  # type: ignore[no-untyped-def]
    return Controller(resolve_document(read_yaml(text), "app0"), **kw)


def test_rbc_down_keeps_allocation_and_level_triggered_repair(procs, free_address) -> None:
    addrs = {n: procs.memcached(32)[1] for n in "abc"}
    for a in addrs.values():
        fill(a, 40)
    text = _topology(addrs, 96, free_address(), "{min_partition_mb: 16, interval: 100ms, rbc_timeout: 200ms}")
    metrics = Metrics("app0", "robinhood", list(addrs))
    ctl = _controller(text, metrics=metrics)
    try:
        ctl.start()
        assert stats(addrs["a"], "settings")["slab_automove"] is False
        r = ctl.tick()
        assert r.rbc is None and "rbc unavailable: targets kept" in r.notes
        assert r.targets == {n: 32 * MIB for n in "abc"}
        assert r.outcome is not None and r.outcome.changed == {}
        # Someone changes a limit behind the controller's back: the next tick repairs it.
        c = client(addrs["b"])
        c.cache_memlimit(20)
        c.close()
        r = ctl.tick()
        assert r.outcome is not None and r.outcome.changed == {"b": (20, 32)}
        assert [limit_mb(a) for a in addrs.values()] == [32, 32, 32]
        value = metrics.registry.get_sample_value
        assert value("controller_errors_total", {"kind": "rbc_unavailable"}) == 2
        assert value("controller_ticks_total") == 2
        assert value("controller_partition_limit_bytes", {"partition": "b"}) == 32 * MIB
        assert value("controller_partition_up", {"partition": "c"}) == 1
    finally:
        ctl.close()


def test_static_policy_drives_to_the_configured_allocation(procs, tmp_path: Path) -> None:
    addrs = {n: procs.memcached(32)[1] for n in "abc"}
    for a in addrs.values():
        fill(a, 40)
    text = _topology(addrs, 96, "", "{policy: static, min_partition_mb: 16, interval: 100ms, shrink_budget: 100ms}",
                     initial={"a": 56})
    tl = TimelineWriter(tmp_path / "t.jsonl")
    ctl = _controller(text, timeline=tl)
    try:
        ctl.start()
        for _ in range(20):
            r = ctl.tick()
            if r.outcome is not None and not r.outcome.pending and not r.outcome.deferred_mb and not r.outcome.changed:
                break
        assert {n: limit_mb(a) for n, a in addrs.items()} == {"a": 56, "b": 20, "c": 20}
        assert malloced(addrs["b"]) <= 20 * MIB and malloced(addrs["c"]) <= 20 * MIB
    finally:
        ctl.close()
        tl.close()
    recs = read_timeline(tmp_path / "t.jsonl")
    assert recs[0]["policy"] == "static" and recs[0]["rbc_ok"] is False
    p = recs[0]["partitions"]["a"]
    assert set(p) >= {"target_bytes", "limit_bytes", "malloced_bytes", "used_bytes", "rbc", "eligible", "pages_moved"}
    assert p["target_bytes"] == 56 * MIB
    assert sum(r["pages_moved"] for r in recs) >= 2 * (32 - 20) - 2


def test_a_restarted_controller_adopts_what_it_left(procs) -> None:
    addrs = {n: procs.memcached(32)[1] for n in "ab"}
    static = _topology(addrs, 64, "", "{policy: static, min_partition_mb: 16}", initial={"a": 40})
    ctl = _controller(static)
    ctl.start()
    ctl.tick()
    ctl.close()
    assert (limit_mb(addrs["a"]), limit_mb(addrs["b"])) == (40, 24)
    # A robinhood controller starting now adopts 40/24 and, without RBC, keeps it.
    rh = _topology(addrs, 64, "127.0.0.1:1", "{min_partition_mb: 16, rbc_timeout: 100ms}")
    ctl = _controller(rh)
    try:
        ctl.start()
        r = ctl.tick()
        assert r.targets == {"a": 40 * MIB, "b": 24 * MIB}
        assert r.outcome is not None and r.outcome.changed == {}
    finally:
        ctl.close()


def test_oversubscribed_instances_are_brought_within_the_budget(procs) -> None:
    # Three instances started with -m 64 for a 96 MB budget: adopt scales them to 32 each.
    addrs = {n: procs.memcached(64)[1] for n in "abc"}
    for a in addrs.values():
        fill(a, 70)
    ctl = _controller(_topology(addrs, 96, "127.0.0.1:1", "{min_partition_mb: 16, rbc_timeout: 100ms, interval: 10s}"))
    try:
        ctl.start()
        r = ctl.tick()
        assert r.outcome is not None
        assert {n: limit_mb(a) for n, a in addrs.items()} == {"a": 32, "b": 32, "c": 32}
        assert all(malloced(a) <= 32 * MIB for a in addrs.values())
    finally:
        ctl.close()


def test_dry_run_changes_nothing(procs) -> None:
    addrs = {n: procs.memcached(32)[1] for n in "ab"}
    text = _topology(addrs, 64, "", "{policy: static, min_partition_mb: 16, dry_run: true}", initial={"a": 48})
    ctl = _controller(text)
    try:
        ctl.start()
        r = ctl.tick()
    finally:
        ctl.close()
    assert r.outcome is None and r.limits_planned == {"a": 48, "b": 16}
    assert (limit_mb(addrs["a"]), limit_mb(addrs["b"])) == (32, 32)
    assert stats(addrs["a"], "settings")["slab_automove"] is True


def test_a_partition_lost_mid_run_does_not_stop_the_others(procs) -> None:
    pa, a = procs.memcached(32)
    _, b = procs.memcached(32)
    text = _topology({"a": a, "b": b}, 64, "", "{policy: static, min_partition_mb: 16}", initial={"b": 40})
    ctl = _controller(text)
    try:
        ctl.start()
        ctl.tick()
        assert (limit_mb(a), limit_mb(b)) == (24, 40)
        procs.stop(pa)
        r = ctl.tick()
        assert r.stats["a"] is None and r.stats["b"] is not None
        assert r.outcome is not None and "a" not in r.outcome.limits_mb and r.outcome.limits_mb["b"] == 40
        # a comes back with its command-line limit (-m 32) and is reconciled.
        port = a.rpartition(":")[2]
        procs.start([*pa.args[:4], port, *pa.args[5:]], name="memcached-restarted")
        wait_tcp(a)
        r = ctl.tick()
        assert r.outcome is not None and r.outcome.changed == {"a": (32, 24)}
        assert (limit_mb(a), limit_mb(b)) == (24, 40)
        assert stats(a, "settings")["slab_automove"] is False
    finally:
        ctl.close()


def test_run_loop_stops_on_request(procs) -> None:
    addrs = {n: procs.memcached(16)[1] for n in "ab"}
    ctl = _controller(_topology(addrs, 32, "", "{policy: static, min_partition_mb: 16, interval: 50ms}"))
    stop = threading.Event()
    try:
        ctl.start()
        t = threading.Thread(target=ctl.run, args=(stop,))
        t.start()
        while ctl.ticks < 3:
            stop.wait(0.02)
        stop.set()
        t.join(timeout=10)
        assert not t.is_alive()
    finally:
        ctl.close()


def test_a_failing_tick_is_counted_and_the_next_one_runs(procs, tmp_path: Path) -> None:
    """An unexpected error in a tick (here: the timeline's disk is gone) is logged and
    counted by kind; the loop goes on and the following ticks work."""
    addrs = {n: procs.memcached(16)[1] for n in "ab"}
    metrics = Metrics("app0", "static", list(addrs))
    ctl = _controller(_topology(addrs, 32, "", "{policy: static, min_partition_mb: 16, interval: 50ms}"),
                      metrics=metrics)
    real = ctl.tick
    calls = {"n": 0}

    def flaky():  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] in (2, 3):
            raise OSError(28, "No space left on device")
        return real()

    ctl.tick = flaky  # type: ignore[method-assign]
    try:
        ctl.start()
        ctl.run(threading.Event(), max_ticks=6)
        assert calls["n"] == 6 and ctl.ticks == 4, "two ticks failed, the loop kept going"
        assert metrics.registry.get_sample_value("controller_tick_errors_total", {"kind": "OSError"}) == 2
        assert metrics.registry.get_sample_value("controller_ticks_total") == 4
    finally:
        ctl.close()


def test_memcached_automove_turned_on_behind_the_controller_is_turned_off(procs) -> None:
    addrs = {n: procs.memcached(16)[1] for n in "ab"}
    metrics = Metrics("app0", "static", list(addrs))
    ctl = _controller(_topology(addrs, 32, "", "{policy: static, min_partition_mb: 16}"), metrics=metrics)
    try:
        ctl.start()
        ctl.tick()
        c = client(addrs["a"])
        assert c.raw_command("slabs automove 1") == b"OK"
        c.close()
        assert stats(addrs["a"], "settings")["slab_automove"] is True
        ctl.tick()
        assert stats(addrs["a"], "settings")["slab_automove"] is False
        assert stats(addrs["b"], "settings")["slab_automove"] is False
        assert metrics.registry.get_sample_value("controller_errors_total", {"kind": "automove_on"}) == 1
        ctl.tick()  # off stays off: nothing more is counted
        assert metrics.registry.get_sample_value("controller_errors_total", {"kind": "automove_on"}) == 1
    finally:
        ctl.close()


def test_a_stuck_shrink_is_counted_once_per_episode(procs) -> None:
    # b holds one page in each of about 22 slab classes; the static plan gives it 8 MB, which
    # memcached cannot reach: the shrink is stuck on every tick, counted once.
    addrs = {n: procs.memcached(32)[1] for n in "ab"}
    c = client(addrs["b"])
    for i in range(25):
        c.set(f"s{i}", b"z" * int(100 * 1.25**i), noreply=False)
    text = _topology(addrs, 64, "", "{policy: static, min_partition_mb: 8, interval: 1m, shrink_budget: 200ms}",
                     initial={"a": 56})
    m = Metrics("app0", "static", ["a", "b"])
    ctl = _controller(text, metrics=m)
    try:
        ctl.start()
        for _ in range(3):
            r = ctl.tick()
            assert r.outcome is not None and r.outcome.stuck == ["b"]
        assert m.registry.get_sample_value("controller_errors_total", {"kind": "shrink_stuck"}) == 1
        msg = next(msg for n, k, msg in r.outcome.errors if k == "shrink_stuck")
        n = sum(1 for k in stats(addrs["b"], "slabs") if k.endswith(":total_pages"))
        assert n >= 20 and f"needs a floor of {n} MB (raise min_partition_mb to at least {n})" in msg
        # a is held back by what b could not give up: the budget is never exceeded.
        assert limit_mb(addrs["a"]) * MIB + malloced(addrs["b"]) <= 64 * MIB
    finally:
        ctl.close()
