"""The memcached driver and the resize mechanism against real memcached processes."""
from __future__ import annotations

from collections import Counter

import pytest
from mcdata import client, fill, limit_mb, malloced, stats

from robinhood_controller.memcached import MemcachedPartition
from robinhood_controller.partition import MemlimitError, Reassign, Unreachable, Unsupported
from robinhood_controller.plan import MIB
from robinhood_controller.resize import Target, reconcile


def _target(name: str, addr: str, desired: int) -> Target:
    d = MemcachedPartition(name, addr, timeout=2)
    return Target(name=name, driver=d, stats=d.read(), desired_mb=desired)


def test_attach_turns_automove_off_and_read_only_changes_nothing(procs) -> None:
    _, addr = procs.memcached(32)
    d = MemcachedPartition("a", addr)
    info = d.attach(read_only=True)
    assert not info.checked_memlimit
    assert stats(addr, "settings")["slab_automove"] is True  # untouched by a read-only attach
    info = d.attach()
    assert info.checked_memlimit and info.version.startswith("1.")
    assert stats(addr, "settings")["slab_automove"] is False
    assert limit_mb(addr) == 32
    d.close()


def test_attach_refuses_a_preallocated_instance(procs) -> None:
    _, addr = procs.memcached(48, extra=["-L"])  # -L needs at least 39 MB
    d = MemcachedPartition("a", addr)
    with pytest.raises(Unsupported, match=r"preallocated its memory \(-L\)"):
        d.attach()


def test_attach_refuses_disabled_slab_reassign(procs) -> None:
    _, addr = procs.memcached(16, extra=["-o", "no_slab_reassign"])
    with pytest.raises(Unsupported, match="slab reassignment is disabled"):
        MemcachedPartition("a", addr).attach(read_only=True)


def test_unreachable_partition(free_address) -> None:
    d = MemcachedPartition("gone", free_address(), timeout=0.5)
    with pytest.raises(Unreachable, match="partition gone"):
        d.read()


def test_memlimit_too_small_is_reported(procs) -> None:
    _, addr = procs.memcached(16)
    d = MemcachedPartition("a", addr)
    with pytest.raises(MemlimitError, match="MEMLIMIT_TOO_SMALL"):
        d.set_limit(4)
    assert limit_mb(addr) == 16
    # The connection is still usable afterwards.
    d.set_limit(12)
    assert limit_mb(addr) == 12


def test_read_reports_the_filled_state(procs) -> None:
    _, addr = procs.memcached(24)
    fill(addr, 40)
    st = MemcachedPartition("a", addr).read()
    assert st.limit_bytes == 24 * MIB
    assert 20 * MIB <= st.malloced_bytes <= 24 * MIB + 3 * MIB  # first page per class may exceed
    assert 0 < st.item_bytes < st.malloced_bytes
    assert st.items > 0 and st.evictions > 0
    assert sum(st.pages.values()) == st.malloced_bytes // MIB
    assert st.hit_ratio is not None


def test_shrink_really_frees_memory(procs) -> None:
    _, addr = procs.memcached(48)
    fill(addr, 70)
    before = malloced(addr)
    items_before = int(stats(addr)["curr_items"])
    assert before >= 46 * MIB
    out = reconcile([_target("a", addr, 20)], budget_mb=48, shrink_budget=30)
    assert out.errors == [] and out.pending == {}
    assert limit_mb(addr) == 20
    assert malloced(addr) <= 20 * MIB
    assert out.pages_moved["a"] >= (before - 20 * MIB) // MIB
    assert int(stats(addr)["curr_items"]) < items_before
    # Pages went from every class in proportion: all three value sizes still cached.
    pages = {k: v for k, v in stats(addr, "slabs").items() if k.endswith(":total_pages")}
    assert len(pages) >= 3 and all(int(v) >= 2 for v in pages.values())  # type: ignore[call-overload]
    # Still a working cache.
    c = client(addr)
    c.set("after", b"x" * 100)
    assert c.get("after") == b"x" * 100


def test_busy_answers_while_a_page_moves(procs) -> None:
    # ~7,000 small items per page: each move takes a while, and a reassign sent during it
    # is answered BUSY (about 190 of 200 here). Whether one lands during a move is timing:
    # a fresh memcached is tried again, at most three in all, before the test fails.
    seen = []
    for _ in range(3):
        _, addr = procs.memcached(32)
        fill(addr, 36, sizes=(100,))
        d = MemcachedPartition("a", addr)
        d.set_limit(16)
        answers = [d.reassign(-1) for _ in range(200)]
        assert answers[0] is Reassign.OK
        seen.append(Counter(a.name for a in answers))
        if Reassign.BUSY in answers:
            break
    else:
        pytest.fail(f"no BUSY in 200 reassigns on each of three memcacheds: {seen}")
    # reconcile backs off on BUSY and still finishes the shrink.
    out = reconcile([_target("a", addr, 16)], budget_mb=32, shrink_budget=30)
    assert out.pending == {} and malloced(addr) <= 16 * MIB


