"""TAO++ (paper §5.1, Table 2): the static allocation RobinHood reaches on average over
the first 20% of the run, then kept for the rest of it.

TAO (Facebook's graph cache) partitions its cache statically among its tenants; the
paper's TAO++ gives it the best static split it could know: the allocation RobinHood
converges to in the first 20% of the experiment, averaged over that time. Here the
policy runs RobinHood's own plan (``tax``, ``unused_gap``) for ``learn_fraction`` of the
run (``controller.run.seconds``, from its start file; from the first tick without one;
or for ``learn`` seconds when given), averaging the targets tick by tick, then holds the
average (rounded to whole bytes that sum to the budget). Given ``allocation_mb`` (for
example RobinHood's average from an earlier run's results folder), it holds that from
the start instead.
"""
from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field
from robinhood_common.split import split_weighted

from ..plan import MIB
from .base import AllocationPolicy, Decision, Params, PlanInput
from .registry import register
from .robinhood import RobinHoodParams, plan_robinhood


class TaoParams(Params):
    tax: float = Field(0.01, ge=0, le=0.5, description="RobinHood's tax while learning")
    unused_gap: float = Field(0.30, ge=0, le=100, description="RobinHood's unused-space gap while learning")
    learn_fraction: float = Field(0.2, gt=0, le=1, description="share of the run (controller.run.seconds) spent learning")
    learn: float | None = Field(None, gt=0, description="learning time in seconds (instead of learn_fraction)")
    allocation_mb: dict[str, int] | None = Field(None, description="a fixed allocation to hold from the start, MB per partition")


@register
class Tao(AllocationPolicy):
    name = "tao++"
    summary = "RobinHood's average allocation over the first 20% of the run, then static (paper §5.1)"
    Params = TaoParams
    needs_rbc = True
    color = "#17becf"

    def __init__(self, params: Params, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, ctx)
        self.start: float | None = None
        self.sums: dict[str, float] = {}
        self.weight = 0.0
        self.last: float | None = None
        self.fixed: dict[str, int] | None = None

    def _learn_seconds(self) -> float:
        p: TaoParams = self.params  # type: ignore[assignment]
        if p.learn is not None:
            return p.learn
        run = self.ctx.run.seconds if self.ctx.run is not None and self.ctx.run.seconds else None
        return p.learn_fraction * run if run else 60.0

    def initial_targets(self, adopted: Mapping[str, int]) -> dict[str, int]:
        p: TaoParams = self.params  # type: ignore[assignment]
        if p.allocation_mb is not None:
            self.fixed = hold({n: p.allocation_mb.get(n, 0) * MIB for n in adopted}, sum(adopted.values()))
            return dict(self.fixed)
        return dict(adopted)

    def plan(self, inp: PlanInput) -> Decision:
        if self.fixed is not None:
            targets = {n: self.fixed.get(n, t) for n, t in inp.targets.items()}
            if sum(targets.values()) != sum(inp.targets.values()):
                targets = dict(inp.targets)
            return Decision(targets=targets, moved=targets != dict(inp.targets))
        if self.start is None:
            self.start = self.ctx.run_start() or inp.now
        p: TaoParams = self.params  # type: ignore[assignment]
        r = plan_robinhood(inp.targets, inp.used, inp.rbc,
                           RobinHoodParams(tax=p.tax, unused_gap=p.unused_gap, floor_bytes=self.ctx.floor_bytes),
                           applied=inp.applied())
        # The time-weighted average of the targets over the learning phase.
        dt = inp.now - self.last if self.last is not None else 0.0
        self.last = inp.now
        for n, t in r.targets.items():
            self.sums[n] = self.sums.get(n, 0.0) + t * dt
        self.weight += dt
        if inp.now - self.start >= self._learn_seconds() and self.weight > 0:
            self.fixed = hold({n: round(v / self.weight) for n, v in self.sums.items()}, sum(inp.targets.values()))
            targets = {n: self.fixed.get(n, t) for n, t in inp.targets.items()}
            return Decision(targets=targets, moved=targets != dict(inp.targets))
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible)


def hold(weights: Mapping[str, int], total: int) -> dict[str, int]:
    """An allocation in proportion to weights that sums exactly to total."""
    return split_weighted(total, {n: max(0, w) for n, w in weights.items()})
