"""The interface every allocation policy implements, and what it is given."""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict
from robinhood_common.contract import ConfigError
from robinhood_common.topology import SLO, Limits, Run

from ..rbc import QueryStats


MOVE_REASONS = ("saturated", "rising", "robinhood")
"""Why a partition last moved (Decision.reasons; the values of the reason label of
controller_partition_move_reason): relief for a saturated (backlogged) backend, or for
one whose utilization rose past the policy's target (the partition given the space, or
the donor it was taken from); or RobinHood's step (the blocking counts). A partition that
never moved has no reason."""

_logged: set[str] = set()


def _log_once(msg: str) -> None:
    if msg not in _logged:
        _logged.add(msg)
        logging.getLogger(__name__).warning("event=error kind=run_start_file msg=%r (the run start stays unknown)",
                                            msg)


class PolicyError(ValueError):
    """A policy or its parameters are invalid; the message names the field."""


class Params(BaseModel):
    """A policy's parameters: subclass it with fields that have defaults and a
    description (``Field(0.01, ge=0, le=0.5, description=...)``). Unknown fields are
    errors. A policy without parameters uses this class as is."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class PolicyContext:
    """What a policy is built with, besides its parameters."""

    budget_bytes: int
    """The app server's cache budget; the targets always sum to it."""
    configured: Mapping[str, int]
    """The configured allocation per partition, bytes (initial_mb / the even share)."""
    floor_bytes: int
    """No partition may be planned below this (controller.min_partition_mb)."""
    app_server: str = ""
    """The app server this controller manages."""
    run: Run | None = None
    """The experiment run the controller is part of (controller.run, set by the
    testbed): its length, start-time file, trace, scenario and topology."""
    slo: SLO | None = None
    """The deployment's request P99 objective and its series (the topology's slo block;
    the testbed and the simulator write the experiment's there). None when the topology
    has none: a policy that needs the objective takes it from here, never from a default
    of its own."""

    window_s: float | None = None
    """The statistics window (rbc_server.window), seconds: the span of the counts in
    ``PlanInput.stats``. None when unknown."""
    app_servers: int = 1
    """The app servers of the topology with partitioned caches (each fills its own)."""
    backend_timeout_s: float = 4.0
    """The app server's backend timeout (backend_timeout), seconds: a query waiting longer
    is given up."""
    declared: Mapping[str, Limits] = field(default_factory=dict)
    """Per partition, its backend's limits as the topology declares them (docs/topology.md):
    what the operator knows of its capacity before anything runs."""

    def run_start(self) -> float | None:
        """The run's start (Unix seconds) from its start file, once the testbed
        wrote it; None before or without one, or when it does not read (logged once
        per fault: the controller checked it at start, Run.start_time)."""
        try:
            return self.run.start_time() if self.run is not None else None
        except ConfigError as e:
            _log_once(f"controller.run.{e}")
            return None


@dataclass(frozen=True)
class PartitionSample:
    """What a policy may know about one partition at a tick (memcached's stats)."""

    limit_bytes: int
    malloced_bytes: int
    item_bytes: int
    items: int = 0
    evictions: int = 0
    get_hits: int = 0
    get_misses: int = 0
    slab_classes: int = 0
    """memcached's slab classes holding pages (each keeps a partly empty page); 0: unknown."""


@dataclass(frozen=True)
class PlanInput:
    """One tick's view of the partitions being planned (the reachable ones)."""

    targets: Mapping[str, int]
    """Current targets, bytes; the new targets must have the same sum."""
    used: Mapping[str, int]
    """u_i per partition, bytes (total_malloced or bytes, per used_source)."""
    rbc: Mapping[str, int]
    """Last RBC per partition (0 when the backend blocked nothing, or no snapshot)."""
    samples: Mapping[str, PartitionSample] = field(default_factory=dict)
    stats: Mapping[str, QueryStats] = field(default_factory=dict)
    """Per partition, the window's statistics over every app server (hits, misses,
    shadow hits, query latency; the RBC server's GetStats). Empty when the RBC server
    is unreachable or has no statistics."""
    local: Mapping[str, QueryStats] = field(default_factory=dict)
    """Per partition, this app server's own share of them."""
    now: float = 0.0
    """Wall-clock time of this tick (Unix seconds)."""
    p99_latency_us: int | None = None
    """The request P99 over the RBC window, µs (the RBC snapshot's p99_latency_us);
    None when unknown: no snapshot, or no request in the window."""

    def applied(self) -> dict[str, int]:
        """The limits memcached actually has, bytes, where known."""
        return {n: s.limit_bytes for n, s in self.samples.items()}


