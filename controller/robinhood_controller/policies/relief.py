"""Relief (beyond the paper; docs/algorithms.md, "relief"): RobinHood's step, and when a
backend's load nears what it can answer, at once the space that brings it back under a
target utilization, taken from the backends with room to spare that lose the fewest hits
per byte.

RobinHood moves 1% of every partition a tick, so a backend that loses half its capacity
waits a minute for the space it needs; the reactive oracle gives it at the phase's start.
This policy sizes the move from what a deployment observes about each backend in the
statistics service's window (docs/protocol.md, GetStats):

- what it was sent (the misses looked up) and what it answered (every query but the
  hits);
- the spread of the latency of the queries that reached it (P90 − median), against its
  own baseline (a slow running mean over the ticks it is not relieved): a queue's
  sojourn, and its spread, grow as 1/(1 − ρ), so ρ ≈ 1 − baseline/spread;
- the misses one more byte of cache saves (shadow hits / shadow bytes);
- its request blocking count, and the request P99.

A backend's utilization is what it is sent over what it answers when it is backlogged
(sent more than it answered), else ρ from the spread. It *needs relief* when its
utilization is above 0.65 (``TARGET_UTIL``), it blocks more than an even share of the
tail requests, more cache saves it misses, and (with an SLO) the request P99 is at least
``alarm`` of it. It is then given at once the space that brings what it is sent down to
0.65 of what it can answer (nothing more while the space given is still filling, unless
its latency keeps rising). The space comes from *donors*: backends under 0.65 that have
not needed relief for ``memory`` ticks, the fewest hits per byte first, each giving at
most ``donor_step`` of its partition and no more than keeps its own load under 0.65.
Nothing else moves space: the RobinHood step returns what stops blocking. With several
app servers each controller moves its share of both (its own misses over every app
server's, at its own partition's misses saved per byte), so together they move what one
would.

Ramps are seen as they build (ρ rising above the target before anything is backlogged),
so the move comes before the backend saturates. The step is pure (:func:`plan_relief`);
baselines and recent grants are the policy's only state, a function of the statistics
seen, so controllers that see the same statistics plan alike. It works without an SLO
(the alarm is then not applied). Its three parameters are the ones whose removal moved
the zoo's result on the development seeds by more than a point (docs/algorithms.md,
"relief"); their defaults were set there, never on the evaluation seeds.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import Field

from ..rbc import QueryStats
from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyContext
from .registry import register
from .robinhood import TAX, RobinHoodParams, plan_robinhood

US_PER_S = 1_000_000
"""Microseconds in a second (the statistics are in µs, the SLO in seconds)."""
UNUSED_GAP = 0.30
"""RobinHood's unused-space rule, as the paper has it (§3.2)."""
BASELINE_WEIGHT = 0.02
"""A tick's weight in a baseline: the running mean forgets over about 50 ticks, far
longer than a queue takes to build, so a building queue never becomes the baseline."""
MIN_BASELINE_US = 100.0
"""A baseline is at least this (latency changes below a tenth of a millisecond are
measurement noise, not queueing)."""
RISING = 1.25
"""A backend given space is given more before that space has filled only when its
latency spread has grown by this factor since the grant: the first grant was too small."""
FILLED = 0.9
"""A partition has filled its grant once it uses this share of its target."""
TARGET_UTIL = 0.65
"""A backend needs relief above this utilization; its load is brought back to it, and
donors are kept under it. Not a parameter: on the zoo's development seeds 0.5 and 0.8
change the mean SLO violation by less than 0.2 of a point (docs/algorithms.md, "relief")."""


class ReliefParams(Params):
    alarm: float = Field(0.3, ge=0, le=10, description=(
        "no backend needs relief while the request P99 is under this fraction of the SLO (not applied without one)"))
    donor_step: float = Field(0.25, gt=0, le=1, description="most of a donor's partition taken a tick")
    memory: int = Field(30, ge=0, le=100000, description=(
        "ticks after it last needed relief before a backend gives space (it is near its capacity: "
        "what it gives comes back as load it cannot answer)"))


