"""The relief policy's step (docs/algorithms.md, "relief"): what it sees, when a backend
needs relief, how much it is given and from whom. The properties every policy has (sum,
floor, determinism) are tested for it in test_policies.py; its shared vectors in
test_vectors.py."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from robinhood_controller.plan import MIB
from robinhood_controller.policies import PlanInput, PolicyContext, QueryStats
from robinhood_controller.policies import build as build_policy
from robinhood_controller.policies import MOVE_REASONS
from robinhood_controller.policies.relief import (Observed, ReliefParams, State, move_reasons, observe,
                                                   plan_relief, predicted_utilization, utilization)
from robinhood_controller.policies.robinhood import TAX, RobinHoodParams, plan_robinhood
from robinhood_common.topology import SLO

P = ReliefParams()
SLO_US = 150_000.0
FLOOR = 16 * MIB
BUDGET = 160 * MIB
EVEN = {"a": 40 * MIB, "b": 40 * MIB, "c": 40 * MIB, "d": 40 * MIB}


def calm(served: float = 1000, spread_us: float = 3000, gain: float = 10 / MIB) -> Observed:
    return Observed(served=served, offered=served, spread_us=spread_us, gain=gain)


def step(obs: dict[str, Observed], rbc: dict[str, int], state: State, targets: dict[str, int] | None = None,
         p99: float | None = 100_000, slo: float | None = SLO_US, used: dict[str, int] | None = None,
         p: ReliefParams = P):
    t = targets or EVEN
    return plan_relief(t, used if used is not None else t, obs, rbc, p99, state, p, FLOOR, BUDGET, slo)


def warm(obs: dict[str, Observed], ticks: int = 5) -> State:
    """The state after some calm ticks: every baseline set."""
    state = State()
    for _ in range(ticks):
        state = step(obs, {}, state).state
    return state


def test_observe_reads_the_backend_latency_spread_and_the_gain() -> None:
    st_ = QueryStats(hits=700, misses=300, shadow_hits=40, shadow_bytes=4 * MIB, queries=1000,
                     p50_backend_latency_us=4000, p90_backend_latency_us=10_000)
    o = observe({"a": st_, "b": QueryStats()})
    assert set(o) == {"a"}  # no latency: not observed
    assert o["a"] == Observed(served=300, offered=300, spread_us=6000, gain=40 / (4 * MIB))


def test_utilization_backlogged_or_from_the_spread() -> None:
    assert utilization(calm(spread_us=2000), 2000) == 0.0
    assert utilization(calm(spread_us=4000), 2000) == 0.5
    assert utilization(calm(spread_us=10**9), 1) == 0.99
    # Sent more than it answered: what it is sent over what it answers.
    assert utilization(Observed(served=1000, offered=1500, spread_us=1, gain=0), 2000) == 1.5


def test_a_backlogged_backend_gets_its_excess_at_once_from_the_cheapest_donor() -> None:
    base = {"a": calm(), "b": calm(gain=2 / MIB), "c": calm(gain=20 / MIB), "d": calm(gain=20 / MIB)}
    state = warm(base)
    obs = dict(base, a=Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB))
    s = step(obs, {"a": 10, "b": 1}, state)
    assert s.relieved == ["a"]
    # Capacity = what it answered (1000): cut 1500 − 0.65·1000 = 850 misses = 85 MB at 10 a MB.
    # Donors give at most 25% of their partition (10 MB); calm ones (no queueing) have room
    # for any load: b (the cheapest), then c and d by name: 30 MB in all.
    assert s.given == {"a": 30 * MIB}
    assert s.taken == {"b": 10 * MIB, "c": 10 * MIB, "d": 10 * MIB}
    assert sum(s.targets.values()) == BUDGET


def test_it_says_why_each_partition_moved_and_predicts_the_utilization() -> None:
    base = {"a": calm(), "b": calm(gain=2 / MIB), "c": calm(gain=20 / MIB), "d": calm(gain=20 / MIB)}
    state = warm(base)
    obs = dict(base, a=Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB))
    s = step(obs, {"a": 10, "b": 1}, state)
    # a is backlogged: saturated; the donors moved to fund it.
    assert move_reasons(EVEN, s, obs) == {"a": "saturated", "b": "saturated", "c": "saturated", "d": "saturated"}
    u = predicted_utilization(EVEN, s, obs)
    # a: 1500 sent at a capacity of 1000; 30 MB more saves 300 misses: 1200 / 1000.
    assert u["a"] == 1.2
    # The calm donors have no utilization to scale (ρ = 0 from the spread): left out.
    assert set(u) == {"a"}
    # A ramp (ρ from the spread, nothing backlogged) is "rising"; a partition whose target
    # did not change has no reason this tick.
    ramp = dict(base, a=Observed(served=1000, offered=1000, spread_us=30_000, gain=10 / MIB))
    s = step(ramp, {"a": 10, "b": 1}, state)
    why = move_reasons(EVEN, s, ramp)
    assert why["a"] == "rising" and set(why.values()) <= set(MOVE_REASONS)
    assert all(n in s.given or n in s.taken for n in why)
    assert predicted_utilization(EVEN, s, ramp)["a"] < s.util["a"]


def test_the_policy_keeps_the_last_reason_until_the_partition_moves_again() -> None:
    pol = build_policy("relief", {}, PolicyContext(budget_bytes=BUDGET, configured=dict(EVEN), floor_bytes=FLOOR))
    stats = {n: QueryStats(hits=500, misses=500, shadow_hits=10, shadow_bytes=MIB, queries=1000,
                           p50_backend_latency_us=2000, p90_backend_latency_us=5000) for n in "abcd"}
    # RobinHood's step moves space from every partition to the one the tail waits for.
    d = pol.plan(PlanInput(targets=EVEN, used=EVEN, rbc={"a": 10}, stats=stats))
    assert d.reasons == {n: "robinhood" for n, t in d.targets.items() if t != EVEN[n]} and d.reasons
    first = dict(d.reasons)
    d = pol.plan(PlanInput(targets=d.targets, used=d.targets, rbc={}, stats=stats))
    assert d.reasons == first  # nothing moved: the last reasons stay


def test_a_ramp_is_relieved_before_anything_is_backlogged() -> None:
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    # Nothing backlogged; the spread ten times its baseline: ρ ≈ 0.9 > 0.65.
    ramp = Observed(served=1000, offered=1000, spread_us=30_000, gain=10 / MIB)
    s = step(dict(base, a=ramp), {"a": 10}, state)
    assert s.relieved == ["a"]
    # Capacity ≈ 1000/0.9 = 1111: cut 1000 − 0.65·1111 ≈ 278 misses ≈ 27.8 MB.
    assert 27 * MIB < s.given["a"] < 28 * MIB
    # Under the target (spread 2× the baseline: ρ = 0.5): nothing.
    s = step(dict(base, a=calm(spread_us=6000)), {"a": 10}, state)
    assert s.relieved == [] and s.given == {}


def test_relief_needs_a_share_of_the_tail_a_gain_and_the_alarm() -> None:
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    queueing = Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB)
    # Blocks no more than an even share of the tail: nothing.
    assert step(dict(base, a=queueing), {"a": 1, "b": 1, "c": 1, "d": 1}, state).relieved == []
    assert step(dict(base, a=queueing), {"b": 10}, state).relieved == []
    # More cache saves nothing: nothing.
    flat = Observed(served=1000, offered=1500, spread_us=60_000, gain=0.0)
    assert step(dict(base, a=flat), {"a": 10}, state).relieved == []
    # The request P99 under the alarm, or unknown: nothing.
    assert step(dict(base, a=queueing), {"a": 10}, state, p99=30_000).relieved == []
    assert step(dict(base, a=queueing), {"a": 10}, state, p99=None).relieved == []
    # Without an SLO there is no alarm to wait for.
    assert step(dict(base, a=queueing), {"a": 10}, state, p99=None, slo=None).relieved == ["a"]


def test_a_backend_relieved_lately_gives_nothing_and_a_filling_grant_waits() -> None:
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    queueing = Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB)
    s1 = step(dict(base, b=queueing), {"b": 10}, state)
    assert s1.given and "b" not in s1.taken
    # Next tick a needs relief; b needed it a tick ago, so it is no donor.
    s2 = step(dict(base, a=queueing), {"a": 10}, s1.state, targets=s1.targets)
    assert s2.given and "b" not in s2.taken
    # b again, its grant not filled yet (used = its old 40 MB) and its latency not rising: it waits.
    used = dict(s2.targets, b=40 * MIB)
    s3 = step(dict(base, b=queueing), {"b": 10}, s2.state, targets=s2.targets, used=used)
    assert s3.relieved == ["b"] and "b" not in s3.given
    # Its latency rising by a quarter since the grant: the grant was too small, more comes.
    rising = Observed(served=1000, offered=1500, spread_us=80_000, gain=10 / MIB)
    s4 = step(dict(base, b=rising), {"b": 10}, s2.state, targets=s2.targets, used=used)
    assert s4.given.get("b", 0) > 0
    # Filled (uses its whole target): more comes too.
    s5 = step(dict(base, b=queueing), {"b": 10}, s2.state, targets=s2.targets)
    assert s5.given.get("b", 0) > 0


def test_donors_stay_under_the_target() -> None:
    # c is at ρ 0.5: it may give space until its load grows to 0.65/0.5 = 1.3×: 300 misses,
    # 30 MB at 10 a MB, but no more than 25% of its partition (10 MB). d is above the target: no donor.
    base = {"a": calm(), "b": calm(), "c": calm(), "d": calm()}
    state = warm(base)
    obs = {"a": Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB),
           "b": calm(gain=1 / MIB, spread_us=3000), "c": calm(spread_us=6000, gain=100 / MIB),
           "d": calm(spread_us=20_000)}
    s = step(obs, {"a": 10}, state)
    assert "d" not in s.taken
    # c: load 1000 may grow by 30% = 300 misses at 100 a MB = 3 MB.
    assert s.taken["c"] == 3 * MIB


def test_with_several_app_servers_each_moves_its_share() -> None:
    """Every app server's controller sees the same backend and plans alike: each moves
    its share of the excess and of the donors' room in its own partition, so that N
    app servers together move what one app server alone would, not N times it."""
    base = {n: calm() for n in "abcd"}
    state = warm(base)

    def halves(obs: dict[str, Observed]) -> dict[str, Observed]:
        """Two app servers, each sending half of every backend's load (the same gain per
        byte of its own partition)."""
        return {n: Observed(o.served, o.offered, o.spread_us, o.gain, share=0.5) for n, o in obs.items()}

    # c at ρ 0.5 may take 300 more misses in all (3 MB at 100 a MB); b and d do not queue
    # (at most 25% of their partition, 10 MB each).
    donors = dict(base, c=calm(spread_us=6000, gain=100 / MIB))
    # a backlogged (sent 1500, answers 1000): 850 misses to cut, 85 MB at 10 a MB, more than
    # the donors have: alone, 23 MB; each of two, c's room halved.
    hot = Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB)
    alone = step(dict(donors, a=hot), {"a": 10}, state)
    assert alone.taken == {"b": 10 * MIB, "c": 3 * MIB, "d": 10 * MIB} and alone.given == {"a": 23 * MIB}
    each = step(halves(dict(donors, a=hot)), {"a": 10}, state)
    assert each.taken == {"b": 10 * MIB, "c": int(1.5 * MIB), "d": 10 * MIB}
    assert each.given == {"a": 20 * MIB + int(1.5 * MIB)}
    # An excess the donors cover: a queues (ρ 0.95 from the spread) on 700 misses, capacity
    # 700 / 0.95: 221 misses to cut, 22.1 MB alone, half of it each.
    mild = Observed(served=1000, offered=700, spread_us=60_000, gain=10 / MIB)
    one = step(dict(donors, a=mild), {"a": 10}, state)
    two = step(halves(dict(donors, a=mild)), {"a": 10}, state)
    assert 22 * MIB < one.given["a"] < 22.2 * MIB
    assert abs(two.given["a"] - one.given["a"] / 2) <= 1


def test_observe_takes_this_app_servers_share_and_gain() -> None:
    every = QueryStats(hits=600, misses=400, shadow_hits=40, shadow_bytes=8 * MIB, queries=1000,
                       p50_backend_latency_us=4000, p90_backend_latency_us=10_000)
    own = QueryStats(hits=300, misses=100, shadow_hits=30, shadow_bytes=4 * MIB, queries=400,
                     p50_backend_latency_us=4000, p90_backend_latency_us=10_000)
    o = observe({"a": every}, {"a": own})["a"]
    assert (o.offered, o.share, o.gain) == (400, 0.25, 30 / (4 * MIB))
    # Without its own statistics (an older RBC server): the only app server.
    assert observe({"a": every})["a"].share == 1.0 and observe({"a": every}, {})["a"].gain == 40 / (8 * MIB)


def test_no_donor_no_move_and_nothing_below_the_floor() -> None:
    targets = {"a": 112 * MIB, "b": 16 * MIB, "c": 16 * MIB, "d": 16 * MIB}
    base = {n: calm() for n in "abcd"}
    state = warm(base)
    queueing = Observed(served=1000, offered=1500, spread_us=60_000, gain=10 / MIB)
    s = step(dict(base, a=queueing), {"a": 10}, state, targets=targets)
    assert s.targets == targets and s.given == {}


@settings(max_examples=200, deadline=None)
@given(spreads=st.lists(st.floats(1, 200_000), min_size=4, max_size=4),
       offered=st.lists(st.floats(0, 5000), min_size=4, max_size=4),
       served=st.lists(st.floats(1, 5000), min_size=4, max_size=4),
       gains=st.lists(st.floats(0, 1e-3), min_size=4, max_size=4),
       rbc=st.lists(st.integers(0, 50), min_size=4, max_size=4),
       sizes=st.lists(st.integers(16, 200), min_size=4, max_size=4))
def test_a_step_keeps_the_sum_and_the_floor_and_gives_only_to_the_relieved(
        spreads: list[float], offered: list[float], served: list[float], gains: list[float], rbc: list[int],
        sizes: list[int]) -> None:
    names = "abcd"
    targets = {n: s * MIB for n, s in zip(names, sizes)}
    budget = sum(targets.values())
    obs = {n: Observed(served=sv, offered=max(of, sv), spread_us=sp, gain=g)
           for n, sp, of, sv, g in zip(names, spreads, offered, served, gains)}
    state = warm({n: calm() for n in names})
    s = plan_relief(targets, targets, obs, dict(zip(names, rbc)), 100_000, state, P, FLOOR, budget, SLO_US)
    assert sum(s.targets.values()) == budget
    assert all(v >= min(FLOOR, targets[n]) for n, v in s.targets.items())
    assert set(s.given) <= set(s.relieved)
    assert not set(s.taken) & set(s.relieved)
    assert all(v <= P.donor_step * targets[n] for n, v in s.taken.items())
    assert sum(s.given.values()) == sum(s.taken.values())


def ctx(slo: bool = True) -> PolicyContext:
    return PolicyContext(budget_bytes=BUDGET, configured=dict(EVEN), floor_bytes=FLOOR,
                         slo=SLO(latency=0.15, step=2.0, window=10.0, warmup=30.0) if slo else None)


def test_without_a_backend_near_capacity_it_is_robinhoods_step() -> None:
    pol = build_policy("relief", {}, ctx())
    stats = {n: QueryStats(hits=700, misses=300, shadow_hits=30, shadow_bytes=4 * MIB, queries=1000,
                           p50_backend_latency_us=4000, p90_backend_latency_us=7000) for n in "abcd"}
    rbc = {"a": 5, "b": 1}
    d = pol.plan(PlanInput(targets=EVEN, used=EVEN, rbc=rbc, stats=stats, now=1.0, p99_latency_us=200_000))
    rh = plan_robinhood(EVEN, EVEN, rbc, RobinHoodParams(tax=TAX, unused_gap=0.3, floor_bytes=FLOOR))
    assert d.targets == rh.targets and d.note == ""


def test_it_runs_without_an_slo_block() -> None:
    pol = build_policy("relief", {}, ctx(slo=False))
    calm_stats = QueryStats(hits=700, misses=300, shadow_hits=30, shadow_bytes=4 * MIB, queries=1000,
                            p50_backend_latency_us=4000, p90_backend_latency_us=7000)
    stats = {n: calm_stats for n in "abcd"}
    for t in range(3):
        pol.plan(PlanInput(targets=EVEN, used=EVEN, rbc={}, stats=stats, now=float(t)))
    backlog = QueryStats(hits=500, misses=1500, shadow_hits=30, shadow_bytes=4 * MIB, queries=1500,
                         p50_backend_latency_us=4000, p90_backend_latency_us=90_000)
    d = pol.plan(PlanInput(targets=EVEN, used=EVEN, rbc={"a": 9}, stats=dict(stats, a=backlog), now=4.0))
    assert d.targets["a"] > EVEN["a"] + MIB and d.note.startswith("relief: a +")


def test_relief_vector() -> None:
    """tests/vectors/relief.json: the ticks any implementation of relief must reproduce."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[2] / "tests" / "vectors" / "relief.json").read_text())
    assert doc["schema"] == "robinhood-relief/v1"
    pol = build_policy("relief", {}, PolicyContext(
        budget_bytes=doc["budget_bytes"], configured=dict(doc["targets"]), floor_bytes=doc["floor_bytes"],
        slo=SLO(latency=doc["slo_latency_s"], step=2.0, window=10.0, warmup=30.0)))
    targets = dict(doc["targets"])
    for i, t in enumerate(doc["ticks"]):
        d = pol.plan(PlanInput(targets=targets, used=t.get("used", targets), rbc=t["rbc"],
                               stats={n: QueryStats(**s) for n, s in t["stats"].items()}, now=1000.0 + i,
                               p99_latency_us=t["p99_latency_us"]))
        assert d.targets == t["expect"], f"tick {i}"
        assert d.note == t["note"], f"tick {i}"
        targets = d.targets
