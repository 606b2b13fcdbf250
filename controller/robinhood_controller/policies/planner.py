"""planner (beyond the paper; docs/algorithms.md, "planner"): plan every tick from the
backend-load model (lib/model) fed with what a deployment estimates online — the same
model the oracle plans with offline, fed with the truth.

Every tick it estimates, per backend, from the statistics window (GetStats, every app
server):

- its query rates: cacheable (the cache lookups) and uncacheable, queries/s;
- its miss-ratio curve, from the partitions' stack-distance histogram (the app servers'
  shadow models, in limit bytes: a partition of x bytes hits the queries at most x away);
- its capacity, the least of: the limits the topology declares (lib/model.Capacity); what
  it answers when it is backlogged (sent more than it answered); and what its latency says,
  ρ ≈ 1 − L₀/L from the spread of its query latency against its own baseline (a queue's
  sojourn grows as 1/(1 − ρ)), capacity = sent/ρ;
- the trend of its utilization over the last ticks, extrapolated ``lead`` seconds ahead
  while it rises.

The model (the ``planner`` process, planner.proto) answers each backend's utilization at
the current allocation and the allocation that minimizes the worst predicted utilization
(every app server alike). The decision:

- *saturated*: a backend is backlogged, or predicted at or above its capacity: move to the
  min-max allocation at once (what the model says it needs, and the others' headroom);
- *rising*: a backend's extrapolated utilization reaches ``target``: move at once, before it
  saturates;
- *headroom*: otherwise, when the min-max allocation lowers the worst predicted
  utilization by more than ``hysteresis``, move towards it by at most ``step`` of the budget
  a tick (the estimates of a calm backend are the least certain);
- *hold*: nothing else moves space.

Where an estimate is missing — no statistics, no distance histogram, a backend whose
capacity nothing bounds (no declared limits, no queueing seen), or the planner process
unavailable — the tick is RobinHood's step (paper §3), and the note says why. The decision
is pure (:func:`observe`, :func:`capacity`, :func:`forecast`, :func:`decide`); the model's
evaluation is the only call out.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pydantic import Field
from robinhood.v1 import planner_pb2 as pb
from robinhood_common.split import split_weighted

from ..planner_process import PlannerProcess, PlannerUnavailable
from ..rbc import QueryStats
from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyContext
from .registry import register
from .robinhood import TAX, RobinHoodParams, plan_robinhood

MIB = 1 << 20
UNUSED_GAP = 0.30
"""RobinHood's unused-space rule, as the paper has it (§3.2), for the fallback step."""
BACKLOG = 0.03
"""A backend is backlogged when it answered less than 1/(1 + BACKLOG) of what it was sent
in the window: a few queries in flight at the window's edge (under 2.3% measured on the
zoo's development scenarios) are not a backlog."""
BASELINE_WEIGHT = 0.02
"""A tick's weight in a backend's latency baseline (its spread when it does not queue):
forgets over about 50 ticks, far longer than a queue takes to build."""
MIN_BASELINE_US = 100.0
"""A baseline is at least this: spreads below a tenth of a millisecond are noise."""
LATENCY_RHO = 0.5
"""The latency says nothing about capacity below this utilization (1 − L₀/L): a spread
within twice its baseline is the backend's own noise, not a queue."""
PROVEN_S = 30.0
"""A backend that answered a rate without a backlog in the last PROVEN_S seconds can answer
it: the latency's estimate never goes below it (a latency that reads as a queue while what
the backend is sent falls would otherwise take the capacity down with it)."""
TREND_TICKS = 5
"""The ticks a utilization trend is fitted over."""


class PlannerParams(Params):
    target: float = Field(0.8, gt=0, le=1, description=(
        "the utilization a saturated backend, or one about to saturate, is brought back to"))
    calm: float = Field(0.5, gt=0, le=1, description=(
        "below this utilization everywhere, space moves towards the least worst utilization (headroom); "
        "above it, RobinHood's step"))
    hysteresis: float = Field(0.05, ge=0, le=10, description=(
        "a calm tick moves space only when it lowers the worst predicted utilization by more than this"))
    step: float = Field(0.05, gt=0, le=1, description="most of the budget a calm tick moves")
    lead: float = Field(10.0, ge=0, le=3600, description=(
        "seconds ahead a rising utilization is extrapolated (about the time a grant takes to fill)"))


