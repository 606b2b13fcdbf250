"""Static: keep the configured allocation (initial_mb / the even share) whatever
happens; the baseline of a fixed partitioning."""
from __future__ import annotations

from collections.abc import Mapping

from .base import AllocationPolicy, Decision, PlanInput
from .registry import register


@register
class Static(AllocationPolicy):
    """Keep the configured allocation."""

    name = "static"
    summary = "keep the configured allocation (initial_mb, else an even split)"
    color = "#1f77b4"
    role = "baseline"

    def initial_targets(self, adopted: Mapping[str, int]) -> dict[str, int]:
        return {n: self.ctx.configured[n] for n in adopted}

    def plan(self, inp: PlanInput) -> Decision:
        targets = {n: self.ctx.configured[n] for n in inp.targets}
        if sum(targets.values()) != sum(inp.targets.values()):
            # Only possible while partitions are excluded from planning with targets
            # that differ from the configuration; keep them as they are.
            targets = dict(inp.targets)
        return Decision(targets=targets, moved=targets != dict(inp.targets))
