"""Allocation policies behind one interface, chosen by name (`controller.policy`).

A policy only decides targets; it never talks to memcached or the RBC server (the
mechanism in resize.py applies whatever it decides). Later issues add the paper's
baselines (TAO++, Cliffhanger++, FAIR++, LAMA++) as further subclasses registered
with :func:`register`; PlanInput already carries the per-partition stats they need
(hits, misses, evictions).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from .plan import RobinHoodParams, is_eligible, plan_robinhood


@dataclass(frozen=True)
class PartitionSample:
    """What a policy may know about one partition at a tick."""

    limit_bytes: int
    malloced_bytes: int
    item_bytes: int
    items: int = 0
    evictions: int = 0
    get_hits: int = 0
    get_misses: int = 0


@dataclass(frozen=True)
class PolicyParams:
    """Settings every policy is built with."""

    budget_bytes: int
    configured: Mapping[str, int]
    """The configured allocation per partition in bytes (initial_mb / even share)."""
    tax: float = 0.01
    unused_gap: float = 0.30
    floor_bytes: int = 48 << 20


@dataclass(frozen=True)
class PlanInput:
    """One tick's view of the partitions being planned (the reachable ones)."""

    targets: Mapping[str, int]
    """Current targets, bytes; the new targets must have the same sum."""
    used: Mapping[str, int]
    """u_i per partition, bytes (total_malloced or bytes, per used_source)."""
    rbc: Mapping[str, int]
    """Last RBC per partition (0 when the backend blocked nothing)."""
    samples: Mapping[str, PartitionSample] = field(default_factory=dict)

    def applied(self) -> dict[str, int]:
        """The limits memcached actually has, bytes, where known."""
        return {n: s.limit_bytes for n, s in self.samples.items()}


@dataclass(frozen=True)
class Decision:
    """A policy's answer for one tick."""

    targets: dict[str, int]
    eligible: dict[str, bool]
    moved: bool
    """False when the policy kept every target unchanged."""


class Policy(ABC):
    """An allocation policy. Subclasses set `name` and register themselves."""

    name: ClassVar[str]
    needs_rbc: ClassVar[bool] = True
    """When True and the RBC server cannot be read, the tick keeps the targets."""

    def __init__(self, params: PolicyParams) -> None:
        self.params = params

    def initial_targets(self, adopted: Mapping[str, int]) -> dict[str, int]:
        """Targets to start from, given those adopted from memcached's actual limits."""
        return dict(adopted)

    @abstractmethod
    def plan(self, inp: PlanInput) -> Decision:
        """New targets for the partitions in inp (same keys, same sum)."""


POLICIES: dict[str, type[Policy]] = {}
"""Registered policies by name."""


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator adding a policy to POLICIES under its name."""
    POLICIES[cls.name] = cls
    return cls


def make_policy(name: str, params: PolicyParams) -> Policy:
    """The policy registered as name; ValueError naming the known ones otherwise."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"policy: {name!r} is not one of {' | '.join(sorted(POLICIES))}") from None
    return cls(params)


@register
class RobinHoodPolicy(Policy):
    """RobinHood (paper §3): tax every partition, give the pool to the cache-poor
    partitions in proportion to their request blocking counts."""

    name = "robinhood"

    def plan(self, inp: PlanInput) -> Decision:
        p = self.params
        r = plan_robinhood(
            inp.targets, inp.used, inp.rbc,
            RobinHoodParams(tax=p.tax, unused_gap=p.unused_gap, floor_bytes=p.floor_bytes),
            applied=inp.applied(),
        )
        return Decision(targets=r.targets, eligible=r.eligible, moved=r.redistributed)


@register
class StaticPolicy(Policy):
    """Keep the configured allocation (initial_mb / even share) whatever happens."""

    name = "static"
    needs_rbc = False

    def initial_targets(self, adopted: Mapping[str, int]) -> dict[str, int]:
        return {n: self.params.configured[n] for n in adopted}

    def plan(self, inp: PlanInput) -> Decision:
        targets = {n: self.params.configured[n] for n in inp.targets}
        if sum(targets.values()) != sum(inp.targets.values()):
            # Only possible while partitions are excluded from planning with targets
            # that differ from the configuration; keep them as they are.
            targets = dict(inp.targets)
        applied = inp.applied()
        eligible = {
            n: is_eligible(applied.get(n, inp.targets[n]), inp.used.get(n, 0), self.params.unused_gap)
            for n in inp.targets
        }
        return Decision(targets=targets, eligible=eligible, moved=targets != dict(inp.targets))
