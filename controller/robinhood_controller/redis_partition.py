"""The Redis partition driver: one redis-py client per partition (docs/algorithms.md,
"Applying a plan", and docs/topology.md, "Redis partitions").

A Redis partition's limit is its `maxmemory` (CONFIG SET maxmemory, in whole MB like
memcached's cache_memlimit); the memory it holds is `used_memory` (INFO memory). Redis
frees memory itself: when maxmemory is lowered below used_memory it evicts keys by its
maxmemory-policy at once (Redis ≥ 6.2 keeps evicting in the background until it is below),
and while above it every write evicts first. So there are no page moves to drive; the
shrink step only waits for used_memory to fall under the limit. The policy must evict
any key (allkeys-*): the app server's values have no TTL, so volatile-* and noeviction
would never free anything and writes would fail. attach sets allkeys-lru unless an
allkeys-* policy is already set, and repair sets it back if someone changes it.

Commands used, verified against Redis 7.0: INFO, INFO memory,
CONFIG GET maxmemory-policy, CONFIG SET maxmemory, CONFIG SET maxmemory-policy.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.driver_info import DriverInfo
from redis.backoff import NoBackoff
from redis.retry import Retry

from .partition import AttachInfo, MemlimitError, PartitionStats, ProtocolError, Reassign, Unreachable, Unsupported

T = TypeVar("T")

MIB = 1 << 20

#: The policy attach and repair set: least recently used among all keys, memcached's rule.
POLICY = "allkeys-lru"
#: Policies that may evict any key: the controller leaves these as it finds them.
EVICTS_ANY_KEY = ("allkeys-lru", "allkeys-lfu", "allkeys-random")


class RedisPartition:
    """A managed Redis instance (the Partition protocol of partition.py)."""

    store = "redis"
    evicts_itself = True
    limit_slack = 2 * MIB

    def __init__(self, name: str, addr: str, timeout: float = 1.0, *,
                 username: str | None = None, password: str | None = None) -> None:
        host, _, port = addr.rpartition(":")
        self.name = name
        self.addr = addr
        # No retries (a failed call is reported and the next tick tries again), RESP2
        # and no CLIENT SETINFO, so any Redis ≥ 6.2 answers the same way.
        self._client = redis.Redis(
            host=host.strip("[]") or "127.0.0.1", port=int(port),
            socket_timeout=timeout, socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0), protocol=2, driver_info=DriverInfo(name=None, lib_version=None),
            max_connections=2, username=username, password=password,
        )

    def close(self) -> None:
        """Close the connections (the next call reconnects)."""
        try:
            self._client.connection_pool.disconnect()
        except Exception:  # noqa: BLE001 - closing a dead socket may fail; nothing to do
            pass

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            self.close()
            raise Unreachable(f"partition {self.name} ({self.addr}): {what}: {e or type(e).__name__}") from None
        except (redis.exceptions.NoPermissionError, redis.AuthenticationError) as e:
            raise Unsupported(f"partition {self.name} ({self.addr}): {what} is not allowed: {e}") from None
        except redis.ResponseError as e:
            if "unknown command" in str(e).lower():
                raise Unsupported(f"partition {self.name} ({self.addr}): {what}: the CONFIG command is disabled "
                                  f"or renamed ({e}); the controller cannot resize this instance") from None
            raise ProtocolError(f"partition {self.name} ({self.addr}): {what}: {e}") from None
        except redis.RedisError as e:
            self.close()
            raise ProtocolError(f"partition {self.name} ({self.addr}): {what}: {e}") from None

    def _info(self, *sections: str) -> dict[str, Any]:
        what = "INFO " + " ".join(sections)
        info = self._call(what, self._client.execute_command, "INFO", *sections)
        if not isinstance(info, dict):
            raise ProtocolError(f"partition {self.name} ({self.addr}): {what} answered {info!r}")
        return info

    def _policy(self) -> str:
        got = self._call("CONFIG GET maxmemory-policy", self._client.config_get, "maxmemory-policy")
        v = got.get("maxmemory-policy") if isinstance(got, dict) else None
        if v is None:
            raise ProtocolError(f"partition {self.name} ({self.addr}): CONFIG GET maxmemory-policy answered {got!r}")
        return v.decode() if isinstance(v, bytes) else str(v)

    def _config_set(self, key: str, value: str) -> None:
        ok = self._call(f"CONFIG SET {key} {value}", self._client.config_set, key, value)
        if ok is not True:
            raise ProtocolError(f"partition {self.name} ({self.addr}): CONFIG SET {key} {value} answered {ok!r}")

    def read(self) -> PartitionStats:
        """maxmemory, used_memory, used_memory_dataset, keys and counters (one INFO)."""
        info = self._info()
        try:
            keys = sum(int(v["keys"]) for k, v in info.items() if k.startswith("db") and isinstance(v, dict))
            return PartitionStats(
                limit_bytes=int(info["maxmemory"]),
                item_bytes=int(info["used_memory_dataset"]),
                malloced_bytes=int(info["used_memory"]),
                items=keys,
                evictions=int(info["evicted_keys"]),
                get_hits=int(info["keyspace_hits"]),
                get_misses=int(info["keyspace_misses"]),
                pid=int(info["process_id"]),
                uptime=int(info["uptime_in_seconds"]),
                reassign_running=False,
            )
        except (KeyError, ValueError, TypeError) as e:
            raise ProtocolError(f"partition {self.name} ({self.addr}): unexpected INFO: missing or bad {e}") from None

    def malloced(self) -> tuple[int, bool, dict[int, int]]:
        """(used_memory, False, {}): what the shrink loop polls."""
        info = self._info("memory")
        try:
            return int(info["used_memory"]), False, {}
        except (KeyError, ValueError, TypeError) as e:
            raise ProtocolError(f"partition {self.name} ({self.addr}): unexpected INFO memory: {e}") from None

    def release(self, took_over: str) -> str | None:
        """CONFIG SET maxmemory-policy back to what attach found, when it changed it."""
        key, _, was = took_over.partition("=")
        if key != "maxmemory-policy" or not was or was in EVICTS_ANY_KEY:
            return None
        self._config_set("maxmemory-policy", was)
        return took_over

    def attach(self, read_only: bool = False) -> AttachInfo:
        """Check the instance can be managed: CONFIG must be allowed. Unless read_only,
        probe CONFIG SET maxmemory with the current value (no change) and make the
        eviction policy one that evicts any key (allkeys-lru unless an allkeys-* one
        is set)."""
        info = self._info()
        policy = self._policy()
        checked = False
        if not read_only:
            try:
                limit = int(info["maxmemory"])
            except (KeyError, ValueError) as e:
                raise ProtocolError(f"partition {self.name} ({self.addr}): INFO memory has no maxmemory: {e}") from None
            self._config_set("maxmemory", str(limit))
            checked = True
            if policy not in EVICTS_ANY_KEY:
                self._config_set("maxmemory-policy", POLICY)
        return AttachInfo(version=str(info.get("redis_version", "?")), pid=int(info.get("process_id", 0)),
                          took_over=f"maxmemory-policy={policy}", checked_memlimit=checked)

    def repair(self) -> tuple[str, str] | None:
        """Set allkeys-lru again if someone set a policy that cannot evict our keys."""
        policy = self._policy()
        if policy in EVICTS_ANY_KEY:
            return None
        self._config_set("maxmemory-policy", POLICY)
        return ("eviction_policy",
                f"Redis's maxmemory-policy was {policy}, which never evicts the app server's keys; set {POLICY} again")

    def set_limit(self, mb: int) -> None:
        """CONFIG SET maxmemory mb MB. MemlimitError when Redis refuses it."""
        try:
            self._config_set("maxmemory", str(int(mb) * MIB))
        except ProtocolError as e:
            raise MemlimitError(str(e).replace("CONFIG SET", "refused CONFIG SET", 1)) from None

    def reassign(self, src_class: int) -> Reassign:
        """Redis has no pages to move: it evicts by itself (evicts_itself)."""
        raise ProtocolError(f"partition {self.name} ({self.addr}): a Redis partition has no slab pages to move")