@dataclass(frozen=True)
class Estimate:
    """One backend over the statistics window, per second."""

    cacheable: float
    uncacheable: float
    sent: float
    """Queries sent to it: the misses looked up and the uncacheable ones, or the answered ones when more."""
    answered: float
    spread_us: float
    """P90 − median of the latency of the queries that reached it, µs (at least 1)."""
    distance_bucket: tuple[int, ...]
    distance_count: tuple[int, ...]


@dataclass(frozen=True)
class State:
    """What the policy remembers between ticks."""

    tick: int = 0
    baseline: Mapping[str, float] = field(default_factory=dict)
    """Per partition, its backend's latency spread when it does not queue, µs."""
    utils: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """Per partition, the last TREND_TICKS (time, measured utilization) since its capacity
    estimate last changed its source."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Per partition, the source of its last capacity estimate."""
    answered: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """Per partition, (time, answered rate) of its windows without a backlog in the last
    PROVEN_S seconds (none since its last backlog)."""
    moved: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    """Per partition, the tick it last moved and why."""


def observe(stats: Mapping[str, QueryStats], window_s: float) -> dict[str, Estimate]:
    """The partitions whose backend has statistics in the window and a distance histogram."""
    out = {}
    for n, st in stats.items():
        if st.queries <= 0 or not st.distance_count or window_s <= 0:
            continue
        cacheable = st.hits + st.misses
        uncacheable = max(st.queries - cacheable, 0)
        answered = max(st.queries - st.hits, 0)
        sent = max(answered, st.misses + uncacheable)
        spread = float(max(st.p90_backend_latency_us - st.p50_backend_latency_us, 1))
        out[n] = Estimate(cacheable=cacheable / window_s, uncacheable=uncacheable / window_s,
                          sent=sent / window_s, answered=answered / window_s, spread_us=spread,
                          distance_bucket=st.distance_bucket, distance_count=st.distance_count)
    return out


def backlogged(e: Estimate) -> bool:
    """It answered less than it was sent, beyond what is in flight at the window's edge."""
    return e.answered > 0 and e.sent > (1 + BACKLOG) * e.answered


@dataclass(frozen=True)
class Capacity:
    """What a backend can answer, queries/s: the estimate, what the policy can vouch for,
    and what said so."""

    estimate: float
    """The least of the declared capacity, the answered rate when backlogged, and sent/ρ
    from the latency spread; inf when nothing bounds it."""
    safe: float
    """At most the estimate: a backend that shows no queue is vouched for only up to
    sent/LATENCY_RHO (its latency would show a queue above that), the declared capacity
    notwithstanding. Space is taken from a backend judged at this."""
    source: str
    """"declared", "backlog", "latency" or "unknown"."""


def capacity(e: Estimate, declared: float, baseline_us: float, proven: float = 0.0) -> Capacity:
    """The backend's capacity from this window's estimate, its declared capacity (inf:
    none), its latency baseline and the most it answered without a backlog lately."""
    if backlogged(e):
        return Capacity(min(e.answered, declared), min(e.answered, declared), "backlog")
    best, source = declared, "declared"
    if baseline_us > 0 and e.spread_us > 0:
        rho = min(1.0 - baseline_us / e.spread_us, 0.99)
        if rho >= LATENCY_RHO and max(e.sent / rho, proven) < best:
            best, source = max(e.sent / rho, proven), "latency"
    if source == "declared":
        safe = min(best, max(e.sent / LATENCY_RHO, proven)) if e.sent > 0 else best
        return Capacity(best, safe, "unknown" if math.isinf(best) else source)
    return Capacity(best, best, source)


