"""RobinHood (paper §3.1–3.2, docs/algorithms.md): every interval, tax every partition
and give the pool to the partitions in proportion to their request blocking counts.

The plan is a pure function in exact integer bytes, so the targets always sum to the
budget. It is the paper's algorithm exactly; improvements belong in other policies.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field
from robinhood_common.split import split_weighted

from .base import AllocationPolicy, Decision, Params, PlanInput
from .registry import register


TAX = 0.01
"""The paper's tax (§3.2: 1% of every partition each interval): the one default of every
policy's ``tax`` parameter."""


@dataclass(frozen=True)
class RobinHoodParams:
    """Parameters of one plan step."""

    tax: float
    """Fraction of each allocation pooled every tick (paper: 1%)."""
    unused_gap: float
    """Ineligible when allocation − used > unused_gap · used (paper: 30%)."""
    floor_bytes: int
    """No partition is taxed below this."""


@dataclass(frozen=True)
class PlanResult:
    """The outcome of one plan step, with the intermediate values for logs and tests."""

    targets: dict[str, int]
    """New allocation per partition, bytes; sums to the input's sum."""
    tax: dict[str, int]
    """Bytes taken from each partition."""
    eligible: dict[str, bool]
    """Whether each partition could receive loot (unused-space rule)."""
    pool: int
    """Total tax pooled, bytes."""
    redistributed: bool
    """False when no eligible partition had RBC > 0 (every tax given back)."""


def is_eligible(alloc: int, used: int, unused_gap: float) -> bool:
    """Paper §3.2: False when the unused allocation exceeds unused_gap of the used
    space (a − u > gap · u), i.e. the partition cannot make use of more space yet."""
    return not (alloc - used > unused_gap * used)


def check_inputs(allocations: Mapping[str, int], used: Mapping[str, int], rbc: Mapping[str, int]) -> None:
    """ValueError naming the field when there is no partition or a value is negative."""
    if not allocations:
        raise ValueError("allocations: no partitions")
    for name, a in allocations.items():
        if a < 0:
            raise ValueError(f"allocations.{name}: {a} is negative")
        if used.get(name, 0) < 0:
            raise ValueError(f"used.{name}: {used[name]} is negative")
        if rbc.get(name, 0) < 0:
            raise ValueError(f"rbc.{name}: {rbc[name]} is negative")


def robinhood_tax(allocations: Mapping[str, int], params: RobinHoodParams) -> dict[str, int]:
    """Step 1 of :func:`plan_robinhood`, the tax of every partition:
    t_i = floor(tax · a_i), capped so a_i − t_i ≥ floor (and at 0 from below)."""
    tax: dict[str, int] = {}
    for name, a in allocations.items():
        t = int(a * params.tax)
        tax[name] = max(0, min(t, a - params.floor_bytes))
    return tax


def plan_robinhood(
    allocations: Mapping[str, int],
    used: Mapping[str, int],
    rbc: Mapping[str, int],
    params: RobinHoodParams,
    applied: Mapping[str, int] | None = None,
) -> PlanResult:
    """One RobinHood step (paper §3.1): tax, exclusion, redistribution by RBC.

    allocations: current target per partition (bytes, each ≥ the floor).
    used: used bytes per partition (missing = 0).
    rbc: request blocking count per partition (missing = 0).
    applied: the allocation memcached actually has (its limit, bytes) where it differs
      from the target — a grow still waiting for memory that other partitions have not
      freed yet. The unused-space rule compares used space with what was really
      allocated: a partition is not "unable to use more space" because it was never
      given its target. Missing partitions (or None) use their target.

    1. t_i = floor(tax · a_i), capped so a_i − t_i ≥ floor; P = Σ t_i.
    2. eligible_i unless a_i − u_i > unused_gap · u_i (a_i: the applied allocation).
    3. P goes to eligible partitions in proportion to RBC: floor(P · r_i / R) each, the
       leftover bytes by largest remainder (ties to the name sorting first). When no
       eligible partition has RBC > 0, nothing changes.
    The sum of the targets is preserved exactly.
    """
    check_inputs(allocations, used, rbc)
    tax = robinhood_tax(allocations, params)
    pool = sum(tax.values())
    applied = applied or {}
    eligible = {n: is_eligible(applied.get(n, a), used.get(n, 0), params.unused_gap)
                for n, a in allocations.items()}
    weights = {n: rbc.get(n, 0) for n in allocations if eligible[n] and rbc.get(n, 0) > 0}
    total_w = sum(weights.values())
    if pool == 0 or total_w == 0:
        return PlanResult(dict(allocations), tax, eligible, pool, False)
    given = split_weighted(pool, weights)
    targets = {n: a - tax[n] + given.get(n, 0) for n, a in allocations.items()}
    return PlanResult(targets, tax, eligible, pool, True)


class RobinHoodSettings(Params):
    """RobinHood's parameters (paper §3.1–3.2 values by default)."""

    tax: float = Field(TAX, ge=0, le=0.5, description="fraction of every partition's allocation pooled each tick")
    unused_gap: float = Field(0.30, ge=0, le=100, description=(
        "a partition whose allocation exceeds its used space by more than this fraction of it receives nothing"))

    def step(self, floor_bytes: int) -> RobinHoodParams:
        """The parameters of one plan step with these settings and the controller's floor."""
        return RobinHoodParams(tax=self.tax, unused_gap=self.unused_gap, floor_bytes=floor_bytes)


@register
class RobinHood(AllocationPolicy):
    """Tax every partition, give the pool to the cache-poor partitions in proportion to
    their request blocking counts (paper §3)."""

    name = "robinhood"
    summary = "tax every partition, give the pool to partitions in proportion to their RBC (paper §3)"
    Params = RobinHoodSettings
    needs_rbc = True
    color = "#d62728"
    role = "paper"

    def plan(self, inp: PlanInput) -> Decision:
        p: RobinHoodSettings = self.params  # type: ignore[assignment]
        r = plan_robinhood(
            inp.targets, inp.used, inp.rbc,
            p.step(self.ctx.floor_bytes),
            applied=inp.applied(),
        )
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible)
