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
is pure (:func:`observe`, :func:`capacity`, :func:`trend`, :func:`relieve`, :func:`choose`); the model's
evaluation is the only call out.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pydantic import Field, StrictBool
from robinhood.v1 import planner_pb2 as pb
from robinhood_common.split import split_weighted

from ..planner_process import PlannerProcess, PlannerUnavailable
from ..rbc import QueryStats
from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyContext
from .registry import register
from .robinhood import TAX, RobinHoodParams, plan_robinhood

MIB = 1 << 20
US_PER_S = 1_000_000
"""Microseconds in a second (the statistics are in µs, the SLO in seconds)."""
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
SLAB_OVERHEAD_MB = 0.5
"""What a slab class holding pages costs a memcached partition that holds nothing: half its
last page on average. A partition's curve is read at other sizes with this taken off every
size (lib/model.WithOverhead): a small partition is worth less than its share of a large
one."""
REGRANT = 0.25
"""A backend whose grant is still filling is given more when its capacity estimate fell by
this share since the grant."""
FILLED = 0.9
"""A partition given space has filled it once it uses this share of its target."""
MEMORY_S = 30.0
"""A capacity learned from a backend's backlog or queue holds this long without new
evidence (a backend whose queue the tail stops waiting for has not recovered for that)."""
HISTOGRAM_GAMMA = 1.04
HISTOGRAM_BUCKETS = 470
"""lib/loghist's buckets, which the distance histogram is in (the last: never hit)."""
TREND_TICKS = 5
"""The ticks a utilization trend is fitted over."""


class PlannerParams(Params):
    target: float = Field(0.65, gt=0, le=1, description=(
        "the utilization a relieved backend is brought to; the projection counts pressure beyond it"))
    horizon: int = Field(30, ge=1, le=600, description="seconds a candidate move is projected over")
    hysteresis: float = Field(0.05, ge=0, le=10, description=(
        "how much better than keeping the allocation a move must project (pressure per second, final utilization)"))
    step: float = Field(0.05, gt=0, le=1, description="most of the budget a calm tick moves towards the min-max allocation")
    lead: float = Field(10.0, ge=0, le=3600, description=(
        "seconds over which a rising utilization's trend is taken to go on (the projection's falling capacity)"))
    alarm: float = Field(0.3, ge=0, le=10, description=(
        "a backend's latency says something of its capacity only while the request P99 is at least this fraction "
        "of the SLO (not applied without one) and it blocks at least an even share of the tail"))
    bias_capacity: float = Field(1.0, gt=0, le=100, description=(
        "experiments only: every capacity estimate multiplied by this (how the policy degrades)"))
    bias_rate: float = Field(1.0, gt=0, le=100, description=(
        "experiments only: every query-rate estimate multiplied by this"))
    bias_curve: float = Field(1.0, gt=0, le=100, description=(
        "experiments only: every stack distance multiplied by this (the miss-ratio curve stretched)"))
    headroom: StrictBool = Field(False, description=(
        "with every backend calm, step towards the allocation with the least worst predicted utilization "
        "(false: RobinHood's step, as when loaded)"))
    donor_step: float = Field(0.25, gt=0, le=1, description="most of a donor's partition taken in a tick")
    calm: float = Field(0.5, gt=0, le=1, description=(
        "below this utilization everywhere, nothing the model sees is at stake: only bounded steps towards the "
        "min-max allocation; above it, when no move projects better, RobinHood's step"))


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
    learned: Mapping[str, Learned] = field(default_factory=dict)
    """Per partition, the capacity learned from its backend's behaviour (capacity())."""
    grants: Mapping[str, float] = field(default_factory=dict)
    """Per partition, its backend's capacity estimate when it was last given space."""
    capacities: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """Per partition, the last TREND_TICKS (time, learned capacity) while one is learned."""
    moved: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    """Per partition, the tick it last moved and why."""


def observe(stats: Mapping[str, QueryStats], window_s: float, rate_bias: float = 1.0,
            curve_bias: float = 1.0) -> dict[str, Estimate]:
    """The partitions whose backend has statistics in the window and a distance histogram
    (the biases make the estimates worse on purpose, for experiments: rates multiplied,
    distances stretched)."""
    out = {}
    shift = round(math.log(curve_bias) / math.log(HISTOGRAM_GAMMA))
    for n, st in stats.items():
        if st.queries <= 0 or not st.distance_count or window_s <= 0:
            continue
        cacheable = st.hits + st.misses
        uncacheable = max(st.queries - cacheable, 0)
        answered = max(st.queries - st.hits, 0)
        sent = max(answered, st.misses + uncacheable)
        spread = float(max(st.p90_backend_latency_us - st.p50_backend_latency_us, 1))
        buckets = st.distance_bucket
        if shift:
            buckets = tuple(b if b == HISTOGRAM_BUCKETS - 1 else min(max(b + shift, 0), HISTOGRAM_BUCKETS - 2)
                            for b in buckets)
        w = window_s / rate_bias
        out[n] = Estimate(cacheable=cacheable / w, uncacheable=uncacheable / w, sent=sent / w,
                          answered=answered / w, spread_us=spread, distance_bucket=buckets,
                          distance_count=st.distance_count)
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