def test_grow_waits_for_freed_memory_and_shrinks_carry_over(procs) -> None:
    _, a = procs.memcached(40)
    _, b = procs.memcached(24)
    fill(a, 60)
    fill(b, 40, prefix="b")
    # Tick 1 with no time to move pages: a's limit is lowered, nothing is freed yet,
    # so b may not grow.
    out = reconcile([_target("a", a, 24), _target("b", b, 40)], budget_mb=64, shrink_budget=0)
    assert limit_mb(a) == 24 and malloced(a) > 24 * MIB
    assert limit_mb(b) == 24
    assert out.deferred_mb["b"] == 16 and out.pending["a"] > 0
    # The memory a really holds plus b's limit stays within the budget.
    assert malloced(a) + limit_mb(b) * MIB <= 64 * MIB
    # Tick 2: the shrink finishes (carried over) and b grows by what was freed.
    out = reconcile([_target("a", a, 24), _target("b", b, 40)], budget_mb=64, shrink_budget=30)
    assert out.pending == {} and out.deferred_mb == {}
    assert malloced(a) <= 24 * MIB
    assert (limit_mb(a), limit_mb(b)) == (24, 40)
    # Idempotent: a third reconcile changes nothing.
    out = reconcile([_target("a", a, 24), _target("b", b, 40)], budget_mb=64, shrink_budget=30)
    assert out.changed == {} and out.pages_moved == {}


def test_memlimit_errors_are_reported_not_retried(procs) -> None:
    _, a = procs.memcached(16)
    out = reconcile([_target("a", a, 4)], budget_mb=16, shrink_budget=5)
    assert [(n, k) for n, k, _ in out.errors] == [("a", "memlimit")]
    assert "MEMLIMIT_TOO_SMALL" in out.errors[0][2]
    assert limit_mb(a) == 16


def test_shrink_below_the_pinned_first_pages_is_stuck(procs) -> None:
    _, a = procs.memcached(32)
    # One item in each of many slab classes: every class holds exactly one page.
    sizes = tuple(int(100 * 1.25**i) for i in range(25))
    c = client(a)
    for i, s in enumerate(sizes):
        c.set(f"s{i}", b"z" * s, noreply=False)
    held = malloced(a)
    assert held >= 20 * MIB
    out = reconcile([_target("a", a, 8)], budget_mb=32, shrink_budget=30)
    assert out.stuck == ["a"]
    assert [k for _, k, _ in out.errors] == ["shrink_stuck"]
    assert limit_mb(a) == 8 and malloced(a) == held


def test_an_unreachable_partition_is_left_alone_and_counted_in_the_budget(procs, free_address) -> None:
    _, a = procs.memcached(32)
    gone = MemcachedPartition("gone", free_address(), timeout=0.5)
    targets = [
        _target("a", a, 48),
        Target(name="gone", driver=gone, stats=None, desired_mb=16, last_limit_mb=32),
    ]
    out = reconcile(targets, budget_mb=64, shrink_budget=1)
    # a may only grow into what the absent partition is not assumed to hold (max(16, 32)).
    assert limit_mb(a) == 32
    assert out.deferred_mb == {"a": 16}
    assert "gone" not in out.limits_mb


def _peer(answer: bytes | None):
    """A TCP peer on loopback that answers every read with ``answer`` (None: never
    answers, a hung memcached); returns its address and a stop function."""
    import os
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        conns = []
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            conns.append(c)

            def talk(c: socket.socket = c) -> None:
                try:
                    while not stop.is_set() and c.recv(4096):
                        if answer is not None:
                            c.sendall(answer or os.urandom(64))
                except OSError:
                    pass
            threading.Thread(target=talk, daemon=True).start()
        for c in conns:
            c.close()
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()

    def done() -> None:
        stop.set()
        t.join(timeout=2)
    return f"127.0.0.1:{srv.getsockname()[1]}", done


def test_a_peer_answering_garbage_is_a_protocol_error_not_a_timeout() -> None:
    from robinhood_controller.partition import ProtocolError

    addr, done = _peer(b"")  # random bytes, never a memcached line
    try:
        with pytest.raises(ProtocolError, match=r"stats: the peer answers bytes that are not memcached's protocol"):
            MemcachedPartition("a", addr, timeout=0.5).read()
    finally:
        done()
    addr, done = _peer(None)  # a hung peer: still a timeout, the partition unreachable
    try:
        with pytest.raises(Unreachable, match="timed out"):
            MemcachedPartition("a", addr, timeout=0.5).read()
    finally:
        done()
