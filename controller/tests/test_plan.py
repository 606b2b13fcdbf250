"""Properties and cases of the pure RobinHood plan (paper §3.1-3.2) and of the byte-to-MB
mechanics around every policy (round_limits, adopt)."""
from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from robinhood_common.split import split_even
from robinhood_controller.plan import MIB, adopt, round_limits
from robinhood_controller.policies.robinhood import RobinHoodParams, is_eligible, plan_robinhood

NAMES = [f"p{i:02d}" for i in range(20)]


@st.composite
def plan_inputs(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, int], dict[str, int], RobinHoodParams, int]:
    """Allocations that sum to a whole-MB budget, each at or above the floor."""
    n = draw(st.integers(1, 20))
    names = NAMES[:n]
    floor_mb = draw(st.integers(8, 64))
    extra_mb = draw(st.integers(0, 4096))
    budget_mb = floor_mb * n + extra_mb
    # Random split of the bytes above the floor.
    cuts = sorted(draw(st.lists(st.integers(0, extra_mb * MIB), min_size=n - 1, max_size=n - 1)))
    bounds = [0, *cuts, extra_mb * MIB]
    alloc = {nm: floor_mb * MIB + bounds[i + 1] - bounds[i] for i, nm in enumerate(names)}
    used = {nm: draw(st.integers(0, 2 * alloc[nm])) for nm in names}
    rbc = {nm: draw(st.one_of(st.just(0), st.integers(0, 10_000))) for nm in names}
    params = RobinHoodParams(
        tax=draw(st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.2])),
        unused_gap=draw(st.sampled_from([0.0, 0.1, 0.3, 1.0])),
        floor_bytes=floor_mb * MIB,
    )
    return alloc, used, rbc, params, budget_mb


@settings(max_examples=300, deadline=None)
@given(plan_inputs())
def test_targets_and_limits_sum_to_the_budget(inp) -> None:
    alloc, used, rbc, params, budget_mb = inp
    r = plan_robinhood(alloc, used, rbc, params)
    assert sum(r.targets.values()) == budget_mb * MIB
    limits = round_limits(r.targets, budget_mb)
    assert sum(limits.values()) == budget_mb
    for n, t in r.targets.items():
        assert limits[n] in (t // MIB, -(-t // MIB))


@settings(max_examples=300, deadline=None)
@given(plan_inputs())
def test_no_partition_below_the_floor(inp) -> None:
    alloc, used, rbc, params, budget_mb = inp
    r = plan_robinhood(alloc, used, rbc, params)
    floor_mb = params.floor_bytes // MIB
    assert all(t >= params.floor_bytes for t in r.targets.values())
    assert all(mb >= floor_mb for mb in round_limits(r.targets, budget_mb).values())


@settings(max_examples=300, deadline=None)
@given(plan_inputs())
def test_pool_goes_only_to_eligible_partitions_with_rbc(inp) -> None:
    alloc, used, rbc, params, _ = inp
    r = plan_robinhood(alloc, used, rbc, params)
    assert r.pool == sum(r.tax.values())
    gained = 0
    for n, a in alloc.items():
        takes = r.redistributed and rbc[n] > 0 and is_eligible(a, used[n], params.unused_gap)
        assert r.eligible[n] == is_eligible(a, used[n], params.unused_gap)
        if r.redistributed and not takes:
            assert r.targets[n] == a - r.tax[n]
        if takes:
            gained += r.targets[n] - (a - r.tax[n])
    if r.redistributed:
        assert gained == r.pool


@settings(max_examples=200, deadline=None)
@given(plan_inputs())
def test_all_zero_rbc_changes_nothing(inp) -> None:
    alloc, used, _, params, _ = inp
    r = plan_robinhood(alloc, used, {n: 0 for n in alloc}, params)
    assert r.targets == alloc
    assert not r.redistributed


@settings(max_examples=300, deadline=None)
@given(plan_inputs(), st.data())
def test_share_grows_with_rbc(inp, data) -> None:
    alloc, used, rbc, params, _ = inp
    n = data.draw(st.sampled_from(sorted(alloc)))
    bump = data.draw(st.integers(1, 10_000))
    before = plan_robinhood(alloc, used, rbc, params).targets[n]
    after = plan_robinhood(alloc, used, {**rbc, n: rbc[n] + bump}, params).targets[n]
    # Largest-remainder can move one leftover byte between partitions.
    assert after >= before - 1


@settings(max_examples=200, deadline=None)
@given(plan_inputs())
def test_gain_is_ordered_by_rbc_among_equal_partitions(inp) -> None:
    alloc, used, rbc, params, budget_mb = inp
    # Make every partition identical except for its RBC.
    n = len(alloc)
    assume(n >= 2)
    each = budget_mb * MIB // n
    same = {k: each for k in alloc}
    same[sorted(alloc)[0]] += budget_mb * MIB - each * n
    assume(all(v >= params.floor_bytes for v in same.values()))
    full = dict(same)
    r = plan_robinhood(same, full, rbc, params)
    others = sorted(alloc)[1:]
    for x in others:
        for y in others:
            if rbc[x] > rbc[y]:
                assert r.targets[x] >= r.targets[y] - 1


def test_input_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"allocations.a: -1 is negative"):
        plan_robinhood({"a": -1}, {}, {}, RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=48 * MIB))
    with pytest.raises(ValueError, match=r"rbc.a: -3"):
        plan_robinhood({"a": 64 * MIB}, {}, {"a": -3}, RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=48 * MIB))
    with pytest.raises(ValueError, match="not the budget"):
        round_limits({"a": 64 * MIB + 1}, 64)


