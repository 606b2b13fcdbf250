"""LAMA++ (paper §5.1, Table 2): equalize the backends' P99 query latency, with the
statistics shared across app servers.

LAMA (Hu et al., USENIX ATC 2015) repartitions memcached's slab classes to minimize the
average latency from their miss-ratio curves; the paper's LAMA++ changes the goal to
the tail — the P99 latency of each backend's queries — and gives it the shared
statistics. Here, every interval: tax every partition and give the pool to the
partitions whose backend's P99 query latency (over every app server, in the window,
from the statistics service's histograms) is above the mean, in proportion to the
excess. Equal latencies, or no statistics: nothing moves.
"""
from __future__ import annotations

from pydantic import Field

from ._share import excess_over_mean, tax_and_share
from .base import AllocationPolicy, Decision, Params, PlanInput
from .registry import register
from .robinhood import TAX


class LamaParams(Params):
    tax: float = Field(TAX, ge=0, le=0.5, description="fraction of every partition's allocation pooled each tick")


@register
class Lama(AllocationPolicy):
    name = "lama++"
    summary = "equalize the backends' P99 query latency (statistics shared across app servers; paper §5.1)"
    Params = LamaParams
    needs_rbc = True
    color = "#8c564b"
    role = "baseline"

    def plan(self, inp: PlanInput) -> Decision:
        p99 = {n: float(st.p99_query_latency_us) for n, st in inp.stats.items()
               if n in inp.targets and st.queries > 0}
        targets, moved = tax_and_share(inp.targets, excess_over_mean(p99), self.params.tax,  # type: ignore[attr-defined]
                                       self.ctx.floor_bytes)
        return Decision(targets=targets, moved=moved)
