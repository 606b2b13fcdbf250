"""The resize mechanism: drive the partitions' limits and memory to the desired limits.

It knows nothing of policies; it gets desired whole-MB limits that sum to the budget
and closes the gap to the instances' actual state, idempotently (a level-triggered
reconcile, docs/algorithms.md):

1. Lower: every partition whose limit is above its desired limit gets the new limit
   first (`cache_memlimit`). This alone frees nothing in a full cache.
2. Shrink: every partition whose total_malloced is above its limit gives pages back,
   one `slabs reassign <class> 0` at a time, taken from the slab class with the most
   pages (so the shrink keeps the partition's mix of object sizes), until
   total_malloced ≤ limit or the tick's shrink budget is spent. `BUSY` (a page move is
   still running) backs off that partition, doubling from 1 ms to 50 ms, while the
   others proceed; `BADCLASS`/`NOSPARE` rule the class out and the next one is tried;
   when no class has a spare page the shrink is reported stuck. An unfinished shrink is
   simply found again by the next tick's reading (malloced > limit).
   A Redis partition (evicts_itself) frees memory by itself once its maxmemory is
   lowered: its shrink only polls used_memory, with the same back-off, until it is
   below the limit.
3. Grow: partitions below their desired limit are raised, but only by memory that is
   actually free: headroom = budget − Σ max(limit, total_malloced), where partitions
   that cannot be read count with max(their desired limit, last known limit). So the
   sum of the limits never exceeds the budget, and neither does the memory the
   partitions really hold while shrinks are still running.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .partition import MemlimitError, Partition, PartitionError, PartitionStats, Reassign, Unreachable
from .plan import MIB

BACKOFF_MIN = 0.001
BACKOFF_MAX = 0.05


@dataclass
class Target:
    """One partition's input to a reconcile."""

    name: str
    driver: Partition
    stats: PartitionStats | None
    """This tick's reading; None when the partition could not be read."""
    desired_mb: int
    last_limit_mb: int = 0
    """Last known limit, for a partition that cannot be read now."""


@dataclass
class Outcome:
    """What one reconcile did."""

    limits_mb: dict[str, int] = field(default_factory=dict)
    """Limit of every reachable partition afterwards, MB."""
    malloced: dict[str, int] = field(default_factory=dict)
    """Last known total_malloced of every reachable partition, bytes."""
    changed: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Partitions whose limit was set: (old MB, new MB)."""
    pages_moved: dict[str, int] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)
    """`BUSY` answers per partition (a page move was still running)."""
    pending: dict[str, int] = field(default_factory=dict)
    """Bytes still above the limit after the shrink budget (carried over)."""
    deferred_mb: dict[str, int] = field(default_factory=dict)
    """MB of growth not granted yet for lack of freed memory."""
    stuck: list[str] = field(default_factory=list)
    errors: list[tuple[str, str, str]] = field(default_factory=list)
    """(partition, kind, message): kind is memlimit | partition_unreachable | protocol | shrink_stuck."""
    lost: set[str] = field(default_factory=set)
    shrink_seconds: dict[str, float] = field(default_factory=dict)
    """Time each shrink that finished this tick took."""


def _within(t: Target, held: int, limit: int) -> int:
    """The memory a partition holds against its limit: a Redis hovering within its
    limit_slack above maxmemory (client buffers under load; the next write evicts)
    counts as at its limit, so it is neither shrinking nor taking headroom."""
    if limit < held <= limit + getattr(t.driver, "limit_slack", 0):
        return limit
    return held


def _error_kind(e: PartitionError) -> str:
    if isinstance(e, Unreachable):
        return "partition_unreachable"
    if isinstance(e, MemlimitError):
        return "memlimit"
    return "protocol"


@dataclass
class _Shrink:
    t: Target
    limit: int
    malloced: int
    pages: dict[int, int]
    started: float
    excluded: set[int] = field(default_factory=set)
    moved: int = 0
    busy: int = 0
    backoff: float = BACKOFF_MIN
    next_at: float = 0.0
    done: bool = False
    stuck: bool = False

    def pick(self) -> int:
        best, most = -1, 1
        for cls, n in self.pages.items():
            if cls not in self.excluded and n > most:
                best, most = cls, n
        return best


def reconcile(
    targets: Sequence[Target],
    budget_mb: int,
    shrink_budget: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Apply the desired limits (see the module doc). Never raises for a partition's
    failure: it is recorded in Outcome.errors and the other partitions proceed."""
    r = _Reconcile(targets, clock, sleep)
    r.lower()                                    # 1. lower limits first
    r.settle(r.shrink(r.start + shrink_budget))  # 2. give pages back, then account for them
    r.grow(budget_mb)                            # 3. grow only by memory actually freed
    return r.done()


