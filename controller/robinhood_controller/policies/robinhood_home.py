"""RobinHood with a way home (beyond the paper; docs/algorithms.md, "robinhood-home"):
the paper's RobinHood step while the request tail is high, and a step back towards the
configured split while it is healthy.

The paper's algorithm (``robinhood``, paper §3.1–3.2) taxes every partition every
interval and gives the pool out by request blocking count only. Between latency spikes
nothing pulls the allocation back towards balance, so a partition taxed during earlier
spikes enters its own later spike from a deep hole. This policy keeps RobinHood's step
whenever the request P99 over the RBC window is unknown or at least ``margin × slo_ms``;
below that ("home mode") it taxes every partition exactly as RobinHood does and gives
the pool to the partitions below their home allocation (the configured split: what the
``static`` policy keeps), in proportion to how far below it they are after the tax.

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
from .robinhood import (RobinHoodParams, RobinHoodSloSettings, check_inputs, is_eligible, plan_robinhood,
                        robinhood_tax)

HOME = "home"
"""The mode of a tick with a healthy request P99: back towards the home split."""
RBC = "rbc"
"""The mode of any other tick: the paper's RobinHood step."""


@dataclass(frozen=True)
class HomeResult:
    """The outcome of one home-mode step, with the intermediate values for tests."""

    targets: dict[str, int]
    """New allocation per partition, bytes; sums to the input's sum."""
    tax: dict[str, int]
    """Bytes taken from each partition (RobinHood's tax)."""
    eligible: dict[str, bool]
    """Whether each partition could receive space (RobinHood's unused-space rule)."""
    deficit: dict[str, int]
    """Per eligible partition, its home allocation minus its allocation after the tax
    (0 when it is at or above home): its weight in the split of the pool."""
    pool: int
    """Total tax pooled, bytes."""
    redistributed: bool
    """False when no eligible partition is below home after the tax (every tax given back)."""


def home_split(configured: Mapping[str, int], total: int) -> dict[str, int]:
    """The home allocation of each partition: the configured split, scaled to ``total``
    by the largest-remainder rule when the configured bytes sum to something else (the
    configured values themselves when they sum to ``total``)."""
    return split_weighted(total, {n: max(0, v) for n, v in configured.items()})


def plan_home(
    allocations: Mapping[str, int],
    used: Mapping[str, int],
    home: Mapping[str, int],
    params: RobinHoodParams,
    applied: Mapping[str, int] | None = None,
) -> HomeResult:
    """One home-mode step.

    allocations, used, params, applied: as for :func:`plan_robinhood`.
    home: the home allocation of every partition of allocations (bytes; see
      :func:`home_split`).

    1. RobinHood's tax (:func:`robinhood_tax`): t_i = floor(tax · a_i), capped so
       a_i − t_i ≥ floor; P = Σ t_i.
    2. RobinHood's eligibility (:func:`is_eligible`, on the applied allocation).
    3. w_i = max(home_i − (a_i − t_i), 0) for eligible partitions (0 otherwise). P goes to
       them in proportion to w_i (:func:`split_weighted`: floor(P · w_i / W) each, the
       leftover bytes by largest remainder, ties to the name sorting first). W = 0 or
       P = 0: nothing changes.
    """
    check_inputs(allocations, used, {})
    tax = robinhood_tax(allocations, params)
    pool = sum(tax.values())
    applied = applied or {}
    eligible = {n: is_eligible(applied.get(n, a), used.get(n, 0), params.unused_gap)
                for n, a in allocations.items()}
    deficit = {n: max(home[n] - (a - tax[n]), 0) for n, a in allocations.items() if eligible[n]}
    weights = {n: w for n, w in deficit.items() if w > 0}
    if pool == 0 or not weights:
        return HomeResult(dict(allocations), tax, eligible, deficit, pool, False)
    given = split_weighted(pool, weights)
    targets = {n: a - tax[n] + given.get(n, 0) for n, a in allocations.items()}
    return HomeResult(targets, tax, eligible, deficit, pool, True)


class RobinHoodHomeSettings(RobinHoodSloSettings):
    """RobinHood's parameters, and when the request tail counts as healthy."""

    margin: float = Field(0.8, gt=0, le=1, description=(
        "home mode while the request P99 over the RBC window is below margin × slo_ms; RobinHood's step otherwise"))
    home_tax: float = Field(1.0, ge=0, le=1, description=(
        "in home mode, the tax is this fraction of RobinHood's: 1 walks home at RobinHood's pace, 0 holds the "
        "allocation while the tail is healthy"))


@register
class RobinHoodHome(AllocationPolicy):
    """RobinHood while the request tail is high; back towards the configured split
    while it is healthy."""

    name = "robinhood-home"
    summary = ("RobinHood's step while the request P99 is unknown or ≥ margin × slo_ms; below it, "
               "the pool goes back to the partitions below their configured share (beyond the paper)")
    Params = RobinHoodHomeSettings
    needs_rbc = True
    color = "#e377c2"

    def mode(self, p99_latency_us: int | None) -> str:
        """HOME when the request P99 is known and below margin × slo_ms, else RBC."""
        p: RobinHoodHomeSettings = self.params  # type: ignore[assignment]
        if p99_latency_us is not None and p99_latency_us < p.margin * p.slo_ms * 1000.0:
            return HOME
        return RBC

    def plan(self, inp: PlanInput) -> Decision:
        p: RobinHoodHomeSettings = self.params  # type: ignore[assignment]
        params = p.step(self.ctx.floor_bytes)
        mode = self.mode(inp.p99_latency_us)
        p99 = "unknown" if inp.p99_latency_us is None else f"{inp.p99_latency_us / 1000:g} ms"
        limit = f"{p.margin * p.slo_ms:g} ms"
        if mode == HOME:
            params = RobinHoodParams(tax=p.tax * p.home_tax, unused_gap=p.unused_gap, floor_bytes=self.ctx.floor_bytes)
            home = home_split({n: self.ctx.configured[n] for n in inp.targets}, sum(inp.targets.values()))
            h = plan_home(inp.targets, inp.used, home, params, applied=inp.applied())
            return Decision(targets=h.targets, moved=h.targets != dict(inp.targets), eligible=h.eligible,
                            note=f"robinhood-home: mode {HOME} (p99 {p99} < {limit})")
        r = plan_robinhood(inp.targets, inp.used, inp.rbc, params, applied=inp.applied())
        why = f"p99 {p99}" if inp.p99_latency_us is None else f"p99 {p99} ≥ {limit}"
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible,
                        note=f"robinhood-home: mode {RBC} ({why})")
