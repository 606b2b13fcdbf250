"""RobinHood that does not tax a backend near saturation (beyond the paper;
docs/algorithms.md, "robinhood-guard").

The paper's algorithm (``robinhood``, paper §3.1–3.2) taxes every partition every
interval, whether or not its backend can take more misses: a partition whose backend
blocks nothing is shrunk 1% a tick until its miss load crosses the backend's capacity,
its queries queue, and only then — once it blocks the tail requests — does the RBC send
the space back. When several backends are short at once, the one blocking the tail gets
the pool and the others are taxed towards their own shortage.

This policy is RobinHood's step with one change: a partition whose backend's P99 query
latency over the window (the statistics of every app server, the RBC server's GetStats)
is at least ``guard × slo_ms`` pays no tax this tick. Such a backend is one shrink away
from blocking requests. Everything else — the tax of the others, the unused-space rule,
the split of the pool by RBC — is RobinHood's. Without statistics (the RBC server does
not serve them, or is unreachable) it is RobinHood's step exactly.

The plan is a pure function in exact integer bytes: the targets sum to the sum of the
allocations, and no partition is taxed below the floor. ``robinhood`` itself stays the
paper's algorithm.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field
from robinhood_common.split import split_weighted

from .base import AllocationPolicy, Decision, PlanInput
from .registry import register
from .robinhood import RobinHoodParams, RobinHoodSloSettings, check_inputs, is_eligible, robinhood_tax


@dataclass(frozen=True)
class GuardResult:
    """The outcome of one step, with the intermediate values for logs and tests."""

    targets: dict[str, int]
    """New allocation per partition, bytes; sums to the input's sum."""
    tax: dict[str, int]
    """Bytes taken from each partition (0 for the guarded ones)."""
    guarded: list[str]
    """Partitions not taxed: their backend's P99 query latency is at the guard or above."""
    eligible: dict[str, bool]
    """Whether each partition could receive space (RobinHood's unused-space rule)."""
    pool: int
    """Total tax pooled, bytes."""
    redistributed: bool
    """False when no eligible partition had RBC > 0 (every tax given back)."""


def plan_guard(
    allocations: Mapping[str, int],
    used: Mapping[str, int],
    rbc: Mapping[str, int],
    query_p99_us: Mapping[str, int],
    guard_us: float,
    params: RobinHoodParams,
    applied: Mapping[str, int] | None = None,
    keep_pool: bool = False,
) -> GuardResult:
    """One step.

    allocations, used, rbc, params, applied: as for :func:`plan_robinhood`.
    query_p99_us: per partition, its backend's P99 query latency over the window, µs
      (missing or 0: unknown, not guarded).
    guard_us: the latency at or above which a partition pays no tax.

    The guarded partitions are those with query_p99_us_i ≥ guard_us; the step is
    :func:`plan_untaxed` with them.
    """
    guarded = {n for n in allocations if query_p99_us.get(n, 0) > 0 and query_p99_us[n] >= guard_us}
    return plan_untaxed(allocations, used, rbc, guarded, params, applied, keep_pool)


def plan_untaxed(
    allocations: Mapping[str, int],
    used: Mapping[str, int],
    rbc: Mapping[str, int],
    untaxed: set[str],
    params: RobinHoodParams,
    applied: Mapping[str, int] | None = None,
    keep_pool: bool = False,
) -> GuardResult:
    """RobinHood's step with some partitions paying no tax.

    1. t_i = 0 for i in untaxed, else RobinHood's tax (:func:`robinhood_tax`:
       floor(tax · a_i), capped so a_i − t_i ≥ floor). P = Σ t_i.
       With keep_pool, the untaxed partitions' share of RobinHood's pool is taken from
       the others instead: RobinHood's whole pool split over the taxed partitions in
       proportion to their RobinHood tax (:func:`split_weighted`), each still capped so
       a_i − t_i ≥ floor.
    2. RobinHood's eligibility (:func:`is_eligible`, on the applied allocation).
    3. P goes to eligible partitions in proportion to RBC (:func:`split_weighted`). When
       no eligible partition has RBC > 0, or P = 0, nothing changes.
    """
    check_inputs(allocations, used, rbc)
    guarded = sorted(n for n in allocations if n in untaxed)
    tax = robinhood_tax(allocations, params)
    full = sum(tax.values())
    for n in guarded:
        tax[n] = 0
    if keep_pool and full > 0:
        payers = {n: t for n, t in tax.items() if t > 0}
        if payers:
            for n, t in split_weighted(full, payers).items():
                tax[n] = min(t, max(allocations[n] - params.floor_bytes, 0))
    pool = sum(tax.values())
    applied = applied or {}
    eligible = {n: is_eligible(applied.get(n, a), used.get(n, 0), params.unused_gap)
                for n, a in allocations.items()}
    weights = {n: rbc.get(n, 0) for n in allocations if eligible[n] and rbc.get(n, 0) > 0}
    if pool == 0 or not weights:
        return GuardResult(dict(allocations), tax, guarded, eligible, pool, False)
    given = split_weighted(pool, weights)
    targets = {n: a - tax[n] + given.get(n, 0) for n, a in allocations.items()}
    return GuardResult(targets, tax, guarded, eligible, pool, True)


class RobinHoodGuardSettings(RobinHoodSloSettings):
    """RobinHood's parameters, and when a backend counts as near saturation."""

    guard: float = Field(0.5, gt=0, le=10, description=(
        "a partition whose backend's P99 query latency over the window is at least guard × slo_ms pays no tax"))
    keep_pool: bool = Field(False, description=(
        "the others pay the guarded partitions' tax, so the pool is RobinHood's (false: the pool shrinks)"))


@register
class RobinHoodGuard(AllocationPolicy):
    """RobinHood, without taxing the partitions of backends near saturation."""

    name = "robinhood-guard"
    summary = ("RobinHood's step, but a partition whose backend's P99 query latency is ≥ guard × slo_ms "
               "pays no tax (beyond the paper)")
    Params = RobinHoodGuardSettings
    needs_rbc = True
    color = "#bcbd22"

    def plan(self, inp: PlanInput) -> Decision:
        p: RobinHoodGuardSettings = self.params  # type: ignore[assignment]
        params = p.step(self.ctx.floor_bytes)
        p99 = {n: st.p99_query_latency_us for n, st in inp.stats.items() if n in inp.targets}
        r = plan_guard(inp.targets, inp.used, inp.rbc, p99, p.guard * p.slo_ms * 1000.0, params,
                       applied=inp.applied(), keep_pool=p.keep_pool)
        note = f"robinhood-guard: untaxed {','.join(r.guarded)}" if r.guarded else ""
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible, note=note)
