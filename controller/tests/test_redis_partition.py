"""The Redis partition driver and the resize mechanism against real redis-server
processes, alone and next to a memcached partition."""
from __future__ import annotations

import time

import pytest
import redis
from redis.driver_info import DriverInfo
from mcdata import fill as mc_fill, limit_mb as mc_limit_mb, malloced as mc_malloced

from robinhood_controller.memcached import MemcachedPartition
from robinhood_controller.partition import ProtocolError, Unreachable, Unsupported, open_partition
from robinhood_controller.plan import MIB
from robinhood_controller.redis_partition import RedisPartition
from robinhood_controller.resize import Target, reconcile


def _r(addr: str) -> redis.Redis:
    host, _, port = addr.rpartition(":")
    return redis.Redis(host=host, port=int(port), socket_timeout=5, protocol=2, driver_info=DriverInfo(name=None, lib_version=None))


def fill(addr: str, mb: float, size: int = 1000, prefix: str = "k") -> int:
    """Write about mb MB of values; past maxmemory Redis evicts (the cache ends up full)."""
    r = _r(addr)
    n = int(mb * MIB) // size
    value = b"v" * size
    for start in range(0, n, 1000):
        p = r.pipeline(transaction=False)
        for i in range(start, min(start + 1000, n)):
            p.set(f"{prefix}{i}", value)
        p.execute()
    r.close()
    return n


def info(addr: str) -> dict:
    r = _r(addr)
    try:
        return r.info()
    finally:
        r.close()


def policy(addr: str) -> str:
    r = _r(addr)
    try:
        v = r.config_get("maxmemory-policy")["maxmemory-policy"]
        return v.decode() if isinstance(v, bytes) else v
    finally:
        r.close()


def _target(name: str, d, desired: int) -> Target:
    return Target(name=name, driver=d, stats=d.read(), desired_mb=desired)


def test_open_partition_picks_the_driver() -> None:
    assert isinstance(open_partition("a", "redis", "127.0.0.1:1"), RedisPartition)
    assert isinstance(open_partition("a", "memcached", "127.0.0.1:1"), MemcachedPartition)
    with pytest.raises(ValueError, match="unknown store 'mongo'"):
        open_partition("a", "mongo", "127.0.0.1:1")


def test_attach_sets_an_eviction_policy_and_read_only_changes_nothing(procs) -> None:
    _, addr = procs.redis(32, policy="noeviction")
    d = RedisPartition("a", addr)
    info_ro = d.attach(read_only=True)
    assert not info_ro.checked_memlimit and info_ro.took_over == "maxmemory-policy=noeviction"
    assert policy(addr) == "noeviction"
    got = d.attach()
    assert got.checked_memlimit and got.version.startswith("7.") and got.pid == info(addr)["process_id"]
    assert policy(addr) == "allkeys-lru"
    assert info(addr)["maxmemory"] == 32 * MIB  # the probe changed nothing
    # release puts back the policy attach found (run --restore-settings).
    assert d.release(got.took_over) == "maxmemory-policy=noeviction" and policy(addr) == "noeviction"
    assert d.release("maxmemory-policy=allkeys-lfu") is None  # an allkeys policy was never changed
    d.close()


def test_attach_keeps_an_allkeys_policy(procs) -> None:
    _, addr = procs.redis(16, policy="allkeys-lfu")
    RedisPartition("a", addr).attach()
    assert policy(addr) == "allkeys-lfu"


def test_repair_sets_the_policy_again(procs) -> None:
    _, addr = procs.redis(16)
    d = RedisPartition("a", addr)
    d.attach()
    assert d.repair() is None
    r = _r(addr)
    r.config_set("maxmemory-policy", "volatile-lru")
    r.close()
    kind, msg = d.repair()
    assert kind == "eviction_policy" and "volatile-lru" in msg
    assert policy(addr) == "allkeys-lru"


def test_config_disabled_is_unsupported(procs) -> None:
    _, addr = procs.redis(16, extra=["--rename-command", "CONFIG", ""])
    with pytest.raises(Unsupported, match="CONFIG command is disabled"):
        RedisPartition("a", addr).attach()


def test_unreachable_partition(free_address) -> None:
    d = RedisPartition("gone", free_address(), timeout=0.5)
    with pytest.raises(Unreachable, match=r"partition gone \(127\.0\.0\.1:\d+\): INFO"):
        d.read()
    with pytest.raises(Unreachable):
        d.set_limit(16)


def test_read_reports_the_filled_state(procs) -> None:
    _, addr = procs.redis(64)
    n = fill(addr, 20)
    r = _r(addr)
    assert r.get("k0") == b"v" * 1000 and r.get("nope") is None
    r.close()
    st = RedisPartition("a", addr).read()
    assert st.limit_bytes == 64 * MIB and st.items == n and st.evictions == 0
    assert 20 * MIB <= st.item_bytes <= st.malloced_bytes <= 40 * MIB
    assert (st.get_hits, st.get_misses) == (1, 1) and st.hit_ratio == 0.5
    assert st.pages == {} and not st.reassign_running


