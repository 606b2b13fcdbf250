"""The headroom policy's step (docs/algorithms.md, "headroom"): what it sees, when a
backend is short, how much it is given and from whom. The properties every policy has
(sum, floor, determinism) are tested for it in test_policies.py."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from robinhood_controller.plan import MIB
from robinhood_controller.policies import PlanInput, PolicyContext, QueryStats
from robinhood_controller.policies import build as build_policy
from robinhood_controller.policies.headroom import HeadroomParams, Observed, State, observe, plan_headroom, utilization
from robinhood_controller.policies.robinhood import plan_robinhood
from robinhood_common.topology import SLO

P = HeadroomParams()
SLO_US = 150_000.0
FLOOR = 16 * MIB
BUDGET = 160 * MIB
EVEN = {"a": 40 * MIB, "b": 40 * MIB, "c": 40 * MIB, "d": 40 * MIB}


def calm(served: float = 1000, spread_us: float = 3000, gain: float = 10 / MIB) -> Observed:
    return Observed(served=served, offered=served, spread_us=spread_us, gain=gain)


def warm(obs: dict[str, Observed], ticks: int = 5) -> State:
    """The state after some calm ticks: every baseline set."""
    state = State()
    for _ in range(ticks):
        state = plan_headroom(EVEN, obs, {}, 100_000, state, P, FLOOR, BUDGET, SLO_US).state
    return state


def test_observe_reads_the_backend_latency_spread_and_the_gain() -> None:
    st_ = QueryStats(hits=700, misses=300, shadow_hits=40, shadow_bytes=4 * MIB, queries=1000,
                     p50_backend_latency_us=4000, p90_backend_latency_us=10_000)
    o = observe({"a": st_, "b": QueryStats()})
    assert set(o) == {"a"}  # no latency: not observed
    assert o["a"] == Observed(served=300, offered=300, spread_us=6000, gain=40 / (4 * MIB))
    # A backlog: more misses looked up than queries answered.
    o = observe({"a": QueryStats(hits=100, misses=500, queries=400, p50_backend_latency_us=1,
                                 p90_backend_latency_us=1)})
    assert o["a"].served == 300 and o["a"].offered == 500 and o["a"].spread_us == 1


def test_utilization_from_the_spread() -> None:
    assert utilization(2000, 2000) == 0.0
    assert utilization(4000, 2000) == 0.5
    assert utilization(10**9, 1) == 0.99
    assert utilization(0, 1000) == 0.0


def test_a_short_backend_gets_its_excess_at_once_from_the_cheapest_calm_donor() -> None:
    base = {"a": calm(), "b": calm(gain=2 / MIB), "c": calm(gain=20 / MIB), "d": calm(gain=20 / MIB)}
    state = warm(base)
    obs = dict(base, a=Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB))
    step = plan_headroom(EVEN, obs, {"a": 10, "b": 1}, 100_000, state, P, FLOOR, BUDGET, SLO_US)
    assert step.short == ["a"]
    # Backlogged: capacity = what it answered (1000); cut 1500 − 0.65·1000 = 850 misses = 85 MB at 10/MB,
    # capped at 20% of the budget (32 MB). b (2 misses/MB) is the cheapest donor; each gives
    # 25% of its partition at most (10 MB), and c and d (20 misses/MB) no more than 25% more
    # load (250 misses = 12.5 MB): 30 MB in all, b first.
    assert step.given == {"a": 30 * MIB}
    assert step.taken == {"b": 10 * MIB, "c": 10 * MIB, "d": 10 * MIB}
    assert sum(step.targets.values()) == BUDGET
    # Far more than RobinHood's 1% a tick.
    assert step.given["a"] > 10 * 0.01 * BUDGET


def test_short_needs_queueing_a_latency_that_matters_and_a_share_of_the_tail() -> None:
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    queueing = Observed(served=1000, offered=1000, spread_us=60_000, gain=10 / MIB)
    # Blocks no tail request: not short.
    assert plan_headroom(EVEN, dict(base, a=queueing), {"b": 10}, 100_000, state, P, FLOOR, BUDGET, SLO_US).short == []
    # A spread under min_latency of the SLO: not short, however many times its baseline.
    small = Observed(served=1000, offered=1000, spread_us=0.05 * SLO_US, gain=10 / MIB)
    assert plan_headroom(EVEN, dict(base, a=small), {"a": 10}, 100_000, state, P, FLOOR, BUDGET, SLO_US).short == []
    # No gain (more cache saves nothing): not short.
    flat = Observed(served=1000, offered=1000, spread_us=60_000, gain=0.0)
    assert plan_headroom(EVEN, dict(base, a=flat), {"a": 10}, 100_000, state, P, FLOOR, BUDGET, SLO_US).short == []
    # The request P99 under the alarm (or unknown): nothing is short.
    assert plan_headroom(EVEN, dict(base, a=queueing), {"a": 10}, 30_000, state, P, FLOOR, BUDGET, SLO_US).short == []
    assert plan_headroom(EVEN, dict(base, a=queueing), {"a": 10}, None, state, P, FLOOR, BUDGET, SLO_US).short == []
    assert plan_headroom(EVEN, dict(base, a=queueing), {"a": 10}, 100_000, state, P, FLOOR, BUDGET, SLO_US).short == ["a"]


def test_a_backend_short_lately_gives_nothing_and_a_grant_waits() -> None:
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    queueing = Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB)
    s1 = plan_headroom(EVEN, dict(base, b=queueing), {"b": 10}, 100_000, state, P, FLOOR, BUDGET, SLO_US)
    assert s1.given and "b" not in s1.taken
    # Next tick: a is short; b was short a tick ago, so it is no donor.
    s2 = plan_headroom(s1.targets, dict(base, a=queueing), {"a": 10}, 100_000, s1.state, P, FLOOR, BUDGET, SLO_US)
    assert "b" not in s2.taken and s2.given
    # b short again at once, its latency not rising: the grant has not shown yet.
    s3 = plan_headroom(s2.targets, dict(base, b=queueing), {"b": 10}, 100_000, s2.state, P, FLOOR, BUDGET, SLO_US)
    assert s3.short == ["b"] and "b" not in s3.given


def test_no_donor_no_move_and_nothing_below_the_floor() -> None:
    targets = {"a": 112 * MIB, "b": 16 * MIB, "c": 16 * MIB, "d": 16 * MIB}
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    queueing = Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB)
    step = plan_headroom(targets, dict(base, a=queueing), {"a": 10}, 100_000, state, P, FLOOR, BUDGET, SLO_US)
    assert step.targets == targets and step.given == {}


def test_a_stale_capacity_estimate_is_forgotten_after_quiet_ticks() -> None:
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    queueing = Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB)
    state = plan_headroom(EVEN, dict(base, a=queueing), {"a": 10}, 100_000, state, P, FLOOR, BUDGET, SLO_US).state
    assert state.capacity["a"] == 1000
    # Now a serves 900 with no queueing at all: above half its estimated capacity.
    for _ in range(P.forget_after - 1):
        state = plan_headroom(EVEN, dict(base, a=calm(served=900)), {}, 100_000, state, P, FLOOR, BUDGET, SLO_US).state
        assert "a" in state.capacity
    state = plan_headroom(EVEN, dict(base, a=calm(served=900)), {}, 100_000, state, P, FLOOR, BUDGET, SLO_US).state
    assert "a" not in state.capacity


def ctx() -> PolicyContext:
    return PolicyContext(budget_bytes=BUDGET, configured=dict(EVEN), floor_bytes=FLOOR,
                         slo=SLO(latency=0.15, step=2.0, window=10.0, warmup=30.0))


def test_without_a_short_backend_it_is_robinhoods_step() -> None:
    pol = build_policy("headroom", {}, ctx())
    stats = {n: QueryStats(hits=700, misses=300, shadow_hits=30, shadow_bytes=4 * MIB, queries=1000,
                           p50_backend_latency_us=4000, p90_backend_latency_us=7000) for n in "abcd"}
    rbc = {"a": 5, "b": 1}
    d = pol.plan(PlanInput(targets=EVEN, used=EVEN, rbc=rbc, stats=stats, now=1.0, p99_latency_us=200_000))
    rh = plan_robinhood(EVEN, EVEN, rbc, HeadroomParams().step(FLOOR))
    assert d.targets == rh.targets


def test_needs_the_slo() -> None:
    import pytest

    from robinhood_controller.policies import PolicyError
    with pytest.raises(PolicyError, match="slo"):
        build_policy("headroom", {}, PolicyContext(budget_bytes=BUDGET, configured=dict(EVEN), floor_bytes=FLOOR))


@st.composite
def ticks(draw: st.DrawFn) -> list[tuple[dict[str, Observed], dict[str, int]]]:
    out = []
    for _ in range(draw(st.integers(1, 8))):
        obs = {}
        for n in "abcd":
            if draw(st.booleans()):
                served = draw(st.integers(0, 5000))
                obs[n] = Observed(served=served, offered=served + draw(st.integers(0, 3000)),
                                  spread_us=draw(st.integers(1, 500_000)), gain=draw(st.integers(0, 100)) / MIB)
        out.append((obs, {n: draw(st.integers(0, 20)) for n in "abcd"}))
    return out


@settings(max_examples=200, deadline=None)
@given(seq=ticks(), extra=st.lists(st.integers(0, 200), min_size=4, max_size=4))
def test_step_keeps_the_sum_the_floor_and_is_deterministic(seq: list, extra: list[int]) -> None:
    targets = {n: FLOOR + e * MIB for n, e in zip("abcd", extra)}
    budget = sum(targets.values())
    runs = []
    for _ in range(2):
        cur, state = dict(targets), State()
        for obs, rbc in seq:
            step = plan_headroom(cur, obs, rbc, 100_000, state, P, FLOOR, budget, SLO_US)
            assert sum(step.targets.values()) == budget
            assert all(v >= FLOOR for v in step.targets.values())
            assert sum(step.given.values()) == sum(step.taken.values()) <= P.max_step * budget * len(step.given or [0])
            cur, state = step.targets, step.state
        runs.append((cur, state))
    assert runs[0] == runs[1]


def test_vector_ticks() -> None:
    """tests/vectors/headroom.json: a run of ticks, each the previous one's targets."""
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).resolve().parents[2] / "tests" / "vectors" / "headroom.json").read_text())
    assert doc["schema"] == "robinhood-headroom/v1"
    c = PolicyContext(budget_bytes=doc["budget_bytes"], configured=dict(doc["targets"]), floor_bytes=doc["floor_bytes"],
                      slo=SLO(latency=doc["slo_latency_s"], step=2.0, window=10.0, warmup=30.0))
    pol = build_policy("headroom", {}, c)
    cur = dict(doc["targets"])
    jumped = False
    for i, tk in enumerate(doc["ticks"]):
        d = pol.plan(PlanInput(targets=cur, used=cur, rbc=tk["rbc"], stats={n: QueryStats(**s) for n, s in tk["stats"].items()},
                               now=1000.0 + i, p99_latency_us=tk["p99_latency_us"]))
        assert d.targets == tk["expect"], f"tick {i}"
        jumped = jumped or d.targets["a"] - cur["a"] > 0.05 * doc["budget_bytes"]
        cur = d.targets
    assert jumped  # the vector shows a jump, not only RobinHood's 1%
