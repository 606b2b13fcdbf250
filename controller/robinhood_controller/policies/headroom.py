"""Headroom (beyond the paper; docs/algorithms.md, "headroom"): RobinHood's step, and
when a backend runs short of capacity, at once the cache space its excess load needs,
from the backends with headroom that lose the fewest hits per byte.

RobinHood moves 1% of every partition a tick, so a backend that loses half its capacity
waits a minute for the space it needs; the oracle gives it at the phase's start. This
policy sizes the move from what a deployment observes about each backend in the
statistics service's window (docs/protocol.md, GetStats):

- what it was sent (the misses looked up) and what it answered (every query but the
  hits, counted as they complete);
- the spread of the latency of the queries that reached it (P90 − median of
  ``p90_backend_latency_us`` and ``p50_backend_latency_us``) against its own baseline
  (a running mean over the ticks it is not short): a queue's sojourn, and its spread,
  grow as 1/(1 − ρ), so ρ ≈ 1 − baseline/spread;
- the misses one more byte of cache saves (shadow hits / shadow bytes);
- its request blocking count, and the request P99.

Every tick it first takes RobinHood's step (the paper's function, unchanged). A backend
is then *short* when the request P99 is at least ``alarm`` of the SLO, its spread is at
least ``short_ratio`` × its baseline and ``min_latency`` of the SLO, it blocks at least
``min_rbc_share`` of the tail requests, and more cache saves it misses. Its capacity is
what it answers when it is backlogged (sent more than ``backlog`` × answered), else what
it is sent over ρ; it is given at once the space that brings what it is sent down to
``target_util`` of that capacity (at most ``max_step`` of the budget a tick, then not
again for ``hold`` ticks unless its spread keeps rising). The space comes from
*donors*: backends whose spread is under ``donor_ratio`` × baseline, not short for
``memory`` ticks and not just given space — cheapest first, each giving at most
``donor_step`` of its partition, down to the floor, and no more than lets its load grow
by ``load_step`` or past ``target_util`` of its own estimated capacity. Without a donor
only RobinHood's step moves space, and RobinHood's tax returns space that no longer
blocks. A capacity estimate grows by ``probe`` a tick while its backend is calm, and is
dropped when the backend shows no queueing above the target for ``forget_after`` ticks
(its capacity came back).

The step is pure (:func:`plan_headroom`); the baselines, capacity estimates and recent
grants are the policy's only state, a function of the statistics seen, so controllers
that see the same statistics plan alike. Its parameters were chosen on the zoo's
development seeds (docs/zoo.md), never on the evaluation range.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import Field

from ..rbc import QueryStats
from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyContext, PolicyError
from .registry import register
from .robinhood import RobinHoodSettings, plan_robinhood


US_PER_S = 1_000_000
"""Microseconds in a second (the statistics are in µs, the SLO in seconds)."""


class HeadroomParams(RobinHoodSettings):
    short_ratio: float = Field(2.5, gt=1, le=100, description=(
        "a backend is short when the spread of its query latency is at least this × its baseline"))
    min_latency: float = Field(0.1, ge=0, le=1, description="… and at least this fraction of the SLO")
    alarm: float = Field(0.3, ge=0, le=10, description=(
        "no backend is short while the request P99 is under this fraction of the SLO"))
    min_rbc_share: float = Field(0.3, ge=0, le=1, description=(
        "… and it blocks at least this share of the tail requests (its RBC over every partition's)"))
    donor_ratio: float = Field(1.5, gt=1, le=100, description=(
        "a backend is calm when the spread of its query latency is under this × its baseline"))
    target_util: float = Field(0.65, gt=0, lt=1, description=(
        "the utilization a short backend's load is brought down to, and donors are kept under"))
    max_step: float = Field(0.2, gt=0, le=1, description="most of the budget given to one backend a tick")
    donor_step: float = Field(0.25, gt=0, le=1, description="most of a calm donor's partition taken a tick")
    backlog: float = Field(1.05, ge=1, le=10, description=(
        "a short backend with this many more queries sent than answered is backlogged: it answers its capacity"))
    load_step: float = Field(0.25, gt=0, le=10, description="a donor's load may grow by at most this fraction a tick")
    memory: int = Field(30, ge=0, le=100000, description="ticks after it was last short before a backend gives space")
    hold: int = Field(3, ge=0, le=100, description="ticks a backend given space waits before it is given more")
    probe: float = Field(0.01, ge=0, le=1, description=(
        "a calm backend's capacity estimate grows by this a tick (capacity that came back is not seen otherwise)"))
    forget_ratio: float = Field(1.2, ge=1, le=100, description=(
        "a backend whose estimated utilization is above the target but whose latency spread is under this × "
        "its baseline for forget_after ticks in a row has more capacity than estimated: the estimate is dropped"))
    forget_after: int = Field(10, ge=1, le=10000, description="see forget_ratio")
    min_baseline: float = Field(0.02, ge=0, le=1, description=(
        "a baseline is at least this fraction of the SLO (smaller latency changes do not matter)"))
    weight: float = Field(0.02, gt=0, le=1, description="the weight of a tick's latency in a baseline (running mean)")


@dataclass(frozen=True)
class Grant:
    """The last space given to a backend: when, and its latency spread then."""

    tick: int
    spread_us: float


@dataclass(frozen=True)
class State:
    """What the policy remembers between ticks."""

    tick: int = 0
    baseline: Mapping[str, float] = field(default_factory=dict)
    """Per partition, the spread of the backend's query latency when it does not queue, µs."""
    capacity: Mapping[str, float] = field(default_factory=dict)
    """Per partition, the backend's estimated capacity, queries per window (absent: never seen short)."""
    grants: Mapping[str, Grant] = field(default_factory=dict)
    quiet: Mapping[str, int] = field(default_factory=dict)
    """Per partition, ticks in a row without queueing above the target utilization."""
    last_short: Mapping[str, int] = field(default_factory=dict)
    """Per partition, the last tick its backend was short."""