@dataclass(frozen=True)
class Learned:
    """A capacity the policy learned from a backend's behaviour (a backlog or a queue
    the requests wait for), and when it last saw evidence of it."""

    value: float
    at: float


def capacity(e: Estimate, declared: float, baseline_us: float, learned: Learned | None, now: float,
             symptomatic: bool = True) -> tuple[Capacity, Learned | None]:
    """The backend's capacity this tick, and what it keeps learned.

    Evidence first: a backlog says the capacity is what it answered; a queue the requests
    wait for (``symptomatic``: the request P99 is at least ``alarm`` of the SLO and the
    backend blocks at least an even share of the tail) says sent/ρ, with ρ = 1 − L₀/L from
    its latency spread against its baseline (when at least LATENCY_RHO). Without evidence,
    a capacity learned in the last MEMORY_S seconds holds (raised to what the backend
    answers without a backlog: it can answer that), else the declared one. Never above
    the declared capacity. A backend known only by its declared capacity is vouched for up
    to sent/ρ from its latency even where no request shows it, and never above
    sent/LATENCY_RHO (its latency would show a queue above that): space is taken from it
    judged at that (``safe``)."""
    fresh, source = None, ""
    rho = min(max(1.0 - baseline_us / e.spread_us, 0.0), 0.99) if baseline_us > 0 and e.spread_us > 0 else 0.0
    if backlogged(e):
        fresh, source = e.answered, "backlog"
    elif symptomatic and rho >= LATENCY_RHO:
        fresh, source = e.sent / rho, "latency"
    if fresh is not None:
        learned = Learned(fresh, now)
    elif learned is not None and now - learned.at <= MEMORY_S:
        learned, source = Learned(max(learned.value, e.answered), learned.at), "remembered"
    else:
        learned = None
    if learned is not None and learned.value < declared:
        return Capacity(learned.value, learned.value, source), learned
    if math.isinf(declared):
        return Capacity(declared, declared, "unknown"), learned
    safe = min(declared, e.sent / max(rho, LATENCY_RHO)) if e.sent > 0 else declared
    return Capacity(declared, safe, "declared"), learned


