"""What the controller needs from a cache partition, whatever its store.

A partition is a memcached (memcached.py) or a Redis (redis_partition.py): both drivers
read the same PartitionStats, take a limit in whole MB and raise the same PartitionError
subclasses, so the resize mechanism (resize.py) and the controller drive either through
the Partition protocol. They differ in how a lowered limit frees memory: memcached needs
its pages moved out (`slabs reassign`, one at a time, driven by resize.py); Redis evicts
keys by its maxmemory-policy as soon as the limit is lowered (`evicts_itself`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

PAGE_BYTES = 1 << 20
"""memcached's slab page (its default, -I 1m): the unit pages are moved in."""

STORES = ("memcached", "redis")


class PartitionError(Exception):
    """A partition could not be used; the message says which one and why."""


class Unreachable(PartitionError):
    """The instance did not answer (connection refused, reset, timeout)."""


class Unsupported(PartitionError):
    """The instance cannot be resized at run time (memcached preallocated with -L or
    without slab reassignment; Redis with CONFIG refused)."""


class MemlimitError(PartitionError):
    """The new limit was refused (memcached: MEMLIMIT_TOO_SMALL, MEMLIMIT_ADJUST_FAILED;
    Redis: an error reply to CONFIG SET maxmemory)."""


class ProtocolError(PartitionError):
    """The instance answered something the driver does not understand."""


class Reassign(enum.Enum):
    """Answers to memcached's `slabs reassign`."""

    OK = "OK"
    BUSY = "BUSY"
    BADCLASS = "BADCLASS"
    NOSPARE = "NOSPARE"
    NOTFULL = "NOTFULL"
    UNSAFE = "UNSAFE"
    SAME = "SAME"


@dataclass(frozen=True)
class PartitionStats:
    """One reading of a partition."""

    limit_bytes: int
    """The current limit: memcached's limit_maxbytes, Redis's maxmemory."""
    item_bytes: int
    """The size of the stored items: memcached's bytes, Redis's used_memory_dataset."""
    malloced_bytes: int
    """The memory the limit bounds: memcached's total_malloced (`stats slabs`, memory in
    slab pages), Redis's used_memory."""
    items: int
    evictions: int
    get_hits: int
    get_misses: int
    pid: int
    uptime: int
    reassign_running: bool
    """A memcached page move is in progress (slab_reassign_running); Redis: False."""
    pages: dict[int, int] = field(default_factory=dict)
    """memcached's total_pages per slab class; Redis: empty."""

    @property
    def floor_bytes(self) -> int:
        """The least memory the partition can be shrunk to now: memcached keeps one
        page (1 MB) in every slab class that holds pages, so it never gives that back
        (docs/controller.md, "Stuck shrinks"); Redis: 0."""
        return sum(1 for n in self.pages.values() if n > 0) * PAGE_BYTES

    @property
    def hit_ratio(self) -> float | None:
        """get_hits / (get_hits + get_misses), None before the first get."""
        total = self.get_hits + self.get_misses
        return self.get_hits / total if total else None


@dataclass(frozen=True)
class AttachInfo:
    """What attach found."""

    version: str
    pid: int
    took_over: str
    """The setting the controller took over, as it was: memcached's slab_automove,
    Redis's maxmemory-policy."""
    checked_memlimit: bool
    """Changing the limit was probed (False in read-only attach)."""


class Partition(Protocol):
    """A managed cache instance. Every method raises a PartitionError subclass on
    failure and leaves the driver ready to reconnect on the next call."""

    name: str
    addr: str
    store: str
    """"memcached" or "redis"."""
    evicts_itself: bool
    """A lowered limit frees memory by itself (Redis); memcached needs page moves."""
    limit_slack: int
    """Bytes above its limit the instance may hold and still count as at its limit:
    Redis's used_memory includes client buffers, which under load keep it about 1 MB
    over maxmemory a fifth of the time (the next write evicts); memcached: 0."""

    def close(self) -> None:
        """Close the connection (the next call reconnects)."""

    def read(self) -> PartitionStats:
        """Read the limit, the memory held and the counters."""

    def malloced(self) -> tuple[int, bool, dict[int, int]]:
        """(memory held, a page move is running, pages per class): the cheap reading
        the shrink loop polls."""

    def attach(self, read_only: bool = False) -> AttachInfo:
        """Check the instance can be managed and take over what would fight the
        controller (memcached's page mover; Redis's eviction policy)."""

    def release(self, took_over: str) -> str | None:
        """Put back the setting attach took over (``took_over`` as attach reported it):
        the instance's own page mover or eviction policy. The setting as it is now
        ("slab_automove=1"), or None when there was nothing to put back."""

    def repair(self) -> tuple[str, str] | None:
        """Take over again what someone changed since attach: (error kind, message) when
        something was repaired, else None."""

    def set_limit(self, mb: int) -> None:
        """Set the limit to mb MB. MemlimitError when the instance refuses it."""

    def reassign(self, src_class: int) -> Reassign:
        """memcached only: move one page of src_class (-1: any) to the global pool."""


def open_partition(name: str, store: str, addr: str, timeout: float = 1.0, *,
                   username: str | None = None, password: str | None = None) -> Partition:
    """The driver of a partition of this store at addr; a Redis authenticates with
    username and password when given (memcached has no authentication here)."""
    if store == "redis":
        from .redis_partition import RedisPartition

        return RedisPartition(name, addr, timeout, username=username, password=password)
    if store == "memcached":
        from .memcached import MemcachedPartition

        return MemcachedPartition(name, addr, timeout)
    raise ValueError(f"partition {name}: unknown store {store!r} (known: {', '.join(STORES)})")