@dataclass(frozen=True)
class Observed:
    """One backend in one tick's window."""

    served: float
    """Queries the backend answered (every query but the hits: misses and uncacheable)."""
    offered: float
    """Queries sent to it: the misses looked up, or the served ones when more."""
    spread_us: float
    """P90 − median of the latency of the queries that reached it, µs (at least 1)."""
    gain: float
    """Misses saved per byte of extra cache, per window (shadow hits / shadow bytes)."""


@dataclass(frozen=True)
class Step:
    """One tick's plan, with what it saw, for notes and tests."""

    targets: dict[str, int]
    state: State
    short: list[str]
    given: dict[str, int]
    taken: dict[str, int]


def observe(stats: Mapping[str, QueryStats]) -> dict[str, Observed]:
    """The partitions with a backend latency in the window."""
    out = {}
    for n, st in stats.items():
        if st.queries <= 0 or st.p90_backend_latency_us <= 0:
            continue
        served = float(max(st.queries - st.hits, 0))
        gain = st.shadow_hits / st.shadow_bytes if st.shadow_bytes > 0 else 0.0
        spread = float(max(st.p90_backend_latency_us - st.p50_backend_latency_us, 1))
        out[n] = Observed(served=served, offered=max(served, float(st.misses)), spread_us=spread, gain=gain)
    return out


def utilization(spread_us: float, baseline_us: float) -> float:
    """ρ ≈ 1 − L₀/L (a queue's sojourn, and its spread, grow as 1/(1 − ρ)), in [0, 0.99]."""
    if baseline_us <= 0 or spread_us <= 0:
        return 0.0
    return min(max(1.0 - baseline_us / spread_us, 0.0), 0.99)


