"""RobinHood whose tax follows the pressure on the tail (beyond the paper;
docs/algorithms.md, "robinhood-pressure").

The paper's algorithm (``robinhood``, paper §3.1–3.2) takes the same 1% of every
partition every interval, however far the request P99 is below the SLO. With a healthy
tail the requests between P98.5 and P99.5 are blocked by the backend whose queries are
slowest by nature (the most service time, not the most queueing), so interval after
interval the pool flows to that one partition and every other is taxed down to the
floor. A backend whose capacity then drops meets its shortage from that hole, and a
partition that has just been given what its backend needs is taxed again as soon as
the tail is back to health, until its backend is short again.

This policy is RobinHood's step with a tax scaled by the pressure on the tail: the
request P99 over the RBC window as a fraction of the SLO, at most 1. At the SLO and
above it is the paper's step byte for byte; at a third of the SLO it moves a third as
much; with the P99 unknown (no RBC this tick) it is the paper's step. Nothing else
changes: the unused-space rule, the split of the pool by RBC and the floor are
RobinHood's.

The plan is a pure function in exact integer bytes (:func:`plan_pressure`): the
targets sum to the sum of the allocations, and no partition is taxed below the floor.
``robinhood`` itself stays the paper's algorithm.
"""
from __future__ import annotations

from collections.abc import Mapping

from .base import AllocationPolicy, Decision, PlanInput
from .registry import register
from .robinhood import PlanResult, RobinHoodParams, RobinHoodSloSettings, plan_robinhood


def pressure(p99_latency_us: int | None, slo_us: float) -> float:
    """The fraction of RobinHood's tax taken this tick: the request P99 over the SLO,
    capped at 1; 1 when the P99 is unknown."""
    if p99_latency_us is None:
        return 1.0
    if slo_us <= 0:
        raise ValueError(f"slo must be positive, got {slo_us} µs")
    return min(1.0, max(0, p99_latency_us) / slo_us)


def plan_pressure(
    allocations: Mapping[str, int],
    used: Mapping[str, int],
    rbc: Mapping[str, int],
    p99_latency_us: int | None,
    slo_us: float,
    params: RobinHoodParams,
    applied: Mapping[str, int] | None = None,
    shift: float = 0.0,
) -> PlanResult:
    """One step: :func:`plan_robinhood` with tax × max(:func:`pressure` (p99_latency_us,
    slo_us), shift).

    allocations, used, rbc, params, applied: as for :func:`plan_robinhood`.
    p99_latency_us: the request P99 over the RBC window, µs (None: unknown).
    slo_us: the request P99 objective, µs.
    shift: a lower bound on the scale, in [0, 1] (``robinhood-shift``'s shift of the
      blocking pattern; 0 for this policy).
    """
    if not 0.0 <= shift <= 1.0:
        raise ValueError(f"shift must be in [0, 1], got {shift}")
    scale = max(pressure(p99_latency_us, slo_us), shift)
    scaled = RobinHoodParams(tax=params.tax * scale, unused_gap=params.unused_gap, floor_bytes=params.floor_bytes)
    return plan_robinhood(allocations, used, rbc, scaled, applied=applied)


@register
class RobinHoodPressure(AllocationPolicy):
    """RobinHood with its tax scaled by the request P99's share of the SLO."""

    name = "robinhood-pressure"
    summary = ("RobinHood's step with the tax scaled by min(1, request P99 / slo_ms): the paper's step at "
               "or above the SLO, proportionally less below it (beyond the paper)")
    Params = RobinHoodSloSettings
    needs_rbc = True
    color = "#ff9896"

    def plan(self, inp: PlanInput) -> Decision:
        p: RobinHoodSloSettings = self.params  # type: ignore[assignment]
        params = p.step(self.ctx.floor_bytes)
        slo_us = p.slo_ms * 1000.0
        r = plan_pressure(inp.targets, inp.used, inp.rbc, inp.p99_latency_us, slo_us, params,
                          applied=inp.applied())
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible,
                        note=f"robinhood-pressure: tax × {pressure(inp.p99_latency_us, slo_us):.3f}")
