"""Oracle (beyond the paper): the allocation schedule computed in advance from the run's
trace, topology and capacity scenario — the best schedule known for the run, which every
online policy is measured against (not a bound: an online arm's allocation that measures
better becomes it).

``tracegen oracle`` (``experiment/feasibility``; docs/algorithms.md, "The oracle") steps a
model of the run through time — each backend's queue (its capacity model under the load its
misses make), each partition filling at the rate its backend answers misses, a backlog
outliving the phase that built it — and searches, segment by segment, for the allocation
with the fewest predicted SLO violations. It writes two schedules per app server: with
**foresight** (the run known in advance: space can move before a drop, while the partition
can still fill) and **reactive** (each phase of the scenario learnt the instant it starts,
nothing after it), and the candidate schedules the one with foresight is chosen from. The
testbed runs it once per run, simulates the candidates and keeps the best measured one as the
schedule with foresight (docs/algorithms.md, "Judged in the simulator"), and names the file in
``controller.run.oracle``. After a comparison in the simulator, an online arm that measured
fewer SLO violations has its recorded allocation judged too (``hindsight-<arm>``), so the
schedule with foresight is the best one known for the run. The reactive schedule is the
``oracle-reactive`` policy's.

At every tick the policy applies its app server's schedule at the time since the run's start
(the start file; else since its first tick). It moves the whole way at once: the mechanism
still frees memory at memcached's pace.
"""
from __future__ import annotations

from robinhood_common import schedule

from ..plan import MIB
from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyContext, PolicyError
from .registry import register


def read_schedule(path: str, app_server: str, variant: str,
                  ctx: PolicyContext | None = None) -> list[tuple[float, dict[str, int]]]:
    """An app server's schedule from ``tracegen oracle``'s JSON: (start s, MB per partition)
    in time order. PolicyError names what is wrong with the file: what
    robinhood_common.schedule refuses (no regular file of at most its bound, not JSON,
    the app server's schedules against schema/oracle.schema.yaml), no such schedule, steps
    out of time order, or steps ctx (when given) cannot apply — every partition of the app
    server and no other, of at least the floor, summing to the budget."""
    try:
        part = schedule.app_server(schedule.load(path), app_server, path)
    except schedule.ScheduleError as e:
        raise PolicyError(f"oracle: {e}") from None
    if variant not in part:
        raise PolicyError(f"oracle: {path} has no {variant} schedule for app server {app_server} "
                          f"(tracegen oracle writes app_server_schedules.<id>.<variant>.steps)")
    out = [(float(s["at_s"]), {str(k): int(v) for k, v in s["mb"].items()}) for s in part[variant]["steps"]]
    if any(b[0] < a[0] for a, b in zip(out, out[1:])):
        raise PolicyError(f"oracle: {path}: the {variant} schedule of {app_server} is not in time order")
    if ctx is not None:
        for i, (_, mb) in enumerate(out):
            _fits(mb, ctx, f"oracle: {path}: app_server_schedules.{app_server}.{variant}.steps[{i}].mb")
    return out


def _fits(mb: dict[str, int], ctx: PolicyContext, where: str) -> None:
    """PolicyError unless a step gives every partition of ctx, and no other, at least the
    floor, summing to the budget: what the policy can apply (anything else would never
    be)."""
    names = set(ctx.configured)
    if unknown := sorted(set(mb) - names):
        raise PolicyError(f"{where}: {unknown[0]!r} is not a partition of app server {ctx.app_server} "
                          f"(it has {', '.join(sorted(names))})")
    if missing := sorted(names - set(mb)):
        raise PolicyError(f"{where}: no size for partition {missing[0]!r}")
    floor_mb, budget_mb = ctx.floor_bytes / MIB, ctx.budget_bytes / MIB
    for n in sorted(mb):
        if mb[n] < floor_mb:
            raise PolicyError(f"{where}.{n}: {mb[n]} MB is below controller.min_partition_mb ({floor_mb:g} MB)")
    if sum(mb.values()) != budget_mb:
        raise PolicyError(f"{where}: the sizes sum to {sum(mb.values())} MB, not the cache budget "
                          f"({budget_mb:g} MB)")


@register
class Oracle(AllocationPolicy):
    name = "oracle"
    summary = ("the allocation schedule with the fewest SLO violations, computed in advance from the run's trace and "
               "scenario with foresight (tracegen oracle's model; the best of its candidates, and of the online arms' "
               "recorded allocations, as the simulator measures them): the best schedule known for the run, which "
               "online policies are measured against (beyond the paper)")
    needs_run = True
    color = "#000000"
    role = "bound"

    def __init__(self, params: Params, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, ctx)
        self.start: float | None = None
        self.steps = self.schedule()  # fail at start (PolicyError), not at the first tick

    def schedule(self) -> list[tuple[float, dict[str, int]]]:
        run = self.ctx.run
        if run is None or not run.oracle:
            raise PolicyError("oracle: controller.run.oracle must name the run's schedule file (tracegen oracle; "
                              "the testbed writes it)")
        return read_schedule(run.oracle, self.ctx.app_server, self.variant(), self.ctx)

    def variant(self) -> str:
        """Which of the run's schedules it applies."""
        return "foresight"

    def plan(self, inp: PlanInput) -> Decision:
        if self.start is None:
            self.start = self.ctx.run_start() or inp.now
        elif (s := self.ctx.run_start()) is not None:
            self.start = s
        t = inp.now - self.start
        mb = self.steps[0][1]
        for start, alloc in self.steps:
            if t >= start:
                mb = alloc
        targets = {n: mb.get(n, 0) * MIB for n in inp.targets}
        if sum(targets.values()) != sum(inp.targets.values()) or any(v < self.ctx.floor_bytes for v in targets.values()):
            return Decision(targets=dict(inp.targets), moved=False)
        return Decision(targets=targets, moved=targets != dict(inp.targets))