@dataclass(frozen=True)
class Decision:
    """A policy's answer for one tick."""

    targets: dict[str, int]
    """New targets, bytes: the same partitions and the same sum as the input's."""
    moved: bool
    """False when the policy kept every target unchanged."""
    eligible: dict[str, bool] | None = None
    """Per partition, whether it could receive space (policies with such a rule;
    exported as controller_partition_eligible)."""
    note: str = ""
    """One line on what the policy did this tick ("" for none); added to the tick's
    notes (the tick log line's note=, plan's output, policy-server answers)."""
    reasons: dict[str, str] | None = None
    """Per partition, why it last moved (policies that say so; exported as
    controller_partition_last_move_reason, shown by status and the timeline)."""
    predicted: dict[str, float] | None = None
    """Per partition, its backend's predicted utilization with the new targets (policies
    with a model; exported as controller_partition_predicted_utilization)."""
    estimates: dict[str, dict[str, float | str]] | None = None
    """Per partition, what the policy estimated of its backend this tick (written to the
    timeline, where experiments compare them with the truth)."""

    def explain(self) -> dict[str, dict[str, float | str]]:
        """Per partition, what the timeline records of the policy's view: its estimates,
        ``predicted_utilization`` and ``move_reason`` (empty for policies without them)."""
        out: dict[str, dict[str, float | str]] = {}
        for n, e in (self.estimates or {}).items():
            out.setdefault(n, {}).update(e)
        for n, u in (self.predicted or {}).items():
            out.setdefault(n, {})["predicted_utilization"] = u
        for n, r in (self.reasons or {}).items():
            out.setdefault(n, {})["move_reason"] = r
        return out


class AllocationPolicy(ABC):
    """An allocation policy. Subclasses set ``name`` and ``summary``, declare their
    ``Params`` model, and register themselves with :func:`register`."""

    name: ClassVar[str]
    """The name the topology uses (controller.policy.name)."""
    summary: ClassVar[str]
    """One line on what it does (listed by robinhood-controller policies)."""
    Params: ClassVar[type[Params]] = Params
    """Its parameter model."""
    needs_rbc: ClassVar[bool] = False
    """When True, the controller needs rbc_server.grpc, and a tick without an RBC
    snapshot keeps the targets."""
    needs_run: ClassVar[bool] = False
    """When True, the policy needs ``controller.run`` (the experiment run the testbed or
    the simulator describes: its trace and scenario) and cannot run in a deployment."""
    color: ClassVar[str | None] = None
    """The color of its curves in the testbed's plots (None: one from the palette)."""
    role: ClassVar[str] = "candidate"
    """What a user should make of it (registry.ROLES): ``recommended`` (the one to run),
    ``paper`` (the paper's algorithm, exactly), ``baseline`` (a competitor or a fixed
    split), ``bound`` (experiments only: the oracle, the best schedule known, and its
    reactive reference) or ``candidate`` (an improvement on trial; a new policy starts as
    one)."""

    def __init__(self, params: Params, ctx: PolicyContext) -> None:
        self.params = params
        self.ctx = ctx

    def initial_targets(self, adopted: Mapping[str, int]) -> dict[str, int]:
        """Targets to start from, given those adopted from memcached's actual limits
        (by default, the adopted ones: a restarted controller continues)."""
        return dict(adopted)

    @abstractmethod
    def plan(self, inp: PlanInput) -> Decision:
        """New targets for the partitions in inp (same keys, same sum)."""