@dataclass(frozen=True)
class Observed:
    """One backend in one tick's window."""

    served: float
    """Queries the backend answered (every query but the hits)."""
    offered: float
    """Queries sent to it: the misses looked up, or the served ones when more."""
    spread_us: float
    """P90 − median of the latency of the queries that reached it, µs (at least 1)."""
    gain: float
    """Misses saved per byte of extra cache in this app server's partition, per window
    (its shadow hits / shadow bytes; every app server's when its own are not known)."""
    share: float = 1.0
    """This app server's share of what the backend is sent (its own misses over every app
    server's; 1 when it is the only one, or its own are not known)."""


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
    grants: Mapping[str, Grant] = field(default_factory=dict)
    last_relief: Mapping[str, int] = field(default_factory=dict)
    """Per partition, the last tick its backend needed relief."""


@dataclass(frozen=True)
class Step:
    """One tick's plan, with what it saw, for notes and tests."""

    targets: dict[str, int]
    state: State
    relieved: list[str]
    """The backends that needed relief, most utilized first."""
    given: dict[str, int]
    taken: dict[str, int]
    util: dict[str, float] = field(default_factory=dict)
    """Per partition with a latency in the window, its backend's utilization as observed."""


def _offered(st: QueryStats) -> float:
    """Queries sent to the backend: the misses looked up, or the answered ones when more."""
    return max(float(max(st.queries - st.hits, 0)), float(st.misses))


def observe(stats: Mapping[str, QueryStats], local: Mapping[str, QueryStats] | None = None) -> dict[str, Observed]:
    """The partitions with a backend latency in the window: the backend as every app
    server sees it (``stats``), and this app server's part of it (``local``: its share of
    what the backend is sent, and what more cache in its own partition saves)."""
    out = {}
    for n, st in stats.items():
        if st.queries <= 0 or st.p90_backend_latency_us <= 0:
            continue
        served = float(max(st.queries - st.hits, 0))
        offered = _offered(st)
        gain = st.shadow_hits / st.shadow_bytes if st.shadow_bytes > 0 else 0.0
        spread = float(max(st.p90_backend_latency_us - st.p50_backend_latency_us, 1))
        share = 1.0
        own = (local or {}).get(n)
        if own is not None and own.queries > 0 and offered > 0:
            share = min(_offered(own) / offered, 1.0)
            if own.shadow_bytes > 0:
                gain = own.shadow_hits / own.shadow_bytes
        out[n] = Observed(served=served, offered=offered, spread_us=spread, gain=gain, share=share)
    return out


def utilization(o: Observed, baseline_us: float) -> float:
    """What a backend is sent over what it can answer: sent/answered when it is
    backlogged (sent more than it answered), else ρ ≈ 1 − L₀/L from the spread of its
    latency (a queue's sojourn, and its spread, grow as 1/(1 − ρ)), at most 0.99."""
    if backlogged(o):
        return o.offered / o.served
    if baseline_us <= 0 or o.spread_us <= 0:
        return 0.0
    return min(max(1.0 - baseline_us / o.spread_us, 0.0), 0.99)


def alarmed(p99_us: float | None, slo_us: float | None, p: ReliefParams) -> bool:
    """The requests show trouble: the request P99 is at least ``alarm`` of the SLO (always
    true without an SLO)."""
    return slo_us is None or (p99_us is not None and p99_us >= p.alarm * slo_us)


def needs_relief(o: Observed, util: float, rbc: int, total_rbc: int, partitions: int, alarm: bool) -> bool:
    """A backend needs relief: its utilization is above the target, it blocks more than an
    even share of the tail requests, more cache saves it misses, and the alarm is on."""
    return alarm and util > TARGET_UTIL and o.gain > 0 and total_rbc > 0 and rbc * partitions > total_rbc