def plan_headroom(targets: Mapping[str, int], obs: Mapping[str, Observed],
                  rbc: Mapping[str, int], p99_us: float | None, state: State, p: HeadroomParams, floor: int,
                  budget: int, slo_us: float) -> Step:
    """One tick: the new targets (same keys, same sum, none lowered below the floor)
    and the next state."""
    if any(v < 0 for v in targets.values()):
        raise ValueError("targets: negative")
    tick = state.tick + 1
    base = dict(state.baseline)
    cap = dict(state.capacity)
    grants = dict(state.grants)
    quiet = dict(state.quiet)
    last = dict(state.last_short)
    floor_us = p.min_baseline * slo_us
    obs = {n: o for n, o in obs.items() if n in targets}
    for n, o in obs.items():  # a first latency is its own baseline
        base.setdefault(n, max(o.spread_us, floor_us))
    ratio = {n: o.spread_us / base[n] for n, o in obs.items()}
    total = sum(rbc.get(n, 0) for n in targets)
    alarm = p99_us is not None and p99_us >= p.alarm * slo_us
    short = sorted((n for n, o in obs.items() if alarm and ratio[n] >= p.short_ratio
                    and o.spread_us >= p.min_latency * slo_us and o.gain > 0 and total > 0
                    and rbc.get(n, 0) >= p.min_rbc_share * total),
                   key=lambda n: (-ratio[n], n))
    calm = {n for n in obs if ratio[n] < p.donor_ratio and n not in short}
    for n in short:
        last[n] = tick
    # Capacity: a short backend serves all it can; a calm one at least what it serves,
    # and perhaps more (its estimate creeps up by `probe` a tick).
    for n, o in obs.items():
        if n in short:
            # Backlogged (more sent than answered): it answers all it can. Queueing
            # without a backlog: ρ from the spread.
            rho = utilization(o.spread_us, base[n])
            cap[n] = o.served if o.offered > p.backlog * o.served else o.offered / max(rho, p.target_util)
        elif n in calm and n in cap:
            cap[n] = max(cap[n] * (1 + p.probe), o.served)
        # Above the target utilization a backend whose capacity is as estimated queues;
        # one that shows no queueing for `forget_after` ticks in a row has more capacity
        # than estimated (it came back): the estimate is dropped.
        if n in cap and ratio[n] < p.forget_ratio and o.offered > p.target_util * cap[n]:
            quiet[n] = quiet.get(n, 0) + 1
            if quiet[n] >= p.forget_after:
                del cap[n]
                del quiet[n]
        else:
            quiet.pop(n, None)

    def util(n: str) -> float:
        o = obs[n]
        known = o.offered / cap[n] if cap.get(n, 0) > 0 else 0.0
        return max(known, utilization(o.spread_us, base[n]))

    def headroom(n: str) -> int:
        """Bytes a calm backend can give this tick: its load may grow by `load_step`,
        and no further than the target utilization."""
        o = obs[n]
        most = max(targets[n] - floor, 0)
        if o.gain <= 0:
            return most
        u = util(n)
        grow = p.load_step if u <= 0 else min(p.load_step, p.target_util / u - 1)
        return max(int(o.offered * grow / o.gain), 0)

    new = dict(targets)
    given: dict[str, int] = {}
    taken: dict[str, int] = {}

    def recent(n: str) -> bool:
        return n in grants and tick - grants[n].tick < p.hold

    # Donors: the calm backends that have not been short for `memory` ticks (a backend
    # that was short lately is near its capacity: the space it gives comes back as
    # load it cannot serve), cheapest first, each within its headroom. With none, the
    # RobinHood step alone moves space.
    donors = sorted((n for n in calm if not recent(n) and tick - last.get(n, -p.memory) >= p.memory),
                    key=lambda n: (obs[n].gain, n))
    room = {n: min(int(p.donor_step * targets[n]), max(targets[n] - floor, 0), headroom(n)) for n in donors}
    for n in short:
        g = grants.get(n)
        o = obs[n]
        if g is not None and tick - g.tick < p.hold and o.spread_us < 1.25 * g.spread_us:
            continue  # the last grant has not shown yet, and the latency is not rising
        cut = max(o.offered - p.target_util * cap[n], 0.0)  # to the target utilization
        want = min(int(cut / o.gain), int(p.max_step * budget))
        got = 0
        for d in donors:
            if got >= want:
                break
            take = min(room[d], want - got)
            if take <= 0:
                continue
            room[d] -= take
            new[d] -= take
            taken[d] = taken.get(d, 0) + take
            got += take
        if got > 0:
            new[n] += got
            given[n] = got
            grants[n] = Grant(tick, o.spread_us)

    # Baselines follow the spread of the backends that are not short.
    for n, o in obs.items():
        if n not in short:
            base[n] = max((1 - p.weight) * base[n] + p.weight * o.spread_us, floor_us)
    return Step(new, State(tick, base, cap, grants, quiet, last), short, given, taken)


@register
class Headroom(AllocationPolicy):
    name = "headroom"
    summary = ("candidate (beyond the paper): move at once the space a short backend's estimated excess load "
               "needs, from the backends with the most headroom and the fewest hits per byte")
    Params = HeadroomParams
    needs_rbc = True
    color = "#e377c2"

    def __init__(self, params: Params, ctx: PolicyContext) -> None:
        super().__init__(params, ctx)
        if ctx.slo is None:
            raise PolicyError("headroom: the topology needs an slo block (the request P99 objective)")
        self.state = State()

    def plan(self, inp: PlanInput) -> Decision:
        p: HeadroomParams = self.params  # type: ignore[assignment]
        slo_us = self.ctx.slo.latency * US_PER_S  # type: ignore[union-attr]
        obs = {n: o for n, o in observe(inp.stats).items() if n in inp.targets}
        rh = plan_robinhood(inp.targets, inp.used, inp.rbc, p.step(self.ctx.floor_bytes), applied=inp.applied())
        step = plan_headroom(rh.targets, obs, inp.rbc, inp.p99_latency_us, self.state, p, self.ctx.floor_bytes, self.ctx.budget_bytes, slo_us)
        self.state = step.state
        note = ""
        if step.given:
            mb = 1 << 20
            note = ("headroom: " + ", ".join(f"{n} +{v / mb:.1f} MB" for n, v in sorted(step.given.items()))
                    + " from " + ", ".join(f"{n} {v / mb:.1f}" for n, v in sorted(step.taken.items())))
        return Decision(targets=step.targets, moved=rh.redistributed or bool(step.given), eligible=rh.eligible,
                        note=note)


__all__ = ["Headroom", "HeadroomParams", "State", "Grant", "Observed", "Step", "observe", "utilization",
           "plan_headroom"]
