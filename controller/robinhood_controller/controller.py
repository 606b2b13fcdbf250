"""The controller loop: every interval, read the actual state, plan, reconcile.

Each tick (docs/controller.md, paper §4.2):
  1. read every partition (memcached: `stats`, `stats slabs`; Redis: INFO); a partition
     that does not answer is left alone this tick and counted (`partition_unreachable`);
     one that restarted (new pid) is attached again (memcached: `slabs automove 0`;
     Redis: an allkeys-* maxmemory-policy);
  2. read the RBC snapshot (deadline `rbc_timeout`); when that fails a policy that
     needs RBC keeps its targets;
  3. on the first tick, adopt targets from the actual limits (plan.adopt); then let the
     policy plan the reachable partitions, and round the targets to whole-MB limits
     that sum to the budget (this step is decide.decide, which the simulator's policy
     server runs too);
  4. reconcile the partitions towards the limits (resize.reconcile), unless dry-run;
  5. export metrics, append the timeline, log one line.
The targets (bytes) are the only state kept between ticks, and a new process
recreates them from the partitions, so the loop is level-triggered.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import ControllerConfig
from .decide import check_decision, decide
from .partition import PartitionError, PartitionStats, Unreachable, Unsupported, open_partition
from .metrics import Metrics
from .plan import MIB
from .policies import MOVE_REASONS, PartitionSample
from .rbc import RBCClient, RBCError, RBCSnapshot
from .resize import Outcome, Target, reconcile
from .timeline import PartitionAfter, TimelineWriter, tick_record

log = logging.getLogger("robinhood_controller")

__all__ = ["Controller", "StartupError", "TickReport", "check_decision", "sample"]


def sample(st: PartitionStats) -> PartitionSample:
    """What a policy may know of a partition reading."""
    return PartitionSample(
        limit_bytes=st.limit_bytes, malloced_bytes=st.malloced_bytes, item_bytes=st.item_bytes,
        items=st.items, evictions=st.evictions, get_hits=st.get_hits, get_misses=st.get_misses,
        slab_classes=sum(1 for n in st.pages.values() if n > 0))


class StartupError(Exception):
    """The controller cannot start (a partition is unreachable or cannot be managed).
    ``unreachable`` says a partition did not answer: starting it, or ``run --wait``,
    helps."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass
class TickReport:
    """Everything one tick saw and did."""

    tick: int
    time: float
    stats: dict[str, PartitionStats | None]
    rbc: RBCSnapshot | None
    rbc_error: str | None
    targets_before: dict[str, int] | None
    targets: dict[str, int] | None
    limits_planned: dict[str, int] | None
    eligible: dict[str, bool]
    used: dict[str, int]
    outcome: Outcome | None
    seconds: float
    notes: list[str] = field(default_factory=list)
    explain: dict[str, dict[str, float | str]] = field(default_factory=dict)
    """Per partition, the policy's view (estimates, predicted utilization, move reason)."""