def trend(points: tuple[tuple[float, float], ...]) -> float:
    """The slope per second of the Theil–Sen line through the points (the median of the
    pairwise slopes: one noisy point does not tilt it); 0 with fewer than three."""
    if len(points) < 3:
        return 0.0
    slopes = sorted((y2 - y1) / (t2 - t1) for i, (t1, y1) in enumerate(points) for t2, y2 in points[i + 1:]
                    if t2 > t1)
    if not slopes:
        return 0.0
    k = len(slopes)
    return slopes[k // 2] if k % 2 else (slopes[k // 2 - 1] + slopes[k // 2]) / 2


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


def relieve(targets: Mapping[str, int], need: Mapping[str, int], short: list[str], floor: int,
            donor_step: float = 1.0) -> dict[str, int]:
    """The targets that give each partition in ``short`` its need (bytes), taken from the
    partitions whose targets exceed their own need, the most surplus first, none below its
    need or the floor, none giving more than ``donor_step`` of its target: only what the
    short ones need moves. When the surplus is not enough, all of it goes to the short ones
    in proportion to what they lack."""
    want = {n: need[n] - targets[n] for n in short if need[n] > targets[n]}
    total = sum(want.values())
    surplus = {n: min(targets[n] - max(need[n], floor), int(donor_step * targets[n]))
               for n in targets if n not in want}
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


OVERLOAD_MARGIN = 0.5
"""A move must project at least this many fewer saturated backend-seconds than keeping the
allocation to be chosen for it (half a second: below it the projection cannot tell)."""


@dataclass(frozen=True)
class Candidate:
    """One allocation the tick considers, and how it projects."""

    name: str
    """"keep", "relieve" or "step"."""
    targets: dict[str, int]
    overload: float = 0.0
    pressure: float = 0.0
    final: float = 0.0
    util: tuple[float, ...] = ()
    """The steady-state utilization per backend (sorted partition order)."""


def better(a: Candidate, b: Candidate, p: PlannerParams) -> bool:
    """a projects better than b beyond the margins: fewer saturated seconds; as many,
    and less pressure beyond the target; as much, and a lower final worst utilization."""
    if a.overload < b.overload - OVERLOAD_MARGIN:
        return True
    if a.overload > b.overload + OVERLOAD_MARGIN:
        return False
    if a.pressure < b.pressure - p.hysteresis * p.horizon:
        return True
    if a.pressure > b.pressure + p.hysteresis * p.horizon:
        return False
    return a.final < b.final - p.hysteresis


def choose(cands: list[Candidate], p: PlannerParams) -> Candidate:
    """The first candidate (keep) unless a later one projects better than the best so far."""
    best = cands[0]
    for c in cands[1:]:
        if better(c, best, p):
            best = c
    return best


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
                   est: Mapping[str, Estimate], measured: Mapping[str, float], answer: pb.PlanAnswer,
                   declared: Mapping[str, float]) -> dict[str, dict[str, float | str]]:
        """What the timeline records of the tick's estimates, per partition."""
        planned = {b.name: b for b in answer.backends}
        return {n: {"capacity": round(caps[n].estimate, 3), "safe_capacity": round(caps[n].safe, 3),
                    "declared_capacity": declared.get(n, math.inf) if math.isfinite(declared.get(n, math.inf))
                    else "inf",
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
        est = observe(inp.stats, self.ctx.window_s or 0.0, p.bias_rate, p.bias_curve)
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
        slo_us = self.ctx.slo.latency * US_PER_S if self.ctx.slo is not None else None
        alarm = slo_us is None or (inp.p99_latency_us is not None and inp.p99_latency_us >= p.alarm * slo_us)
        blocking = sum(inp.rbc.get(n, 0) for n in names)
        caps: dict[str, Capacity] = {}
        learned = dict(st.learned)
        for n in names:
            c, l_ = capacity(est[n], declared.get(n, math.inf), base[n], learned.get(n), inp.now,
                             symptomatic=alarm and blocking > 0 and inp.rbc.get(n, 0) * len(names) >= blocking)
            caps[n] = c
            if l_ is None:
                learned.pop(n, None)
            else:
                learned[n] = l_
        if p.bias_capacity != 1:
            caps = {n: Capacity(c.estimate * p.bias_capacity, c.safe * p.bias_capacity, c.source)
                    for n, c in caps.items()}
        unknown = [n for n in names if caps[n].source == "unknown"]
        # Baselines follow the spread of the backends that do not queue.
        for n in names:
            if caps[n].source in ("declared", "unknown"):
                base[n] = max((1 - BASELINE_WEIGHT) * base[n] + BASELINE_WEIGHT * est[n].spread_us, MIN_BASELINE_US)
        self.state = st = replace(st, baseline=base, learned=learned)
        if unknown:
            return self.fallback(inp, "no capacity known for " + ", ".join(unknown))
        # A learned capacity's trend: where it falls, the projection and the need take it
        # on for `lead` seconds (a backend losing capacity is relieved before it saturates).
        history = dict(st.capacities)
        cap = {n: c.estimate for n, c in caps.items()}
        slope: dict[str, float] = {}
        rising: dict[str, float] = {}
        for n in names:
            if n not in learned:
                history.pop(n, None)
                continue
            pts = (history.get(n, ()) + ((inp.now, caps[n].estimate),))[-TREND_TICKS:]
            history[n] = pts
            s_ = trend(pts)
            if s_ < 0:
                slope[n] = s_
                cap[n] = max(caps[n].estimate + s_ * p.lead, caps[n].estimate / 2)
                rising[n] = est[n].sent / cap[n]
        self.state = st = replace(st, capacities=history)
        budget = self.ctx.budget_bytes
        req = pb.PlanRequest(budget_mb=budget // MIB, floor_mb=-(-self.ctx.floor_bytes // MIB), target=p.target,
                             app_servers=self.ctx.app_servers, horizon_s=p.horizon)
        for n in names:
            e = est[n]
            sample = inp.samples.get(n)
            req.backends.append(pb.PlannerBackend(
                name=n, cacheable_rate=e.cacheable, uncacheable_rate=e.uncacheable, capacity=cap[n],
                safe_capacity=min(caps[n].safe, cap[n]), distance_bucket=e.distance_bucket,
                distance_count=e.distance_count,
                alloc_mb=inp.targets[n] / MIB, held_mb=min(inp.used.get(n, 0), inp.targets[n]) / MIB,
                queue=max(e.sent - e.answered, 0.0) * (self.ctx.window_s or 0.0),
                capacity_slope=slope.get(n, 0.0),
                timeout_s=self.ctx.backend_timeout_s,
                mean_value_bytes=sample.item_bytes / sample.items if sample and sample.items else 0.0,
                limit_mb=sample.limit_bytes / MIB if sample else 0.0,
                overhead_mb=SLAB_OVERHEAD_MB * sample.slab_classes if sample else 0.0))
        measured = {n: est[n].sent / caps[n].estimate for n in names}
        try:
            answer = self.process.plan(req)
            planned = {b.name: b for b in answer.backends}
            whole = budget // MIB
            need = {n: (planned[n].need_mb if planned[n].need_mb >= 0 else whole) * MIB for n in names}
            safe = {n: (planned[n].safe_need_mb if planned[n].safe_need_mb >= 0 else whole) * MIB for n in names}
            # A backend whose grant is still filling is short again only when its backlog
            # says so, or its capacity fell a quarter since the grant (it was too small):
            # the space it was given has not taken load off it yet.
            def filling(n: str) -> bool:
                g = st.grants.get(n)
                return g is not None and inp.used.get(n, 0) < FILLED * inp.targets[n] and \
                    caps[n].estimate > (1 - REGRANT) * g
            short = [n for n in names if backlogged(est[n]) or
                     (max(measured[n], rising.get(n, 0.0)) >= p.target and not filling(n))]
            minmax = _bytes({n: planned[n].minmax_mb for n in names}, budget)
            calm = max(measured.values()) < p.calm and not short
            cands = [Candidate("keep", dict(inp.targets))]
            if short:
                given = relieve(inp.targets, {n: need[n] if n in short else safe[n] for n in names}, short,
                                self.ctx.floor_bytes, p.donor_step)
                if not any(caps[n].source == "backlog" for n in short):
                    # Only the latency says so: its capacity is the least certain
                    # estimate; a bounded step, and the next tick sees what it did.
                    given = toward(inp.targets, given, int(p.step * budget))
                cands.append(Candidate("relieve", given))
            if calm and p.headroom:
                cands.append(Candidate("step", toward(inp.targets, minmax, int(p.step * budget))))
            del req.evaluate[:]
            for c in cands:
                req.evaluate.append(pb.PlannerAllocation(mb=[c.targets[n] / MIB for n in names]))
            answer = self.process.plan(req)
        except PlannerUnavailable as e:
            return self.fallback(inp, str(e))
        cands = [replace(c, overload=ev.overload, pressure=ev.pressure, final=ev.final, util=tuple(ev.util))
                 for c, ev in zip(cands, answer.evaluated)]
        estimates = self._estimates(names, caps, cap, est, measured, answer, declared)
        hot = [n for n in short if backlogged(est[n]) or measured[n] >= 1]
        relief_ = [c for c in cands if c.name == "relieve"]
        # A backend at or beyond its capacity is given its need at once: that it is
        # saturated is no estimate, and the projection cannot say by how much a deeper
        # backlog hurts; the others' surplus is the projection's to weigh.
        best = relief_[0] if hot and relief_ else choose(cands, p)
        if best.name == "keep" and (not calm or not p.headroom):
            return self.fallback(inp, "no move projects better; the blocking counts say where", estimates=estimates)
        if best.name == "keep":
            reason, why = "hold", ""
        elif best.name == "relieve":
            reason, why = ("saturated", ", ".join(hot)) if hot else ("rising", ", ".join(short))
        else:
            reason, why = "headroom", max(names, key=lambda n: measured[n])
        moved = dict(st.moved)
        grants = dict(st.grants)
        for n in names:
            if best.targets[n] != inp.targets[n]:
                moved[n] = (tick, reason)
            if best.targets[n] > inp.targets[n] and reason in ("saturated", "rising"):
                grants[n] = caps[n].estimate
            elif n in grants and inp.used.get(n, 0) >= FILLED * inp.targets[n]:
                del grants[n]
        self.state = replace(st, moved=moved, grants=grants)
        predicted = dict(zip(names, best.util))
        for n in names:  # the miss ratio the model predicts at the new size (what the checks compare)
            e = est[n]
            if e.cacheable > 0:
                estimates[n]["planned_miss_ratio"] = round(
                    min(max((predicted[n] * cap[n] - e.uncacheable) / e.cacheable, 0.0), 1.0), 4)
        note = ""
        if reason != "hold":
            keep = cands[0]
            note = (f"planner: {reason} ({why}), {best.name}: projected saturated seconds {keep.overload:.1f} -> "
                    f"{best.overload:.1f}, final worst utilization {keep.final:.2f} -> {best.final:.2f}")
        return Decision(targets=best.targets, moved=best.targets != dict(inp.targets), note=note,
                        reasons=self.reasons(), predicted=predicted, estimates=estimates)


__all__ = ["Planner", "PlannerParams", "Estimate", "Capacity", "Candidate", "State", "observe", "backlogged",
           "capacity", "trend", "toward", "relieve", "better", "choose"]