def is_donor(util: float, relieved: bool, tick: int, last_relief: int | None, p: ReliefParams) -> bool:
    """A backend may give space: under the target, not needing relief, and not for
    ``memory`` ticks."""
    since = tick - (last_relief if last_relief is not None else -p.memory)
    return util < TARGET_UTIL and not relieved and since >= p.memory


def donor_room(o: Observed, util: float, target: int, floor: int, p: ReliefParams) -> int:
    """Bytes a donor can give this tick: at most ``donor_step`` of its partition, down to
    the floor, and (when its gain and utilization are known) no more than keeps its own
    load under the target."""
    most = min(int(p.donor_step * target), max(target - floor, 0))
    if o.gain <= 0 or util <= 0:
        return most
    return max(int(min(float(most), o.share * o.offered * (TARGET_UTIL / util - 1) / o.gain)), 0)


def waits_for_fill(g: Grant | None, used: int, target: int, o: Observed) -> bool:
    """The last grant is still filling (under FILLED of the target used) and the latency
    has not risen by RISING since: nothing more is given yet."""
    return g is not None and used < FILLED * target and o.spread_us < RISING * g.spread_us


def relief_size(o: Observed, util: float, budget: int) -> int:
    """The bytes that bring what the backend is sent down to the target utilization of its
    capacity (sent/u), at the misses more cache saves: this app server's share of them."""
    capacity = o.offered / util
    return int(min(o.share * max(o.offered - TARGET_UTIL * capacity, 0.0) / o.gain, float(budget)))


def next_baseline(baseline_us: float, o: Observed) -> float:
    """A baseline follows the spread of a backend that does not need relief, slowly."""
    return max((1 - BASELINE_WEIGHT) * baseline_us + BASELINE_WEIGHT * o.spread_us, MIN_BASELINE_US)


def plan_relief(targets: Mapping[str, int], used: Mapping[str, int], obs: Mapping[str, Observed],
                rbc: Mapping[str, int], p99_us: float | None, state: State, p: ReliefParams, floor: int,
                budget: int, slo_us: float | None) -> Step:
    """One tick after the RobinHood step: the new targets (same keys, same sum, none
    lowered below the floor) and the next state."""
    if any(v < 0 for v in targets.values()):
        raise ValueError("targets: negative")
    tick = state.tick + 1
    base = dict(state.baseline)
    grants = dict(state.grants)
    last = dict(state.last_relief)
    obs = {n: o for n, o in obs.items() if n in targets}
    for n, o in obs.items():  # a first latency is its own baseline
        base.setdefault(n, max(o.spread_us, MIN_BASELINE_US))
    util = {n: utilization(o, base[n]) for n, o in obs.items()}
    total = sum(rbc.get(n, 0) for n in targets)
    alarm = alarmed(p99_us, slo_us, p)
    relieved = sorted((n for n, o in obs.items()
                       if needs_relief(o, util[n], rbc.get(n, 0), total, len(targets), alarm)),
                      key=lambda n: (-util[n], n))
    for n in relieved:
        last[n] = tick
    donors = sorted((n for n in obs if is_donor(util[n], n in relieved, tick, last.get(n), p)),
                    key=lambda n: (obs[n].gain, n))
    left = {n: donor_room(obs[n], util[n], targets[n], floor, p) for n in donors}
    new = dict(targets)
    given: dict[str, int] = {}
    taken: dict[str, int] = {}
    for n in relieved:
        o = obs[n]
        if waits_for_fill(grants.get(n), used.get(n, 0), targets[n], o):
            continue
        want = relief_size(o, util[n], budget)
        got = 0
        for d in donors:
            take = min(left[d], want - got)
            if take <= 0:
                continue
            left[d] -= take
            new[d] -= take
            taken[d] = taken.get(d, 0) + take
            got += take
        if got > 0:
            new[n] += got
            given[n] = got
            grants[n] = Grant(tick, o.spread_us)
    for n, o in obs.items():
        if n not in relieved:
            base[n] = next_baseline(base[n], o)
    return Step(new, State(tick, base, grants, last), relieved, given, taken, util)