def test_one_blamed_partition_gets_the_whole_pool() -> None:
    alloc = {n: 64 * MIB for n in "abc"}
    r = plan_robinhood(alloc, alloc, {"a": 10}, RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=16 * MIB))
    tax = int(64 * MIB * 0.01)
    assert r.tax == {n: tax for n in "abc"}
    assert r.targets == {"a": 64 * MIB + 2 * tax, "b": 64 * MIB - tax, "c": 64 * MIB - tax}
    # 65.28, 63.36, 63.36 MB: the leftover MB goes to the larger remainder, ties by name.
    assert round_limits(r.targets, 192) == {"a": 65, "b": 64, "c": 63}


def test_eligibility_uses_the_applied_allocation() -> None:
    # "a" is full at its 40 MB limit; its target ran ahead to 60 MB because the other
    # partitions have not freed their pages yet. It uses all it was given, so it stays
    # eligible; judged on the target (60 − 40 > 0.3 · 40) it would be shut out.
    params = RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=16 * MIB)
    targets = {"a": 60 * MIB, "b": 30 * MIB, "c": 30 * MIB}
    used = {"a": 40 * MIB, "b": 30 * MIB, "c": 30 * MIB}
    r = plan_robinhood(targets, used, {"a": 9}, params, applied={"a": 40 * MIB})
    assert r.eligible["a"] and r.redistributed and r.targets["a"] > targets["a"]
    r = plan_robinhood(targets, used, {"a": 9}, params)
    assert not r.eligible["a"] and not r.redistributed and r.targets == targets
    # A partition really given space it does not fill is still excluded.
    r = plan_robinhood(targets, used, {"a": 9}, params, applied={"a": 60 * MIB})
    assert not r.eligible["a"]


def _simulate(n: int, mb: int, ticks: int, floor_mb: int, blamed: str) -> list[dict[str, int]]:
    """Targets → limits over ticks with a blamed partition; every partition full."""
    alloc = {f"p{i:02d}": mb * MIB for i in range(n)}
    params = RobinHoodParams(tax=0.01, unused_gap=0.30, floor_bytes=floor_mb * MIB)
    out = []
    for _ in range(ticks):
        alloc = plan_robinhood(alloc, alloc, {blamed: 5}, params).targets
        out.append(round_limits(alloc, n * mb))
    return out


def test_space_flows_at_the_paper_rate_with_64mb_partitions() -> None:
    # Three 64 MB partitions: every tick pools 1% of each, 0.64 MB < 1 MB granularity.
    limits = _simulate(3, 64, 30, 16, "p00")
    budget = 192
    grown = [lim["p00"] - 64 for lim in limits]
    # Exact expectation: the others lose 1% of their allocation per tick.
    others = 64.0
    for t in range(30):
        others *= 0.99
        expected = budget - 2 * others - 64
        assert abs(grown[t] - expected) < 1.0 + 1e-9, (t, grown[t], expected)
    # ≈1% of the budget per tick on average: 30 ticks move ~ 0.99 × 1.92 × 30 ≈ 33 MB.
    assert 32 <= grown[-1] <= 34
    assert all(b >= a for a, b in zip(grown, grown[1:]))


def test_space_flows_where_per_tick_rounding_would_freeze() -> None:
    # 20 partitions of 32 MB: each tax is 0.32 MB, which per-tick rounding returns.
    limits = _simulate(20, 32, 10, 8, "p07")
    # The 19 others lose 1% per tick: p07 ends at 640 − 608 × 0.99¹⁰ ≈ 90.1 MB.
    assert abs(limits[-1]["p07"] - (640 - 608 * 0.99**10)) < 1.0
    assert all(sum(lim.values()) == 640 for lim in limits)
    naive = {f"p{i:02d}": 32 for i in range(20)}
    for _ in range(10):
        taxed = {k: round(v * 0.99) for k, v in naive.items()}
        naive = taxed  # 31.68 rounds back to 32: nothing ever moves
    assert naive["p07"] == 32


def test_round_limits_largest_remainder() -> None:
    t = {"a": int(10.6 * MIB), "b": int(10.3 * MIB), "c": 0}
    t["c"] = 32 * MIB - t["a"] - t["b"]  # 11.1 MB
    assert round_limits(t, 32) == {"a": 11, "b": 10, "c": 11}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=20), st.integers(8, 64), st.integers(0, 4000))
def test_adopt_gives_valid_targets(limits_list, floor_mb, extra) -> None:
    names = NAMES[: len(limits_list)]
    limits = dict(zip(names, limits_list))
    budget = floor_mb * len(names) + extra
    t = adopt(limits, budget, floor_mb)
    assert sum(t.values()) == budget * MIB
    assert all(v >= floor_mb * MIB for v in t.values())


def test_adopt_keeps_consistent_limits_and_scales_others() -> None:
    assert adopt({"a": 100, "b": 92}, 192, 16) == {"a": 100 * MIB, "b": 92 * MIB}
    # Three instances started with -m 64 for a 96 MB budget: scaled evenly.
    assert adopt({"a": 64, "b": 64, "c": 64}, 96, 16) == split_even(96 * MIB, ["a", "b", "c"])
    # A partition the proportional share would push under the floor is pinned to it.
    t = adopt({"a": 8, "b": 200}, 100, 16)
    assert t == {"a": 16 * MIB, "b": 84 * MIB}