def test_shrink_frees_memory_and_grow_follows(procs) -> None:
    _, a = procs.redis(48)
    _, b = procs.redis(16)
    fill(a, 60)  # full: Redis has evicted down to its 48 MB
    fill(b, 20, prefix="b")
    da, db = RedisPartition("a", a), RedisPartition("b", b)
    for d in (da, db):
        d.attach()
    assert info(a)["used_memory"] > 40 * MIB
    out = reconcile([_target("a", da, 16), _target("b", db, 48)], budget_mb=64, shrink_budget=5)
    assert out.errors == [] and out.pending == {} and out.deferred_mb == {}
    assert out.changed == {"a": (48, 16), "b": (16, 48)}
    assert "a" in out.shrink_seconds and out.pages_moved == {}
    ia = info(a)
    # Done means within the driver's slack of the limit (Redis evicts in time-limited
    # rounds, so on a busy machine the last ones may still be running) ...
    assert ia["maxmemory"] == 16 * MIB and ia["evicted_keys"] > 0
    assert ia["used_memory"] <= 16 * MIB + RedisPartition.limit_slack
    # ... and Redis goes on to its limit by itself (our INFO's own connection may add a
    # few KB of client buffers).
    deadline = time.monotonic() + 30
    while info(a)["used_memory"] > 16 * MIB + (64 << 10):
        assert time.monotonic() < deadline, f"Redis stays at {info(a)['used_memory']} bytes above its 16 MiB limit"
        time.sleep(0.05)
    assert info(b)["maxmemory"] == 48 * MIB
    # Idempotent: a second reconcile changes nothing.
    out = reconcile([_target("a", da, 16), _target("b", db, 48)], budget_mb=64, shrink_budget=5)
    assert out.changed == {} and out.errors == []


def test_memcached_and_redis_partitions_share_one_budget(procs) -> None:
    """A shrinking memcached (slow: page moves) and a growing Redis: the Redis grows only
    by what memcached has really freed, and the limits never exceed the budget."""
    _, mc = procs.memcached(40)
    _, rd = procs.redis(24)
    mc_fill(mc, 60)
    fill(rd, 30)
    dm, dr = MemcachedPartition("m", mc, timeout=2), RedisPartition("r", rd)
    dm.attach()
    dr.attach()
    # No time to move pages: memcached's limit is lowered but nothing is freed yet.
    out = reconcile([_target("m", dm, 24), _target("r", dr, 40)], budget_mb=64, shrink_budget=0)
    assert mc_limit_mb(mc) == 24 and mc_malloced(mc) > 24 * MIB
    assert info(rd)["maxmemory"] == 24 * MIB and out.deferred_mb["r"] == 16
    assert mc_malloced(mc) + info(rd)["maxmemory"] <= 64 * MIB
    out = reconcile([_target("m", dm, 24), _target("r", dr, 40)], budget_mb=64, shrink_budget=30)
    assert out.pending == {} and out.deferred_mb == {}
    assert mc_limit_mb(mc) == 24 and info(rd)["maxmemory"] == 40 * MIB
    # And the other way round: Redis evicts by itself (no page moves), so memcached grows
    # within the same tick.
    out = reconcile([_target("m", dm, 48), _target("r", dr, 16)], budget_mb=64, shrink_budget=2)
    assert out.deferred_mb == {} and out.pending == {} and "r" in out.shrink_seconds
    assert mc_limit_mb(mc) == 48 and info(rd)["maxmemory"] == 16 * MIB
    assert info(rd)["used_memory"] <= 16 * MIB + (64 << 10)


def test_reassign_is_refused(procs) -> None:
    _, addr = procs.redis(16)
    with pytest.raises(ProtocolError, match="no slab pages"):
        RedisPartition("a", addr).reassign(-1)


def test_a_redis_with_a_password_or_an_acl_user(procs) -> None:
    _, addr = procs.redis(32, extra=["--requirepass", "s3cret"])
    d = open_partition("a", "redis", addr, timeout=2, password="s3cret")
    try:
        assert d.attach().checked_memlimit
        assert d.read().limit_bytes == 32 * MIB
        d.set_limit(24)
    finally:
        d.close()
    # An ACL user with what the controller needs (CONFIG, INFO), nothing else.
    admin = redis.Redis.from_url(f"redis://:s3cret@{addr}", protocol=2, driver_info=DriverInfo(name=None, lib_version=None))
    admin.execute_command("ACL", "SETUSER", "ctl", "on", ">ctlpw", "+config|set", "+config|get", "+info", "+ping")
    assert admin.config_get("maxmemory")["maxmemory"] in ("25165824", b"25165824")
    admin.close()
    d = open_partition("a", "redis", addr, timeout=2, username="ctl", password="ctlpw")
    try:
        d.set_limit(20)
        assert d.read().limit_bytes == 20 * MIB
    finally:
        d.close()
    # Without the password, or with the wrong one: refused, and the message names no password.
    for kw in ({}, {"password": "pw-X7q"}):
        d = open_partition("a", "redis", addr, timeout=2, **kw)
        try:
            with pytest.raises((Unreachable, ProtocolError, Unsupported)) as e:
                d.read()
            assert "s3cret" not in str(e.value) and "pw-X7q" not in str(e.value)
        finally:
            d.close()