def backlogged(o: Observed) -> bool:
    """The backend was sent more than it answered in the window."""
    return o.served > 0 and o.offered > o.served


def move_reasons(before: Mapping[str, int], step: Step, obs: Mapping[str, Observed]) -> dict[str, str]:
    """Why each partition whose target changed this tick moved (base.MOVE_REASONS): relief
    given to a backlogged backend (``saturated``) or to one whose utilization crossed the
    target (``rising``); a donor moved for the relief it funded (``saturated`` when any
    backend it funded was backlogged); else RobinHood's step (``robinhood``)."""
    why = {n: "saturated" if n in obs and backlogged(obs[n]) else "rising" for n in step.given}
    funded = "saturated" if "saturated" in why.values() else "rising"
    out = {}
    for n, t in step.targets.items():
        if t == before.get(n, t):
            continue
        out[n] = why.get(n) or (funded if n in step.taken else "robinhood")
    return out


def predicted_utilization(before: Mapping[str, int], step: Step, obs: Mapping[str, Observed]) -> dict[str, float]:
    """Each backend's utilization with the new targets, on relief's own linear model: its
    capacity is what it was sent over its observed utilization, and every byte more (or
    less) in this app server's partition saves (or costs) its shadow gain in misses,
    scaled to every app server's (over its share). Backends whose utilization is unknown
    (no latency in the window, or none observed) are left out."""
    out = {}
    for n, u in step.util.items():
        o = obs[n]
        if u <= 0 or o.offered <= 0:
            continue
        delta = step.targets[n] - before.get(n, step.targets[n])
        sent = max(o.offered - o.gain * delta / max(o.share, 1e-9), 0.0)
        out[n] = round(sent / (o.offered / u), 4)
    return out


@register
class Relief(AllocationPolicy):
    name = "relief"
    summary = ("RobinHood's step, and at once the space that brings a backend nearing its capacity back under a "
               "target utilization, from the backends with room that lose the fewest hits per byte (beyond the paper)")
    Params = ReliefParams
    needs_rbc = True
    color = "#bcbd22"
    role = "recommended"

    def __init__(self, params: Params, ctx: PolicyContext) -> None:
        super().__init__(params, ctx)
        self.state = State()
        self.moved: dict[str, str] = {}
        """Per partition, why it last moved (kept until it moves again)."""

    def plan(self, inp: PlanInput) -> Decision:
        p: ReliefParams = self.params  # type: ignore[assignment]
        slo_us = self.ctx.slo.latency * US_PER_S if self.ctx.slo is not None else None
        obs = observe(inp.stats, inp.local)
        rh = plan_robinhood(inp.targets, inp.used, inp.rbc,
                            RobinHoodParams(tax=TAX, unused_gap=UNUSED_GAP, floor_bytes=self.ctx.floor_bytes),
                            applied=inp.applied())
        step = plan_relief(rh.targets, inp.used, obs, inp.rbc, inp.p99_latency_us, self.state, p,
                           self.ctx.floor_bytes, self.ctx.budget_bytes, slo_us)
        self.state = step.state
        self.moved.update(move_reasons(inp.targets, step, obs))
        note = ""
        if step.given:
            mb = 1 << 20
            note = ("relief: " + ", ".join(f"{n} +{v / mb:.1f} MB" for n, v in sorted(step.given.items()))
                    + " from " + ", ".join(f"{n} {v / mb:.1f}" for n, v in sorted(step.taken.items())))
        return Decision(targets=step.targets, moved=rh.redistributed or bool(step.given), eligible=rh.eligible,
                        note=note, reasons=dict(self.moved), predicted=predicted_utilization(inp.targets, step, obs))


__all__ = ["Relief", "ReliefParams", "State", "Grant", "Observed", "Step", "observe", "utilization", "plan_relief",
           "alarmed", "needs_relief", "is_donor", "donor_room", "waits_for_fill", "relief_size", "next_baseline",
           "backlogged", "move_reasons", "predicted_utilization"]
