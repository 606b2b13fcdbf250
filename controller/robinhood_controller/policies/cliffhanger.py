"""Cliffhanger++ (paper §5.1, Table 2): hill climbing on the hit-rate gradients of the
partitions, estimated from shadow-queue hits, with the statistics shared across app
servers.

Cliffhanger (Cidon et al., NSDI 2016) keeps a small shadow queue behind every cache
queue; a hit in it means more space would have hit, and the queue with the most shadow
hits per byte takes space from the one with the fewest. Here the app servers' shadow
models count, per partition, the misses that ``shadow_bytes`` more cache would have hit
(docs/algorithms.md, "Shadow hits"); their sum over every app server in the window,
divided by ``shadow_bytes``, is the partition's gradient. Every interval ``step`` of
the budget moves from the partition with the lowest gradient (that is above its floor)
to the one with the highest, when the two differ. No statistics: nothing moves.
"""
from __future__ import annotations

from pydantic import Field

from .base import AllocationPolicy, Decision, Params, PlanInput
from .registry import register


class CliffhangerParams(Params):
    step: float = Field(0.01, gt=0, le=0.5, description="fraction of the budget moved per tick, from the lowest gradient to the highest")


@register
class Cliffhanger(AllocationPolicy):
    name = "cliffhanger++"
    summary = "hill climbing on shadow-queue hit gradients (statistics shared across app servers; paper §5.1)"
    Params = CliffhangerParams
    needs_rbc = True
    color = "#ff7f0e"
    role = "baseline"

    def plan(self, inp: PlanInput) -> Decision:
        grad = {n: st.shadow_hits / st.shadow_bytes for n, st in inp.stats.items()
                if n in inp.targets and st.shadow_bytes > 0}
        targets = dict(inp.targets)
        if len(grad) < 2:
            return Decision(targets=targets, moved=False)
        # Ties go to the name that sorts first, so the plan is deterministic.
        hi = max(sorted(grad), key=lambda n: grad[n])
        donors = [n for n in sorted(grad, key=lambda n: (grad[n], n))
                  if n != hi and targets[n] > self.ctx.floor_bytes]
        if not donors or grad[donors[0]] >= grad[hi]:
            return Decision(targets=targets, moved=False)
        lo = donors[0]
        move = min(int(self.ctx.budget_bytes * self.params.step),  # type: ignore[attr-defined]
                   targets[lo] - self.ctx.floor_bytes)
        targets[lo] -= move
        targets[hi] += move
        return Decision(targets=targets, moved=move > 0)