class Controller:
    """One app server's controller. Not thread-safe: one owner calls tick()/run()."""

    def __init__(
        self,
        cfg: ControllerConfig,
        *,
        read_only: bool = False,
        metrics: Metrics | None = None,
        timeline: TimelineWriter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if cfg.cache_mode != "partitioned":
            raise ValueError(f"cache_mode {cfg.cache_mode!r}: only partitioned app servers have a plan")
        s = cfg.settings
        self.cfg = cfg
        self.read_only = read_only or s.dry_run
        self.metrics = metrics
        self.timeline = timeline
        self.clock = clock
        self.names = [p.name for p in cfg.partitions]
        self.drivers = {p.name: open_partition(p.name, p.store, p.addr, s.memcached_timeout, username=p.user,
                                               password=p.password) for p in cfg.partitions}
        self.policy = cfg.build_policy()
        self.rbc = (RBCClient(cfg.rbc_addr, s.rbc_timeout, cfg.rbc_window, cfg.app_server,
                              token_file=cfg.token_file, tls=cfg.tls)
                    if cfg.rbc_addr else None)
        self.names_by_id = cfg.backend_names()
        self.targets: dict[str, int] | None = None
        self.ticks = 0
        self._pids: dict[str, int] = {}
        self.took_over: dict[str, str] = {}
        """Per partition, the setting attach took over, as it was ("slab_automove=1")."""
        self._last: dict[str, PartitionStats] = {}
        self._shrink_since: dict[str, float] = {}
        self._stuck: set[str] = set()
        """Partitions whose shrink is stuck: counted and warned about once per episode."""
        if metrics is not None:
            metrics.budget.set(cfg.budget_bytes)

    # -- lifecycle -------------------------------------------------------------------

    def release(self, names: Sequence[str] | None = None) -> dict[str, str]:
        """Put back the settings attach took over (memcached's page mover, Redis's
        eviction policy) on the named partitions (default all); the ones restored, as
        they are now. A partition that cannot be reached is logged and skipped."""
        restored: dict[str, str] = {}
        for name in names if names is not None else self.names:
            was = self.took_over.get(name)
            if was is None:
                continue
            try:
                now = self.drivers[name].release(was)
            except PartitionError as e:
                log.warning("event=error kind=release partition=%s msg=%r", name, str(e))
                continue
            if now is not None:
                restored[name] = now
        return restored

    def close(self) -> None:
        """Close connections (memcached, RBC)."""
        for d in self.drivers.values():
            d.close()
        if self.rbc is not None:
            self.rbc.close()

    def start(self, wait: bool = False, stop: threading.Event | None = None, retry: float = 1.0) -> None:
        """Attach every partition before the first tick.

        An unreachable partition raises StartupError, or with wait=True is retried every
        `retry` seconds until it answers or `stop` is set. An instance that cannot be
        resized (-L, no slab reassignment) always raises StartupError.
        """
        pending = list(self.names)
        announced: set[str] = set()
        while pending:
            still: list[str] = []
            for name in pending:
                d = self.drivers[name]
                try:
                    info = d.attach(read_only=self.read_only)
                except Unsupported as e:
                    raise StartupError(str(e)) from None
                except PartitionError as e:
                    if not wait:
                        raise StartupError(str(e), unreachable=True) from None
                    if name not in announced:
                        log.warning("event=waiting partition=%s addr=%s reason=%r", name, d.addr, str(e))
                        announced.add(name)
                    still.append(name)
                    continue
                self._pids[name] = info.pid
                self.took_over.setdefault(name, info.took_over)  # the first attach saw it as the operator left it
                log.info("event=attached partition=%s store=%s addr=%s version=%s pid=%d took_over=%s read_only=%s",
                         name, d.store, d.addr, info.version, info.pid, info.took_over, self.read_only)
            pending = still
            if pending:
                if stop is not None and stop.wait(retry):
                    raise StartupError("stopped while waiting for partitions: " + ", ".join(pending))
                if stop is None:
                    time.sleep(retry)

    def run(self, stop: threading.Event, max_ticks: int | None = None) -> None:
        """Tick every interval until stop is set (or max_ticks ticks ran)."""
        interval = self.cfg.settings.interval
        next_at = self.clock()
        failed = 0
        while not stop.is_set():
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - one bad tick must not end the controller
                failed += 1
                kind = type(e).__name__
                if self.metrics is not None:
                    self.metrics.tick_errors.labels(kind).inc()
                log.error("event=tick_error kind=%s msg=%r (the next tick runs)", kind, str(e), exc_info=True)
            if max_ticks is not None and self.ticks + failed >= max_ticks:
                return
            next_at += interval
            now = self.clock()
            if next_at <= now:  # overran: skip the missed ticks
                next_at = now + interval
            stop.wait(next_at - now)

    # -- one tick ----------------------------------------------------------------

    def _error(self, kind: str, partition: str, message: str) -> None:
        if self.metrics is not None:
            self.metrics.errors.labels(kind).inc()
        log.warning("event=error kind=%s partition=%s msg=%r", kind, partition or "-", message)

    def observe(self) -> dict[str, PartitionStats | None]:
        """Read every partition; re-attach the ones that restarted."""
        out: dict[str, PartitionStats | None] = {}
        for name, d in self.drivers.items():
            try:
                st = d.read()
                if self._pids.get(name) != st.pid:
                    info = d.attach(read_only=self.read_only)
                    if name in self._pids:
                        log.info("event=reattached partition=%s addr=%s old_pid=%d pid=%d limit_mb=%d",
                                 name, d.addr, self._pids[name], info.pid, st.limit_bytes // MIB)
                    self._pids[name] = info.pid
                    st = d.read()
            except Unsupported as e:
                self._error("unsupported", name, str(e))
                out[name] = None
                continue
            except Unreachable as e:
                self._error("partition_unreachable", name, str(e))
                out[name] = None
                continue
            except PartitionError as e:
                self._error("protocol", name, str(e))
                out[name] = None
                continue
            if not self.read_only:
                try:
                    if (fixed := d.repair()) is not None:
                        self._error(fixed[0], name, fixed[1])
                except PartitionError as e:
                    self._error("protocol", name, str(e))
            out[name] = st
            self._last[name] = st
        return out

    def tick(self) -> TickReport:
        """One tick; see the module doc. The decision is :func:`decide.decide`."""
        t0 = self.clock()
        wall = time.time()
        self.ticks += 1
        stats = self.observe()
        samples = {n: sample(st) for n in self.names if (st := stats[n]) is not None}

        snap: RBCSnapshot | None = None
        rbc_error: str | None = None
        if self.rbc is not None:
            try:
                snap = self.rbc.fetch(self.names_by_id)
            except RBCError as e:
                rbc_error = str(e)
                self._error(e.kind, "", rbc_error)
        else:
            rbc_error = "no rbc_server.grpc configured"

        s = self.cfg.settings
        d = decide(self.policy, self.names, self.targets, samples, snap, budget_mb=self.cfg.budget_mb,
                   floor_mb=s.min_partition_mb, used_source=s.used_source, now=wall)
        if d.policy_error:
            self._error("policy", "", f"policy {self.policy.name}: {d.policy_error}; targets kept")
        self.targets = d.targets
        planned = d.limits_mb
        outcome: Outcome | None = None
        if planned is not None and not self.read_only:
            rt0 = self.clock()
            outcome = reconcile(
                [Target(name=n, driver=self.drivers[n], stats=stats[n], desired_mb=planned[n],
                        last_limit_mb=self._last[n].limit_bytes // MIB if n in self._last else 0)
                 for n in self.names],
                self.cfg.budget_mb,
                self.cfg.shrink_budget,
            )
            self._account(outcome, rt0)

        report = TickReport(
            tick=self.ticks, time=wall, stats=stats, rbc=snap, rbc_error=rbc_error,
            targets_before=d.before, targets=dict(d.targets) if d.targets is not None else None,
            limits_planned=planned, eligible=dict(d.eligible), used=dict(d.used), outcome=outcome,
            seconds=self.clock() - t0, notes=list(d.notes), explain=dict(d.explain),
        )
        self._export(report)
        return report

    def _account(self, outcome: Outcome, started: float) -> None:
        for name, kind, msg in outcome.errors:
            if kind == "shrink_stuck" and name in self._stuck:
                log.debug("event=still_stuck partition=%s msg=%r", name, msg)
                continue
            self._error(kind, name, msg)
        self._stuck = set(outcome.stuck)
        for name in outcome.pending:
            self._shrink_since.setdefault(name, started)
        for name, secs in outcome.shrink_seconds.items():
            since = self._shrink_since.pop(name, None)
            total = secs if since is None else (started - since) + secs
            if self.metrics is not None:
                self.metrics.resize_seconds.observe(total)
        for name in outcome.stuck + sorted(outcome.lost):
            self._shrink_since.pop(name, None)
        if self.metrics is not None:
            for name, n in outcome.pages_moved.items():
                self.metrics.pages_moved.labels(name).inc(n)

    # -- reporting ---------------------------------------------------------------

    def _export(self, r: TickReport) -> None:
        o = r.outcome
        if self.metrics is not None:
            m = self.metrics
            m.ticks.inc()
            m.tick_seconds.observe(r.seconds)
            for n in self.names:
                st = r.stats[n]
                m.up.labels(n).set(1 if st is not None else 0)
                if r.targets is not None:
                    m.target.labels(n).set(r.targets[n])
                if st is not None:
                    limit = o.limits_mb[n] * MIB if o is not None and n in o.limits_mb else st.limit_bytes
                    malloced = o.malloced[n] if o is not None and n in o.malloced else st.malloced_bytes
                    m.limit.labels(n).set(limit)
                    m.malloced.labels(n).set(malloced)
                    m.used.labels(n).set(r.used[n])
                if n in r.eligible:
                    m.eligible.labels(n).set(1 if r.eligible[n] else 0)
                if r.rbc is not None:
                    m.rbc.labels(n).set(r.rbc.counts.get(n, 0))
                view = r.explain.get(n, {})
                if isinstance(u := view.get("predicted_utilization"), float):
                    m.predicted.labels(n).set(u)
                if isinstance(why := view.get("move_reason"), str):
                    for reason in MOVE_REASONS:
                        m.move_reason.labels(n, reason).set(1 if reason == why else 0)
        if self.timeline is not None:
            self.timeline.write(self.timeline_record(r))
        log.info("%s", self.log_line(r))

    def timeline_record(self, r: TickReport) -> dict[str, Any]:
        """The timeline line of a tick (:func:`timeline.tick_record`; schema in
        docs/controller.md): memcached after the tick where the reconcile saw it,
        else as read."""
        o = r.outcome
        after: dict[str, PartitionAfter | None] = {}
        for n in self.names:
            st = r.stats[n]
            after[n] = None if st is None else PartitionAfter(
                limit_bytes=o.limits_mb[n] * MIB if o is not None and n in o.limits_mb else st.limit_bytes,
                malloced_bytes=o.malloced[n] if o is not None and n in o.malloced else st.malloced_bytes,
                item_bytes=st.item_bytes,
                hit_ratio=st.hit_ratio,
                pages_moved=o.pages_moved.get(n, 0) if o is not None else 0,
            )
        return tick_record(
            time=r.time, tick=r.tick, app_server=self.cfg.app_server, policy=self.policy.name,
            dry_run=self.read_only, budget_bytes=self.cfg.budget_bytes, names=self.names, after=after,
            targets=r.targets, limits_mb=r.limits_planned, used=r.used, rbc=r.rbc, eligible=r.eligible,
            notes=r.notes, explain=r.explain,
        )

    def log_line(self, r: TickReport) -> str:
        """The one key=value line logged per tick."""
        o = r.outcome
        fields = [f"event=tick tick={r.tick} policy={self.policy.name}"]
        if r.rbc is not None:
            rbc = ",".join(f"{n}:{r.rbc.counts.get(n, 0)}" for n in self.names)
            fields.append(f"rbc={rbc} window_requests={r.rbc.window_requests}")
        else:
            fields.append("rbc=unavailable")
        if r.targets is not None and r.targets_before is not None:
            moved = [f"{n}:{(r.targets[n] - r.targets_before[n]) / MIB:+.2f}" for n in self.names
                     if r.targets[n] != r.targets_before[n]]
            fields.append(f"target_delta_mb={','.join(moved) or 'none'}")
        if o is not None:
            ch = ",".join(f"{n}:{a}->{b}" for n, (a, b) in sorted(o.changed.items()))
            fields.append(f"limits_mb={ch or 'unchanged'}")
            fields.append(f"pages_moved={sum(o.pages_moved.values())}")
            if o.pending:
                fields.append("pending_mb=" + ",".join(f"{n}:{v / MIB:.0f}" for n, v in sorted(o.pending.items())))
            if o.deferred_mb:
                fields.append("deferred_mb=" + ",".join(f"{n}:{v}" for n, v in sorted(o.deferred_mb.items())))
            if o.errors:
                fields.append(f"errors={len(o.errors)}")
        elif r.limits_planned is not None:
            fields.append("planned_mb=" + ",".join(f"{n}:{r.limits_planned[n]}" for n in self.names))
        down = [n for n in self.names if r.stats[n] is None]
        if down:
            fields.append("down=" + ",".join(down))
        if r.notes:
            fields.append(f"note={'; '.join(r.notes)!r}")
        fields.append(f"took_ms={r.seconds * 1000:.1f}")
        return " ".join(fields)