def forecast(points: tuple[tuple[float, float], ...], lead_s: float) -> float:
    """The utilization lead_s after the last point when it rises: on the Theil–Sen line
    through the points (the median of the pairwise slopes: one noisy point does not tilt
    it), at most twice the last point; the last point's when it does not rise, or with
    fewer than three points. The points are the ticks since the capacity estimate last
    changed its source: a step from one source to another is not a trend."""
    if not points:
        return 0.0
    last = points[-1][1]
    if len(points) < 3:
        return last
    slopes = sorted((u2 - u1) / (t2 - t1) for i, (t1, u1) in enumerate(points) for t2, u2 in points[i + 1:]
                    if t2 > t1)
    if not slopes:
        return last
    k = len(slopes)
    slope = slopes[k // 2] if k % 2 else (slopes[k // 2 - 1] + slopes[k // 2]) / 2
    return min(last + slope * lead_s, 2 * last) if slope > 0 else last


@dataclass(frozen=True)
class Step:
    """One tick's decision, with what it saw, for notes and tests."""

    targets: dict[str, int]
    reason: str
    """The tick's reason (base.MOVE_REASONS)."""
    why: str
    """The partition(s) behind it, or what was missing, for the note."""
    predicted: dict[str, float]
    """Per partition, the predicted utilization of its backend with the new targets."""


def toward(targets: Mapping[str, int], goal: Mapping[str, int], most: int) -> dict[str, int]:
    """The targets moved towards goal (the same sum) by at most ``most`` bytes in all:
    each partition the same fraction of its way, in whole bytes, the sum kept exactly."""
    way = sum(max(goal[n] - t, 0) for n, t in targets.items())
    if way <= most:
        return dict(goal)
    f = most / way
    out = {n: t + int((goal[n] - t) * f) for n, t in targets.items()}
    left = sum(targets.values()) - sum(out.values())
    if left:  # the bytes int() dropped, to the partitions still short of their goal
        short = {n: max(goal[n] - out[n], 0) for n in out}
        if sum(short.values()) == 0:
            short = {n: 1 for n in out}
        for n, b in split_weighted(left, short).items():
            out[n] += b
    return out


def relieve(targets: Mapping[str, int], need: Mapping[str, int], short: list[str], floor: int) -> dict[str, int]:
    """The targets that give each partition in ``short`` its need (bytes), taken from the
    partitions whose targets exceed their own need, the most surplus first, none below its
    need or the floor: only what the short ones need moves. When the surplus is not enough,
    all of it goes to the short ones in proportion to what they lack."""
    want = {n: need[n] - targets[n] for n in short if need[n] > targets[n]}
    total = sum(want.values())
    surplus = {n: targets[n] - max(need[n], floor) for n in targets if n not in want}
    surplus = {n: v for n, v in surplus.items() if v > 0}
    give = min(total, sum(surplus.values()))
    out = dict(targets)
    if give <= 0:
        return out
    left = give
    for n in sorted(surplus, key=lambda n: (-surplus[n], n)):
        take = min(surplus[n], left)
        out[n] -= take
        left -= take
        if left == 0:
            break
    for n, b in split_weighted(give, want).items():
        out[n] += b
    return out


def decide(targets: Mapping[str, int], est: Mapping[str, Estimate], answer: pb.PlanAnswer,
           util: Mapping[str, float], rising: Mapping[str, float], p: PlannerParams, budget: int,
           floor: int) -> Step | None:
    """The tick's decision from the model's answer (backends in sorted partition order; its
    first evaluated allocation is the step towards the min-max one), each backend's
    measured utilization (sent/capacity) and the extrapolated utilization of those whose
    utilization rises; None when no rule applies (the backends are loaded, none saturates
    or is about to: RobinHood's step, whose blocking counts say which of them the tail
    waits for)."""
    names = sorted(targets)
    planned = {b.name: b for b in answer.backends}
    whole = budget // MIB
    need = {n: (planned[n].need_mb if planned[n].need_mb >= 0 else whole) * MIB for n in names}
    safe = {n: (planned[n].safe_need_mb if planned[n].safe_need_mb >= 0 else whole) * MIB for n in names}
    for reason, short in (("saturated", [n for n in names if backlogged(est[n]) or util[n] >= 1]),
                          ("rising", [n for n in names if rising.get(n, 0.0) >= 1])):
        if not short:
            continue
        given = relieve(targets, {n: need[n] if n in short else safe[n] for n in names}, short, floor)
        if given != dict(targets):
            return Step(given, reason, ", ".join(short), {n: planned[n].util for n in names})
    if max(util.values()) >= p.calm:
        return None
    now = {n: planned[n].util for n in names}
    minmax = _bytes({n: planned[n].minmax_mb for n in names}, budget)
    if answer.worst - answer.minmax_worst > p.hysteresis:
        moved = toward(targets, minmax, int(p.step * budget))
        ev = answer.evaluated[0]
        predicted = dict(zip(names, ev.util)) if moved != minmax else {n: planned[n].minmax_util for n in names}
        worst = max(now, key=lambda n: now[n])
        return Step(moved, "headroom", worst, predicted)
    return Step(dict(targets), "hold", "", now)


def _bytes(mb: Mapping[str, int], budget: int) -> dict[str, int]:
    """Whole MiB as bytes, the budget's odd bytes (a budget that is not whole MiB) to the largest."""
    out = {n: m * MIB for n, m in mb.items()}
    left = budget - sum(out.values())
    if left:
        big = max(sorted(out), key=lambda n: out[n])
        out[big] += left
    return out


@register
class Planner(AllocationPolicy):
    name = "planner"
    summary = ("plans every tick from the backend-load model the oracle uses, fed with online estimates: keeps "
               "the worst predicted utilization low, acts on a rising one (beyond the paper)")
    Params = PlannerParams
    needs_rbc = True
    color = "#17becf"
    role = "candidate"

    def __init__(self, params: Params, ctx: PolicyContext) -> None:
        super().__init__(params, ctx)
        self.state = State()
        self.process = PlannerProcess()
        self._declared: dict[str, float] | None = None

    def declared(self) -> dict[str, float]:
        """Each partition's declared capacity (lib/model.Capacity of the topology's limits;
        inf: they bound nothing), asked of the planner once."""
        if self._declared is None:
            names = sorted(self.ctx.declared)
            lims = [self.ctx.declared[n] for n in names]
            caps = self.process.capacity([pb.PlannerLimits(
                workers=lim.workers, rate=lim.rate, extra_latency_ms=lim.extra_latency_ms,
                hiccup_prob=lim.hiccup_prob, hiccup_ms=lim.hiccup_ms) for lim in lims])
            self._declared = dict(zip(names, caps))
        return self._declared

    def fallback(self, inp: PlanInput, why: str,
                 estimates: dict[str, dict[str, float | str]] | None = None) -> Decision:
        rh = plan_robinhood(inp.targets, inp.used, inp.rbc,
                            RobinHoodParams(tax=TAX, unused_gap=UNUSED_GAP, floor_bytes=self.ctx.floor_bytes),
                            applied=inp.applied())
        moved = dict(self.state.moved)
        for n in inp.targets:
            if rh.targets[n] != inp.targets[n]:
                moved[n] = (self.state.tick, "robinhood")
        self.state = replace(self.state, moved=moved)
        return Decision(targets=rh.targets, moved=rh.redistributed, eligible=rh.eligible,
                        note=f"planner: robinhood ({why})", reasons=self.reasons(), predicted={},
                        estimates=estimates)

    @staticmethod
    def _estimates(names: list[str], caps: Mapping[str, Capacity], cap: Mapping[str, float],
                   est: Mapping[str, Estimate], measured: Mapping[str, float],
                   answer: pb.PlanAnswer) -> dict[str, dict[str, float | str]]:
        """What the timeline records of the tick's estimates, per partition."""
        planned = {b.name: b for b in answer.backends}
        return {n: {"capacity": round(caps[n].estimate, 3), "safe_capacity": round(caps[n].safe, 3),
                    "capacity_source": caps[n].source, "planned_capacity": round(cap[n], 3),
                    "sent": round(est[n].sent, 3), "answered": round(est[n].answered, 3),
                    "cacheable_rate": round(est[n].cacheable, 3), "uncacheable_rate": round(est[n].uncacheable, 3),
                    "utilization": round(measured[n], 4), "model_utilization": round(planned[n].util, 4),
                    "miss_ratio": round(planned[n].miss_ratio, 4), "need_mb": planned[n].need_mb}
                for n in names}

    def reasons(self) -> dict[str, str]:
        return {n: r for n, (_, r) in self.state.moved.items()}

    def plan(self, inp: PlanInput) -> Decision:
        p: PlannerParams = self.params  # type: ignore[assignment]
        st = self.state
        tick = st.tick + 1
        self.state = st = replace(st, tick=tick)
        names = sorted(inp.targets)
        est = observe(inp.stats, self.ctx.window_s or 0.0)
        missing = [n for n in names if n not in est]
        if missing:
            return self.fallback(inp, "no statistics or distance histogram for " + ", ".join(missing))
        try:
            declared = self.declared()
        except PlannerUnavailable as e:
            return self.fallback(inp, str(e))
        base = dict(st.baseline)
        for n in names:  # a first spread is its own baseline
            base.setdefault(n, max(est[n].spread_us, MIN_BASELINE_US))
        answered = dict(st.answered)
        for n in names:
            if backlogged(est[n]):
                answered[n] = ()
            else:
                answered[n] = tuple((t, a) for t, a in answered.get(n, ()) if t > inp.now - PROVEN_S) + (
                    (inp.now, est[n].answered),)
        self.state = st = replace(st, answered=answered)
        caps = {n: capacity(est[n], declared.get(n, math.inf), base[n], max((a for _, a in answered[n]), default=0.0))
                for n in names}
        unknown = [n for n in names if caps[n].source == "unknown"]
        # Baselines follow the spread of the backends that do not queue.
        for n in names:
            if caps[n].source in ("declared", "unknown") and not backlogged(est[n]):
                base[n] = max((1 - BASELINE_WEIGHT) * base[n] + BASELINE_WEIGHT * est[n].spread_us, MIN_BASELINE_US)
        self.state = st = replace(st, baseline=base)
        if unknown:
            return self.fallback(inp, "no capacity known for " + ", ".join(unknown))
        utils = dict(st.utils)
        rising: dict[str, float] = {}
        cap = {n: c.estimate for n, c in caps.items()}
        for n in names:
            u = est[n].sent / cap[n]
            before = utils.get(n, ()) if st.sources.get(n) == caps[n].source else ()
            pts = (before + ((inp.now, u),))[-TREND_TICKS:]
            utils[n] = pts
            f = forecast(pts, p.lead)
            if f > u:  # rising: plan for the capacity the trend leaves in lead seconds
                rising[n] = f
                cap[n] = min(cap[n], est[n].sent / f)
        self.state = st = replace(st, utils=utils, sources={n: c.source for n, c in caps.items()})
        budget_mb = self.ctx.budget_bytes // MIB
        floor_mb = -(-self.ctx.floor_bytes // MIB)
        req = pb.PlanRequest(budget_mb=budget_mb, floor_mb=floor_mb, target=p.target,
                             app_servers=self.ctx.app_servers)
        for n in names:
            e = est[n]
            req.backends.append(pb.PlannerBackend(
                name=n, cacheable_rate=e.cacheable, uncacheable_rate=e.uncacheable, capacity=cap[n],
                safe_capacity=min(caps[n].safe, cap[n]),
                distance_bucket=e.distance_bucket, distance_count=e.distance_count,
                alloc_mb=inp.targets[n] / MIB))
        try:
            answer = self.process.plan(req)
            goal = _bytes({b.name: b.minmax_mb for b in answer.backends}, self.ctx.budget_bytes)
            step = toward(inp.targets, goal, int(p.step * self.ctx.budget_bytes))
            req.evaluate.append(pb.PlannerAllocation(mb=[step[n] / MIB for n in names]))
            answer = self.process.plan(req)
        except PlannerUnavailable as e:
            return self.fallback(inp, str(e))
        measured = {n: est[n].sent / caps[n].estimate for n in names}
        d = decide(inp.targets, est, answer, measured, rising, p, self.ctx.budget_bytes, self.ctx.floor_bytes)
        if d is None:
            return self.fallback(inp, "loaded: the blocking counts say where", estimates=self._estimates(
                names, caps, cap, est, measured, answer))
        estimates = self._estimates(names, caps, cap, est, measured, answer)
        moved = dict(st.moved)
        for n in names:
            if d.targets[n] != inp.targets[n]:
                moved[n] = (tick, d.reason)
        self.state = replace(st, moved=moved)
        note = ""
        if d.reason != "hold":
            worst = max(d.predicted.values(), default=0.0)
            note = f"planner: {d.reason} ({d.why}); worst predicted utilization {answer.worst:.2f} -> {worst:.2f}"
        return Decision(targets=d.targets, moved=d.targets != dict(inp.targets), note=note,
                        reasons=self.reasons(), predicted=d.predicted, estimates=estimates)


__all__ = ["Planner", "PlannerParams", "Estimate", "Capacity", "State", "Step", "observe", "backlogged", "capacity",
           "forecast", "toward", "relieve", "decide"]
