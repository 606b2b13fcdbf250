"""FAIR++ (paper §5.1, Table 2): equalize the backends' cache miss ratios, with the
statistics shared across app servers.

FAIR allocates a shared cache so that every tenant sees the same miss ratio; the paper's
"++" variant gives it the same statistics server RobinHood has, so every app server
sees every app server's hits and misses. Here, every interval: tax every partition
(``tax``, never below the floor) and give the pool to the partitions whose miss ratio
(over every app server, in the window) is above the mean, in proportion to the excess.
Partitions without cacheable queries in the window neither give nor take beyond the
tax. When all miss ratios are equal (or no statistics arrived), nothing moves.
"""
from __future__ import annotations

from pydantic import Field

from ._share import excess_over_mean, tax_and_share
from .base import AllocationPolicy, Decision, Params, PlanInput
from .registry import register
from .robinhood import TAX


class FairParams(Params):
    tax: float = Field(TAX, ge=0, le=0.5, description="fraction of every partition's allocation pooled each tick")


@register
class Fair(AllocationPolicy):
    name = "fair++"
    summary = "equalize the backends' miss ratios (statistics shared across app servers; paper §5.1)"
    Params = FairParams
    needs_rbc = True
    color = "#9467bd"
    role = "baseline"

    def plan(self, inp: PlanInput) -> Decision:
        ratios = {n: st.miss_ratio for n, st in inp.stats.items() if n in inp.targets and st.miss_ratio is not None}
        targets, moved = tax_and_share(inp.targets, excess_over_mean(ratios), self.params.tax,  # type: ignore[attr-defined]
                                       self.ctx.floor_bytes)
        return Decision(targets=targets, moved=moved)
