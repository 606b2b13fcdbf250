"""The competitor policies (fair++, lama++, cliffhanger++, tao++, oracle), the
paper's two and RobinHood's variants (robinhood-home, robinhood-guard,
robinhood-pressure, robinhood-shift, robinhood-queue): the shared vectors (tests/vectors/policies.json) and properties every
policy must have — targets keep their sum, never go below the floor, and the same input
gives the same output."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robinhood_common.split import split_weighted

from robinhood_controller import policies
from robinhood_controller.decide import decide
from robinhood_controller.plan import MIB
from robinhood_controller.policies import PartitionSample, PlanInput, PolicyContext, QueryStats
from robinhood_controller.policies.robinhood import RobinHoodParams, plan_robinhood
from robinhood_controller.policies.robinhood_home import home_split
from robinhood_controller.rbc import RBCSnapshot

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "tests" / "vectors" / "policies.json").read_text())
assert VECTORS["schema"] == "robinhood-policies/v1"


def build(spec: dict[str, Any], targets: dict[str, int], floor: int, budget: int | None = None,
          configured: dict[str, int] | None = None) -> policies.AllocationPolicy:
    params = {k: v for k, v in spec.items() if k != "name"}
    ctx = PolicyContext(budget_bytes=budget or sum(targets.values()),
                        configured=dict(configured if configured is not None else targets), floor_bytes=floor)
    return policies.build(spec["name"], params, ctx)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_policy_vector(case: dict[str, Any]) -> None:
    targets = case["targets"]
    pol = build(case["policy"], targets, case["floor_bytes"], case.get("budget_bytes"), case.get("configured"))
    start = pol.initial_targets(targets)
    stats = {n: QueryStats(**s) for n, s in case["stats"].items()}
    used = case.get("used", start)
    d = pol.plan(PlanInput(targets=start, used=used, rbc=case.get("rbc", {}), stats=stats, now=1000.0,
                           p99_latency_us=case.get("p99_latency_us")))
    assert d.targets == case["expect"]
    assert sum(d.targets.values()) == sum(targets.values())


def test_vectors_cover_every_policy_that_has_them() -> None:
    names = {c["name"] for c in VECTORS["cases"]}
    assert {"robinhood_home_healthy_goes_home", "robinhood_home_unhealthy_is_robinhood",
            "robinhood_home_unknown_p99_is_robinhood", "robinhood_home_at_home_stays",
            "robinhood_home_scales_home_to_the_total", "robinhood_home_ineligible_gets_nothing",
            "robinhood_guard_untaxes_a_saturated_backend", "robinhood_guard_without_stats_is_robinhood",
            "robinhood_pressure_at_the_slo_is_robinhood", "robinhood_pressure_half_the_slo_half_the_tax",
            "robinhood_queue_first_tick_is_robinhood"} <= names
    assert {c["policy"]["name"] for c in VECTORS["cases"]} >= {"fair++", "lama++", "cliffhanger++", "tao++",
                                                                "robinhood-home", "robinhood-guard",
                                                                "robinhood-pressure", "robinhood-queue"}


def test_every_registered_policy_is_listed() -> None:
    assert {"robinhood", "robinhood-home", "robinhood-guard", "robinhood-pressure", "robinhood-shift",
            "robinhood-queue", "static", "tao++", "cliffhanger++", "fair++", "lama++", "oracle"} <= set(policies.names())


NAMES = ["a", "b", "c", "d"]


Inputs = tuple[dict[str, int], int, dict[str, QueryStats], dict[str, int], dict[str, int], list[int | None]]


@st.composite
def inputs(draw: st.DrawFn) -> Inputs:
    """Targets, floor, statistics, RBC, a configured split (the targets' values
    rotated among the partitions: the same sum, each ≥ the floor) and the request P99
    of each of four ticks (None: unknown)."""
    n = draw(st.integers(2, 4))
    names = NAMES[:n]
    floor = draw(st.integers(8, 64)) * MIB
    extra = [draw(st.integers(0, 512 * MIB)) for _ in names]
    targets = {name: floor + e for name, e in zip(names, extra)}
    stats = {
        name: QueryStats(hits=draw(st.integers(0, 10_000)), misses=draw(st.integers(0, 10_000)),
                         shadow_hits=draw(st.integers(0, 1000)), shadow_bytes=4 * MIB,
                         queries=draw(st.integers(0, 20_000)), p99_query_latency_us=draw(st.integers(0, 10**6)))
        for name in names if draw(st.booleans())
    }
    rbc = {name: draw(st.integers(0, 100)) for name in names}
    shift = draw(st.integers(0, n - 1))
    configured = {name: targets[names[(i + shift) % n]] for i, name in enumerate(names)}
    p99s = draw(st.lists(st.one_of(st.none(), st.integers(0, 300_000)), min_size=4, max_size=4))
    return targets, floor, stats, rbc, configured, p99s


@pytest.mark.parametrize("spec", [{"name": "robinhood"}, {"name": "robinhood-home"}, {"name": "robinhood-guard"},
                                  {"name": "robinhood-pressure"}, {"name": "robinhood-shift"},
                                  {"name": "robinhood-queue"}, {"name": "static"},
                                  {"name": "fair++"}, {"name": "lama++"}, {"name": "cliffhanger++"},
                                  {"name": "tao++", "learn": 30.0}],
                         ids=lambda s: s["name"])
@settings(max_examples=150, deadline=None)
@given(data=inputs())
def test_properties(spec: dict[str, Any], data: Inputs) -> None:
    targets, floor, stats, rbc, configured, p99s = data
    outs = []
    for _ in range(2):
        pol = build(spec, targets, floor, configured=configured)
        cur = pol.initial_targets(targets)
        for tick in range(4):  # a few ticks: tao++ learns, then holds; robinhood-home changes mode
            inp = PlanInput(targets=cur, used=cur, rbc=rbc, stats=stats, now=100.0 + 20 * tick,
                            p99_latency_us=p99s[tick])
            d = pol.plan(inp)
            assert sum(d.targets.values()) == sum(targets.values())
            assert set(d.targets) == set(targets)
            assert all(v >= floor for v in d.targets.values()), d.targets
            cur = d.targets
        outs.append(cur)
    assert outs[0] == outs[1], "same input, different output"


def test_tao_learns_robinhood_then_holds_the_average() -> None:
    targets = {"a": 100 * MIB, "b": 100 * MIB}
    pol = build({"name": "tao++", "learn": 10.0}, targets, 16 * MIB)
    cur = pol.initial_targets(targets)
    history = []
    for tick in range(12):  # b blocks every request: RobinHood moves space to b
        d = pol.plan(PlanInput(targets=cur, used=cur, rbc={"b": 10}, now=1000.0 + tick))
        cur = d.targets
        history.append(cur["b"])
    # Growing while learning (10 s), then constant at the learning phase's average.
    assert history[0] < history[5] < history[9]
    assert history[10] == history[11] < history[9]
    assert history[0] < history[10]


def write_timeline(folder: Path, app: str, start: float, ticks: list[tuple[float, dict[str, int]]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run-start").write_text(f"{start}\n")
    lines = [json.dumps({"time": t, "tick": i, "partitions": {n: {"target_bytes": v, "limit_bytes": v}
                                                              for n, v in alloc.items()}})
             for i, (t, alloc) in enumerate(ticks)]
    (folder / f"controller-{app}.jsonl").write_text("\n".join(lines) + "\n{\"time\": 1e12, \"tick\"")  # torn last line


def test_tao_from_an_earlier_runs_folder(tmp_path: Path) -> None:
    # An earlier run of 100 s (start 1000, last tick 1100): 20% is [1000, 1020). a holds 60 MB
    # for the first 10 s and 80 MB for the next 10 s (b the rest), then 10 MB (ignored).
    run = tmp_path / "robinhood"
    ticks = [(1000.0 + t, {"a": 60 * MIB, "b": 40 * MIB}) for t in range(0, 10, 5)]
    ticks += [(1010.0 + t, {"a": 80 * MIB, "b": 20 * MIB}) for t in range(0, 10, 5)]
    ticks += [(1020.0 + t, {"a": 10 * MIB, "b": 90 * MIB}) for t in range(0, 81, 20)]
    write_timeline(run, "app0", 1000.0, ticks)
    targets = {"a": 50 * MIB, "b": 50 * MIB}
    ctx = PolicyContext(budget_bytes=100 * MIB, configured=dict(targets), floor_bytes=8 * MIB, app_server="app0")
    pol = policies.build("tao++", {"from_run": str(run)}, ctx)
    start = pol.initial_targets(targets)
    assert start == {"a": 70 * MIB, "b": 30 * MIB}
    d = pol.plan(PlanInput(targets=start, used=start, rbc={"b": 50}, now=5.0))
    assert d.targets == start and not d.moved  # held, whatever blocks

    # Another app server's controller reads the same folder: every timeline there, averaged.
    ctx1 = PolicyContext(budget_bytes=100 * MIB, configured=dict(targets), floor_bytes=8 * MIB, app_server="app1")
    assert policies.build("tao++", {"from_run": str(run)}, ctx1).initial_targets(targets) == start


@pytest.mark.parametrize(("setup", "params", "message"), [
    (None, {"from_run": "{d}/nope"}, "tao++.from_run: {d}/nope is not a folder"),
    ("empty", {"from_run": "{d}/empty"}, "holds no controller timeline"),
    ("other", {"from_run": "{d}/other"}, "has no allocation for partition 'b'"),
    (None, {"from_run": "{d}", "allocation_mb": {"a": 50, "b": 50}}, "give allocation_mb or from_run, not both"),
])
def test_tao_from_run_errors_name_the_problem(tmp_path: Path, setup: str | None, params: dict[str, Any],
                                              message: str) -> None:
    if setup == "empty":
        (tmp_path / "empty").mkdir()
    if setup == "other":
        write_timeline(tmp_path / "other", "app0", 0.0, [(0.0, {"a": 100 * MIB}), (10.0, {"a": 100 * MIB})])
    params = {k: v.format(d=tmp_path) if isinstance(v, str) else v for k, v in params.items()}
    targets = {"a": 50 * MIB, "b": 50 * MIB}
    ctx = PolicyContext(budget_bytes=100 * MIB, configured=dict(targets), floor_bytes=8 * MIB, app_server="app0")
    with pytest.raises(policies.PolicyError, match=message.format(d=tmp_path).replace("+", r"\+")):
        policies.build("tao++", params, ctx)


# -- robinhood-home -------------------------------------------------------------------

HOME40 = {"a": 40 * MIB, "b": 40 * MIB, "c": 40 * MIB}
SKEWED = {"a": 21 * MIB, "b": 59 * MIB, "c": 40 * MIB}  # a taxed deep below its home share, b above it


def home_policy(configured: dict[str, int] = HOME40, floor: int = 8 * MIB, **params: Any) -> policies.AllocationPolicy:
    ctx = PolicyContext(budget_bytes=sum(configured.values()), configured=dict(configured), floor_bytes=floor)
    return policies.build("robinhood-home", params, ctx)


def test_robinhood_home_healthy_gives_the_pool_back_by_deficit() -> None:
    # Tax (⌊0.01·a⌋): a 220,200, b 618,659, c 419,430; P = 1,258,289. After the tax
    # a 21,799,896, b 61,247,325, c 41,523,610; deficits below 41,943,040: a 20,143,144,
    # b 0, c 419,430 (W = 20,562,574). a: ⌊P·20,143,144/W⌋ = 1,232,623 (rest .3),
    # c: ⌊P·419,430/W⌋ = 25,665 (rest .6) + the leftover byte = 25,666.
    # b's RBC does not matter in home mode.
    d = home_policy().plan(PlanInput(targets=SKEWED, used=SKEWED, rbc={"b": 5}, p99_latency_us=50_000))
    assert d.targets == {"a": 23_032_519, "b": 61_247_325, "c": 41_549_276}
    assert d.moved and d.eligible == {"a": True, "b": True, "c": True}
    assert d.note == "robinhood-home: mode home (p99 50 ms < 120 ms)"


@pytest.mark.parametrize("p99", [None, 120_000, 130_000], ids=["unknown", "at_the_margin", "above"])
def test_robinhood_home_unhealthy_is_robinhood(p99: int | None) -> None:
    # The paper's step: the same taxes, the whole pool to b (the only RBC > 0).
    d = home_policy().plan(PlanInput(targets=SKEWED, used=SKEWED, rbc={"b": 5}, p99_latency_us=p99))
    assert d.targets == {"a": 21_799_896, "b": 62_505_614, "c": 41_523_610}
    assert d.moved and d.note.startswith("robinhood-home: mode rbc (p99 ")


def test_robinhood_home_margin_and_slo_set_the_threshold() -> None:
    pol = home_policy(slo_ms=100.0, margin=0.5)  # home below 50 ms
    assert pol.mode(49_999) == "home" and pol.mode(50_000) == "rbc" and pol.mode(None) == "rbc"
    assert home_policy().mode(119_999) == "home" and home_policy().mode(120_000) == "rbc"
    assert pol.plan(PlanInput(targets=SKEWED, used=SKEWED, rbc={"b": 5}, p99_latency_us=60_000)).targets["b"] == 62_505_614


def test_robinhood_home_tax_sets_the_pace_home() -> None:
    # home_tax 0 holds the split while the tail is healthy; 0.5 halves every tax (a's
    # ⌊0.005·21 MiB⌋ = 110,100, b's 309,329, c's 209,715; P = 629,144) and gives P by
    # deficit (a 20,033,044, c 209,715 of 41,943,040 after the tax).
    hold = home_policy(home_tax=0.0).plan(PlanInput(targets=SKEWED, used=SKEWED, rbc={"b": 5}, p99_latency_us=50_000))
    assert hold.targets == SKEWED and not hold.moved
    half = home_policy(home_tax=0.5).plan(PlanInput(targets=SKEWED, used=SKEWED, rbc={"b": 5}, p99_latency_us=50_000))
    assert sum(half.targets.values()) == sum(SKEWED.values())
    assert half.targets["b"] == SKEWED["b"] - 309_329
    assert half.targets["a"] - SKEWED["a"] > 0 and half.targets["a"] - SKEWED["a"] < 629_144
    # Unhealthy: RobinHood's full step whatever home_tax says.
    sick = home_policy(home_tax=0.0).plan(PlanInput(targets=SKEWED, used=SKEWED, rbc={"b": 5}, p99_latency_us=200_000))
    assert sick.targets == {"a": 21_799_896, "b": 62_505_614, "c": 41_523_610}


@pytest.mark.parametrize(("params", "message"), [
    ({"home_tax": 1.5}, "home_tax: 1.5 is above the maximum of 1"),
    ({"slo_ms": 0}, "slo_ms: 0 must be above 0"),
    ({"margin": 0}, "margin: 0 must be above 0"),
    ({"margin": 1.5}, "margin: 1.5 is above the maximum of 1"),
    ({"tax": 0.6}, "tax: 0.6 is above the maximum of 0.5"),
    ({"slo": 100}, "slo: unknown parameter of policy robinhood-home"),
])
def test_robinhood_home_parameters_are_checked(params: dict[str, Any], message: str) -> None:
    with pytest.raises(policies.PolicyError, match=message):
        home_policy(**params)


def test_robinhood_home_without_a_deficit_to_fill_changes_nothing() -> None:
    # a is below home but not using its space (ineligible); b and c stay above home
    # after the tax: no eligible partition has a deficit, every tax goes back.
    targets = {"a": 20 * MIB, "b": 50 * MIB, "c": 50 * MIB}
    used = {"a": 5 * MIB, "b": 50 * MIB, "c": 50 * MIB}
    d = home_policy().plan(PlanInput(targets=targets, used=used, rbc={"a": 9}, p99_latency_us=1000))
    assert d.targets == targets and not d.moved
    assert d.eligible == {"a": False, "b": True, "c": True}


def test_robinhood_home_scales_the_home_split_to_the_total() -> None:
    assert home_split({"a": 30, "b": 10}, 80) == {"a": 60, "b": 20}
    assert home_split({"a": 1, "b": 1, "c": 1}, 100) == {"a": 34, "b": 33, "c": 33}
    assert home_split(HOME40, sum(HOME40.values())) == HOME40
    # Configured 60 + 20 MiB = 80 MiB, planned over 120 MiB: home is 90 / 30 MiB.
    pol = home_policy({"a": 60 * MIB, "b": 20 * MIB})
    cur = {"a": 60 * MIB, "b": 60 * MIB}
    for _ in range(200):
        d = pol.plan(PlanInput(targets=cur, used=cur, rbc={}, p99_latency_us=1000))
        assert cur["a"] <= d.targets["a"] <= 90 * MIB
        cur = d.targets
    assert cur == {"a": 90 * MIB, "b": 30 * MIB}


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 5), data=st.data())
def test_robinhood_home_converges_home_exactly_without_overshoot(n: int, data: st.DataObject) -> None:
    names = [*NAMES, "e"][:n]
    floor = 16 * MIB
    home = {x: floor + data.draw(st.integers(0, 200 * MIB)) for x in names}
    total = sum(home.values())
    # A skewed split of the same total, each ≥ the floor.
    shares = split_weighted(total - n * floor, {x: data.draw(st.integers(0, 1000)) for x in names})
    cur = {x: floor + shares[x] for x in names}
    rbc = {x: data.draw(st.integers(0, 50)) for x in names}
    pol = home_policy(home, floor)
    distance = sum(abs(cur[x] - home[x]) for x in names)
    for _ in range(2000):
        if cur == home:
            break
        d = pol.plan(PlanInput(targets=cur, used=cur, rbc=rbc, p99_latency_us=10_000))
        assert sum(d.targets.values()) == total and all(v >= floor for v in d.targets.values())
        for x in names:
            if cur[x] <= home[x]:
                # Never overshoots. (It may dip: a partition at or just below home pays its
                # tax and gets a share of a pool smaller than the total deficit while
                # others are still above home.)
                assert d.targets[x] <= home[x], (x, cur[x], d.targets[x], home[x])
            else:
                assert d.targets[x] < cur[x]  # above home: only taxed, never given anything
        # The distance from home (twice the surplus above it) shrinks every tick.
        new_distance = sum(abs(d.targets[x] - home[x]) for x in names)
        assert new_distance < distance
        cur, distance = d.targets, new_distance
    assert cur == home
    # At home it stays home, byte for byte.
    d = pol.plan(PlanInput(targets=cur, used=cur, rbc=rbc, p99_latency_us=10_000))
    assert d.targets == home and not d.moved


def test_robinhood_home_reaches_home_from_a_deep_hole() -> None:
    # The loss it fixes: a taxed to 21 MB of its 40 MB share during earlier spikes.
    pol = home_policy()
    cur, ticks = dict(SKEWED), 0
    while cur != HOME40:
        d = pol.plan(PlanInput(targets=cur, used=cur, rbc={"b": 3}, p99_latency_us=20_000))
        assert cur["a"] < d.targets["a"] <= HOME40["a"]
        cur, ticks = d.targets, ticks + 1
        assert ticks < 100
    assert ticks == 39  # b's 19 MB surplus, taxed about 1% of its share a tick


@settings(max_examples=100, deadline=None)
@given(data=inputs(), ticks=st.integers(1, 6), slow=st.booleans())
def test_robinhood_home_unhealthy_equals_plan_robinhood(data: Inputs, ticks: int, slow: bool) -> None:
    targets, floor, stats, rbc, configured, _ = data
    pol = build({"name": "robinhood-home", "tax": 0.02, "unused_gap": 0.5}, targets, floor, configured=configured)
    params = RobinHoodParams(tax=0.02, unused_gap=0.5, floor_bytes=floor)
    cur = dict(targets)
    for _ in range(ticks):
        used = {n: v // 2 if slow and n == "a" else v for n, v in cur.items()}  # a not using its space
        p99 = None if slow else 120_000
        d = pol.plan(PlanInput(targets=cur, used=used, rbc=rbc, stats=stats, p99_latency_us=p99))
        r = plan_robinhood(cur, used, rbc, params)
        assert d.targets == r.targets and d.moved == r.redistributed and d.eligible == r.eligible
        cur = d.targets


def test_robinhood_home_gets_the_p99_from_the_tick() -> None:
    pol = home_policy()
    samples = {n: PartitionSample(limit_bytes=v, malloced_bytes=v, item_bytes=v) for n, v in SKEWED.items()}
    counts = {"a": 0, "b": 5, "c": 0}

    def tick(snap: RBCSnapshot | None) -> Any:
        return decide(pol, ["a", "b", "c"], SKEWED, samples, snap, budget_mb=120, floor_mb=8,
                      used_source="malloced", now=1.0)

    d = tick(RBCSnapshot(counts=counts, window_requests=1000, p99_latency_us=50_000))
    assert d.targets == {"a": 23_032_519, "b": 61_247_325, "c": 41_549_276}
    assert d.notes == ["robinhood-home: mode home (p99 50 ms < 120 ms)"]
    d = tick(RBCSnapshot(counts=counts, window_requests=1000, p99_latency_us=200_000))
    assert d.targets["b"] == 62_505_614 and d.notes == ["robinhood-home: mode rbc (p99 200 ms ≥ 120 ms)"]
    # An empty window (p99 0) is no evidence of health: RobinHood's step (nothing blocks: no move).
    d = tick(RBCSnapshot(counts={"a": 0, "b": 0, "c": 0}, window_requests=0, p99_latency_us=0))
    assert d.targets == SKEWED and d.notes == ["robinhood-home: mode rbc (p99 unknown)"]
    d = tick(None)  # no snapshot: a policy that needs the RBC keeps its targets
    assert d.targets == SKEWED and d.notes == ["rbc unavailable: targets kept"]


# -- robinhood-guard ------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(data=inputs(), guard_us=st.integers(1, 400_000))
def test_robinhood_guard_never_shrinks_a_guarded_partition_and_is_robinhood_otherwise(
        data: Inputs, guard_us: int) -> None:
    from robinhood_controller.policies.robinhood_guard import plan_guard

    targets, floor, stats, rbc, _, _ = data
    params = RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=floor)
    p99 = {n: s.p99_query_latency_us for n, s in stats.items()}
    g = plan_guard(targets, targets, rbc, p99, guard_us, params)
    assert sum(g.targets.values()) == sum(targets.values())
    assert g.guarded == sorted(n for n, v in p99.items() if v > 0 and v >= guard_us)
    for n in g.guarded:
        assert g.tax[n] == 0 and g.targets[n] >= targets[n]
    r = plan_robinhood(targets, targets, rbc, params)
    if not g.guarded:
        assert g.targets == r.targets
    # The others pay exactly RobinHood's tax.
    assert all(g.tax[n] == r.tax[n] for n in targets if n not in g.guarded)


def test_robinhood_guard_notes_the_untaxed_partitions() -> None:
    t = {"a": 40 * MIB, "b": 40 * MIB, "c": 40 * MIB}
    pol = build({"name": "robinhood-guard", "slo_ms": 100.0, "guard": 0.4}, t, 16 * MIB)
    slow = {"a": QueryStats(p99_query_latency_us=40_000), "c": QueryStats(p99_query_latency_us=39_999)}
    d = pol.plan(PlanInput(targets=t, used=t, rbc={"b": 3}, stats=slow))
    assert d.note == "robinhood-guard: untaxed a" and d.targets["a"] == t["a"] and d.targets["c"] < t["c"]


@settings(max_examples=200, deadline=None)
@given(data=inputs(), guard_us=st.integers(1, 400_000))
def test_robinhood_guard_keep_pool_takes_the_guarded_tax_from_the_others(data: Inputs, guard_us: int) -> None:
    from robinhood_controller.policies.robinhood_guard import plan_guard

    targets, floor, stats, rbc, _, _ = data
    params = RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=floor)
    p99 = {n: s.p99_query_latency_us for n, s in stats.items()}
    g = plan_guard(targets, targets, rbc, p99, guard_us, params, keep_pool=True)
    r = plan_robinhood(targets, targets, rbc, params)
    assert sum(g.targets.values()) == sum(targets.values())
    assert all(v >= floor for v in g.targets.values())
    for n in g.guarded:
        assert g.tax[n] == 0 and g.targets[n] >= targets[n]
    # The pool is RobinHood's when the unguarded partitions can pay it (room above the
    # floor), never more.
    payers = [n for n in targets if n not in g.guarded and r.tax[n] > 0]
    assert g.pool <= r.pool
    if payers and all(targets[n] - floor >= r.pool for n in payers):
        assert g.pool == r.pool
    assert all(g.tax[n] >= r.tax[n] or g.tax[n] == targets[n] - floor for n in targets if n not in g.guarded)


# -- robinhood-pressure ---------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(data=inputs(), p99=st.one_of(st.none(), st.integers(0, 400_000)), more=st.integers(0, 400_000),
       slo_ms=st.integers(1, 300))
def test_robinhood_pressure_is_robinhood_at_the_slo_and_taxes_less_below_it(
        data: Inputs, p99: int | None, more: int, slo_ms: int) -> None:
    from robinhood_controller.policies.robinhood_pressure import plan_pressure, pressure

    targets, floor, _, rbc, _, _ = data
    params = RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=floor)
    slo_us = slo_ms * 1000.0
    r = plan_robinhood(targets, targets, rbc, params)
    p = plan_pressure(targets, targets, rbc, p99, slo_us, params)
    assert sum(p.targets.values()) == sum(targets.values())
    assert all(v >= floor for v in p.targets.values())
    # Never more than RobinHood's tax, exactly RobinHood's step with the P99 unknown or at the SLO.
    assert all(p.tax[n] <= r.tax[n] for n in targets)
    if p99 is None or p99 >= slo_us:
        assert p == r
    # A higher P99 never takes less: the tax grows with the pressure on the tail.
    if p99 is not None:
        higher = plan_pressure(targets, targets, rbc, p99 + more, slo_us, params)
        assert all(higher.tax[n] >= p.tax[n] for n in targets)
        assert pressure(p99, slo_us) == min(1.0, p99 / slo_us)
    # The split of the pool is RobinHood's: only partitions with RBC > 0 gain.
    assert all(p.targets[n] <= targets[n] for n in targets if rbc.get(n, 0) == 0)


def test_robinhood_pressure_notes_its_scale_and_refuses_a_bad_slo() -> None:
    from robinhood_controller.policies.robinhood_pressure import pressure

    t = {"a": 40 * MIB, "b": 40 * MIB}
    pol = build({"name": "robinhood-pressure", "slo_ms": 100.0}, t, 16 * MIB)
    d = pol.plan(PlanInput(targets=t, used=t, rbc={"b": 3}, stats={}, p99_latency_us=25_000))
    assert d.note == "robinhood-pressure: tax × 0.250" and d.targets["a"] == t["a"] - int(0.0025 * t["a"])
    with pytest.raises(ValueError, match="slo must be positive"):
        pressure(1000, 0)
    with pytest.raises(policies.PolicyError, match="slo_ms"):
        build({"name": "robinhood-pressure", "slo_ms": 0}, t, 16 * MIB)


# -- robinhood-shift ------------------------------------------------------------------

share_maps = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 100), min_size=1).map(
    lambda d: {n: v / sum(d.values()) for n, v in d.items()} if sum(d.values()) else None)


@settings(max_examples=300, deadline=None)
@given(current=share_maps, mean=share_maps, weight=st.floats(0, 1))
def test_rbc_shift_is_a_distance_and_the_mean_a_mean(current: dict[str, float] | None,
                                                     mean: dict[str, float] | None, weight: float) -> None:
    from robinhood_controller.policies.robinhood_shift import rbc_shift, update_mean

    d = rbc_shift(current, mean)
    assert 0.0 <= d <= 1.0
    if current is None:
        assert d == 0.0
    elif mean is None:
        assert d == 1.0
    else:
        assert rbc_shift(current, current) == 0.0
        assert abs(d - rbc_shift(mean, current)) < 1e-12  # symmetric
        if set(k for k, v in current.items() if v).isdisjoint(k for k, v in mean.items() if v):
            assert abs(d - 1.0) < 1e-12
    m = update_mean(mean, current, weight)
    if current is None:
        assert m == mean
    elif mean is None:
        assert m == current
    else:
        assert abs(sum(m.values()) - 1.0) < 1e-9
        # The new mean is no farther from this tick's shares than the old one was.
        assert rbc_shift(current, m) <= d + 1e-12


def test_robinhood_shift_is_robinhood_first_and_on_a_new_blocker_and_slow_on_the_old_one() -> None:
    t = {"a": 40 * MIB, "b": 40 * MIB, "c": 40 * MIB}
    params = RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=16 * MIB)
    pol = build({"name": "robinhood-shift"}, t, 16 * MIB)
    healthy = 15_000  # a tenth of the 150 ms SLO

    def step(cur: dict[str, int], rbc: dict[str, int]) -> Any:
        return pol.plan(PlanInput(targets=cur, used=cur, rbc=rbc, stats={}, p99_latency_us=healthy))

    d = step(t, {"b": 9})  # the first tick: no mean yet, the paper's step
    assert d.targets == plan_robinhood(t, t, {"b": 9}, params).targets
    assert d.note == "robinhood-shift: tax × 1.000 (shift 1.000)"
    cur = d.targets
    for _ in range(50):  # the same blocker, a healthy tail: a tenth of RobinHood's tax
        d = step(cur, {"b": 9})
        assert d.note == "robinhood-shift: tax × 0.100 (shift 0.000)"
        cur = d.targets
    assert cur["a"] > t["a"] - 51 * int(0.01 * t["a"])
    d = step(cur, {"c": 9})  # a new blocker: the paper's step at once
    assert d.note == "robinhood-shift: tax × 1.000 (shift 1.000)"
    assert d.targets == plan_robinhood(cur, cur, {"c": 9}, params).targets
    d = step(d.targets, {"c": 9})  # the mean has moved by the tax's weight only
    assert d.note == "robinhood-shift: tax × 0.990 (shift 0.990)"
    # Nothing blocks: nothing moves, and the mean is kept.
    cur, before = d.targets, pol.mean
    d = step(cur, {})
    assert d.targets == cur and not d.moved and pol.mean == before


# -- robinhood-queue ------------------------------------------------------------------

latencies = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 10**6))


@settings(max_examples=300, deadline=None)
@given(baseline=st.dictionaries(st.sampled_from(NAMES), st.floats(1, 10**6)), p99=latencies,
       weight=st.floats(0, 1), ratio=st.floats(1.01, 100))
def test_queue_baseline_is_a_running_mean(baseline: dict[str, float], p99: dict[str, int], weight: float,
                                          ratio: float) -> None:
    from robinhood_controller.policies.robinhood_queue import queueing, update_baseline

    b = update_baseline(baseline, p99, weight)
    assert set(b) == set(baseline) | {n for n, v in p99.items() if v > 0}
    for n, v in b.items():
        seen = p99.get(n, 0)
        if seen <= 0:
            assert v == baseline[n]  # no latency this tick: kept
        elif n not in baseline:
            assert v == seen  # the first latency sets it
        else:  # between the old baseline and this tick's latency, weight of the way
            lo, hi = sorted((baseline[n], float(seen)))
            assert lo - 1e-6 <= v <= hi + 1e-6
            assert abs(v - (baseline[n] + weight * (seen - baseline[n]))) <= 1e-6 * max(1.0, hi)
    q = queueing(baseline, p99, ratio)
    assert q == {n for n, v in p99.items() if v > 0 and n in baseline and v >= ratio * baseline[n]}


@settings(max_examples=200, deadline=None)
@given(data=inputs())
def test_robinhood_queue_never_shrinks_a_queueing_partition_and_keeps_robinhoods_pool(data: Inputs) -> None:
    targets, floor, stats, rbc, _, _ = data
    params = RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=floor)
    pol = build({"name": "robinhood-queue"}, targets, floor)
    calm = {n: QueryStats(p99_query_latency_us=1000) for n in targets}
    d0 = pol.plan(PlanInput(targets=targets, used=targets, rbc=rbc, stats=calm))
    # The first tick sets the baselines and is RobinHood's step.
    assert d0.targets == plan_robinhood(targets, targets, rbc, params).targets and d0.note == ""
    cur = d0.targets
    d = pol.plan(PlanInput(targets=cur, used=cur, rbc=rbc, stats=stats))
    queued = sorted(n for n, s in stats.items() if s.p99_query_latency_us >= 2000)
    assert d.note == (f"robinhood-queue: untaxed {','.join(queued)}" if queued else "")
    r = plan_robinhood(cur, cur, rbc, params)
    assert sum(d.targets.values()) == sum(cur.values())
    for n in queued:
        assert d.targets[n] >= cur[n]
    if not queued:
        assert d.targets == r.targets
    # The others pay the queueing partitions' share: each no less than its RobinHood tax
    # (the floor caps both) when anything moves; nothing moves when nothing blocks.
    if not r.redistributed:
        assert not d.moved
    if d.moved:
        assert all(cur[n] - d.targets[n] >= r.tax[n] for n in cur if n not in queued and rbc.get(n, 0) == 0)
    else:
        assert d.targets == cur


def test_robinhood_queue_spares_a_backend_that_starts_to_queue_and_not_one_slow_by_nature() -> None:
    t = {"a": 400 * MIB, "b": 400 * MIB, "slow": 400 * MIB}
    params = RobinHoodParams(tax=0.01, unused_gap=0.3, floor_bytes=16 * MIB)
    pol = build({"name": "robinhood-queue"}, t, 16 * MIB)

    def step(cur: dict[str, int], lat: dict[str, int]) -> Any:
        stats = {n: QueryStats(p99_query_latency_us=v) for n, v in lat.items()}
        return pol.plan(PlanInput(targets=cur, used=cur, rbc={"slow": 9}, stats=stats))

    usual = {"a": 2_000, "b": 2_000, "slow": 40_000}  # "slow" blocks the tail by nature
    cur = t
    for _ in range(5):
        d = step(cur, usual)
        assert d.note == "" and d.targets == plan_robinhood(cur, cur, {"slow": 9}, params).targets
        cur = d.targets
    # b's queries start to queue (twice its usual P99): b pays nothing, a pays b's share.
    d = step(cur, {"a": 2_000, "b": 4_000, "slow": 40_000})
    assert d.note == "robinhood-queue: untaxed b"
    assert d.targets["b"] == cur["b"]
    r = plan_robinhood(cur, cur, {"slow": 9}, params)
    assert cur["a"] - d.targets["a"] > r.tax["a"]
    assert d.targets["a"] + d.targets["slow"] == r.targets["a"] + r.targets["slow"] - r.tax["b"]
    # A queue that lasts becomes the baseline (a running mean, weight 1% a tick): with a
    # P99 of 8000 from a baseline of 2020, b is taxed again once the mean passes 4000,
    # 8000 − 5980 · 0.99^k ≥ 4000: after k = ln(4000 / 5980) / ln(0.99) ≈ 40 ticks.
    cur = d.targets
    n = 0
    while step(cur, {"a": 2_000, "b": 8_000, "slow": 40_000}).note:
        n += 1
    assert 38 <= n <= 41
    # Bad parameters are refused, naming them.
    with pytest.raises(policies.PolicyError, match="ratio"):
        build({"name": "robinhood-queue", "ratio": 1.0}, t, 16 * MIB)
    with pytest.raises(policies.PolicyError, match="weight"):
        build({"name": "robinhood-queue", "weight": 0}, t, 16 * MIB)
