"""RobinHood that moves at full speed when the blocking pattern shifts, and slowly while
the tail is healthy and the pattern holds (beyond the paper; docs/algorithms.md,
"robinhood-shift").

``robinhood-pressure`` scales RobinHood's tax by the pressure on the tail,
min(1, P99 / SLO). That stops the paper's algorithm from taxing every partition into a
hole while a healthy tail is blocked by the backend with the slowest queries by nature,
but it also slows RobinHood down at the start of a shortage, before the P99 has reached
the SLO: on the testbed's fast spikes it loses for that reason.

The start of a shortage shows in the RBC before it shows in the P99: a backend that was
not blocking the tail starts to. This policy keeps a running mean of the RBC shares (the
fraction of the blocking count on each partition), with the memory of the allocation
itself — an exponential mean with weight ``tax`` per tick, the rate at which RobinHood
replaces its allocation — and measures the shift of this tick's shares from it: the
total variation distance, ½ Σ |share_i − mean_i|, from 0 (the pattern the allocation
was built for) to 1 (a wholly new one). The tax is RobinHood's times
max(pressure, shift). At or above the SLO, on the first tick, and whenever the
blocking pattern is new, it is the paper's step; with a healthy tail blocked as before,
it moves as slowly as ``robinhood-pressure``.

The step is :func:`plan_pressure` with the shift given (pure); the running mean is the
policy's only state (:func:`rbc_shift`, :func:`update_mean`, pure as well). Controllers
that see the same RBC snapshots keep the same mean. ``robinhood`` itself stays the
paper's algorithm.
"""
from __future__ import annotations

from collections.abc import Mapping

from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyContext
from .registry import register
from .robinhood import RobinHoodSloSettings
from .robinhood_pressure import plan_pressure, pressure


def shares(rbc: Mapping[str, int], names: list[str]) -> dict[str, float] | None:
    """Each partition's fraction of the blocking count; None when nothing blocks."""
    total = sum(max(0, rbc.get(n, 0)) for n in names)
    if total == 0:
        return None
    return {n: max(0, rbc.get(n, 0)) / total for n in names}


def rbc_shift(current: Mapping[str, float] | None, mean: Mapping[str, float] | None) -> float:
    """The total variation distance between this tick's RBC shares and the running mean,
    in [0, 1]. 0 when nothing blocks this tick (nothing will move); 1 when there is no
    mean yet (the paper's step)."""
    if current is None:
        return 0.0
    if mean is None:
        return 1.0
    names = set(current) | set(mean)
    return min(1.0, 0.5 * sum(abs(current.get(n, 0.0) - mean.get(n, 0.0)) for n in names))


def update_mean(mean: Mapping[str, float] | None, current: Mapping[str, float] | None,
                weight: float) -> dict[str, float] | None:
    """The running mean after one tick: (1 − weight) · mean + weight · current. A tick
    where nothing blocks leaves it as it was; the first tick with blocking sets it."""
    if current is None:
        return dict(mean) if mean is not None else None
    if mean is None:
        return dict(current)
    names = set(current) | set(mean)
    return {n: (1 - weight) * mean.get(n, 0.0) + weight * current.get(n, 0.0) for n in sorted(names)}


@register
class RobinHoodShift(AllocationPolicy):
    """RobinHood with its tax scaled by max(tail pressure, shift of the blocking pattern)."""

    name = "robinhood-shift"
    summary = ("RobinHood's step with the tax scaled by max(min(1, request P99 / slo_ms), the RBC shares' "
               "distance from their running mean): slow while a healthy tail is blocked as before, the "
               "paper's step when the blocking pattern changes or the SLO is reached (beyond the paper)")
    Params = RobinHoodSloSettings
    needs_rbc = True
    color = "#98df8a"

    def __init__(self, params: Params, ctx: PolicyContext) -> None:
        super().__init__(params, ctx)
        self.mean: dict[str, float] | None = None

    def plan(self, inp: PlanInput) -> Decision:
        p: RobinHoodSloSettings = self.params  # type: ignore[assignment]
        params = p.step(self.ctx.floor_bytes)
        slo_us = p.slo_ms * 1000.0
        current = shares(inp.rbc, sorted(inp.targets))
        shift = rbc_shift(current, self.mean)
        self.mean = update_mean(self.mean, current, p.tax)
        r = plan_pressure(inp.targets, inp.used, inp.rbc, inp.p99_latency_us, slo_us, params,
                          applied=inp.applied(), shift=shift)
        scale = max(pressure(inp.p99_latency_us, slo_us), shift)
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible,
                        note=f"robinhood-shift: tax × {scale:.3f} (shift {shift:.3f})")