class _Reconcile:
    """One reconcile pass: the partitions still reachable, their limits and usage as
    they change, and the outcome."""

    def __init__(self, targets: Sequence[Target], clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.targets, self.clock, self.sleep = targets, clock, sleep
        self.out = Outcome()
        self.start = clock()
        self.live: dict[str, Target] = {t.name: t for t in targets if t.stats is not None}
        self.limit: dict[str, int] = {n: t.stats.limit_bytes for n, t in self.live.items()}  # type: ignore[union-attr]
        self.malloced: dict[str, int] = {
            n: t.stats.malloced_bytes for n, t in self.live.items()}  # type: ignore[union-attr]

    def fail(self, name: str, e: PartitionError) -> None:
        kind = _error_kind(e)
        self.out.errors.append((name, kind, str(e)))
        if kind == "partition_unreachable":
            self.out.lost.add(name)
            self.live.pop(name, None)

    def lower(self) -> None:
        """Lower every limit that must come down, before anything grows."""
        for name, t in list(self.live.items()):
            want = t.desired_mb * MIB
            if want < self.limit[name]:
                try:
                    t.driver.set_limit(t.desired_mb)
                except PartitionError as e:
                    self.fail(name, e)
                    continue
                self.out.changed[name] = (self.limit[name] // MIB, t.desired_mb)
                self.limit[name] = want

    def shrink(self, deadline: float) -> list[_Shrink]:
        """Give pages back until each partition's total_malloced is within its limit,
        or the deadline; the shrinks, done or not."""
        shrinking = [
            _Shrink(t, self.limit[n], self.malloced[n], dict(t.stats.pages), self.start)  # type: ignore[union-attr]
            for n, t in self.live.items()
            if _within(t, self.malloced[n], self.limit[n]) > self.limit[n]
        ]
        while True:
            active = [s for s in shrinking if not s.done]
            if not active or self.clock() >= deadline:
                return shrinking
            acted = False
            for s in active:
                if self.clock() < s.next_at:
                    continue
                acted = True
                self._step(s)
            if not acted:
                wake = min(s.next_at for s in active)
                self.sleep(max(0.0, min(wake, deadline) - self.clock()))

    def _finish(self, s: _Shrink) -> None:
        s.done = True
        self.out.shrink_seconds[s.t.name] = self.clock() - s.started

    def _later(self, s: _Shrink) -> None:
        s.next_at = self.clock() + s.backoff
        s.backoff = min(2 * s.backoff, BACKOFF_MAX)

    def _step(self, s: _Shrink) -> None:
        """One step of one partition's shrink: a page moved, a wait, or done."""
        name, clock = s.t.name, self.clock
        try:
            if s.t.driver.evicts_itself:
                # Redis evicts by itself: wait for used_memory to fall.
                m, _, _ = s.t.driver.malloced()
                s.malloced = _within(s.t, m, s.limit)
                if s.malloced <= s.limit:
                    self._finish(s)
                else:
                    self._later(s)
                return
            if s.malloced <= s.limit:
                # The estimate says done: confirm once no page move is in flight.
                m, running, pages = s.t.driver.malloced()
                s.malloced, s.pages = m, pages
                if running:
                    s.next_at = clock() + BACKOFF_MIN
                    return
                if m <= s.limit:
                    self._finish(s)
                    return
            cls = s.pick()
            ans = s.t.driver.reassign(cls)
        except PartitionError as e:
            s.done = True
            self.fail(name, e)
            return
        if ans is Reassign.OK:
            s.moved += 1
            s.malloced -= MIB
            if cls in s.pages:
                s.pages[cls] -= 1
            s.backoff = BACKOFF_MIN
        elif ans is Reassign.BUSY:
            s.busy += 1
            self._later(s)
        elif cls != -1:
            s.excluded.add(cls)
        else:
            # No class has a spare page (memcached keeps one per class in use).
            try:
                m, running, pages = s.t.driver.malloced()
            except PartitionError as e:
                s.done = True
                self.fail(name, e)
                return
            s.malloced, s.pages, s.excluded = m, pages, set()
            if running:
                s.next_at = clock() + BACKOFF_MIN
            elif m <= s.limit:
                self._finish(s)
            elif s.pick() == -1:
                s.done = s.stuck = True

    def settle(self, shrinking: list[_Shrink]) -> None:
        """Account for each shrink: pages moved, moves refused, what is still above
        its limit (pending), and a partition that cannot shrink further (stuck)."""
        out, limit, malloced = self.out, self.limit, self.malloced
        for s in shrinking:
            name = s.t.name
            if s.moved:
                out.pages_moved[name] = s.moved
            if s.busy:
                out.busy[name] = s.busy
            if name not in self.live:
                continue
            if not s.done or s.stuck:
                try:
                    m, _, _ = s.t.driver.malloced()
                    s.malloced = m
                except PartitionError as e:
                    self.fail(name, e)
                    continue
            malloced[name] = _within(s.t, max(s.malloced, 0), limit[name])
            if s.stuck and malloced[name] > limit[name]:
                classes = sum(1 for n in s.pages.values() if n > 0)
                out.stuck.append(name)
                out.errors.append((
                    name, "shrink_stuck",
                    f"partition {name}: total_malloced {malloced[name] // MIB} MB stays above its limit "
                    f"{limit[name] // MIB} MB: memcached keeps one page in each of the {classes} slab classes "
                    f"in use and every other page is gone, so the workload needs a floor of {classes} MB "
                    f"(raise min_partition_mb to at least {classes})",
                ))
            elif malloced[name] > limit[name]:
                out.pending[name] = malloced[name] - limit[name]

    def grow(self, budget_mb: int) -> None:
        """Raise limits, the furthest below their target first, only into the budget
        that the partitions' holdings leave free."""
        out, limit, malloced, live = self.out, self.limit, self.malloced, self.live
        holds: dict[str, int] = {}
        for t in self.targets:
            if t.name in live:
                holds[t.name] = max(limit[t.name], _within(t, malloced[t.name], limit[t.name]))
            else:
                holds[t.name] = max(t.desired_mb, t.last_limit_mb) * MIB
        headroom = budget_mb * MIB - sum(holds.values())
        growers = sorted(
            (t for t in live.values() if t.desired_mb * MIB > limit[t.name]),
            key=lambda t: (limit[t.name] - t.desired_mb * MIB, t.name),
        )
        for t in growers:
            name = t.name
            cap_mb = (holds[name] + max(headroom, 0)) // MIB
            new_mb = min(t.desired_mb, cap_mb)
            if new_mb * MIB > limit[name]:
                try:
                    t.driver.set_limit(new_mb)
                except PartitionError as e:
                    self.fail(name, e)
                    continue
                out.changed[name] = (limit[name] // MIB, new_mb)
                limit[name] = new_mb * MIB
                new_hold = max(limit[name], malloced[name])
                headroom -= new_hold - holds[name]
                holds[name] = new_hold
            if new_mb < t.desired_mb:
                out.deferred_mb[name] = t.desired_mb - max(new_mb, limit[name] // MIB)

    def done(self) -> Outcome:
        for name in self.live:
            self.out.limits_mb[name] = self.limit[name] // MIB
            self.out.malloced[name] = self.malloced[name]
        return self.out
