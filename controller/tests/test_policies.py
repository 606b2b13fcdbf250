"""The allocation policies: the shared vectors (tests/vectors/policies.json) and the
properties every registered policy must have (targets keep their sum, never go below the
floor, and the same input gives the same output), then tests of particular policies
(tao++; relief has its own file). Which policies exist is the registry's answer,
never a list written here."""
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
from robinhood_controller.rbc import RBCSnapshot
from robinhood_common.topology import SLO

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "tests" / "vectors" / "policies.json").read_text())
assert VECTORS["schema"] == "robinhood-policies/v1"


def build(spec: dict[str, Any], targets: dict[str, int], floor: int, budget: int | None = None,
          configured: dict[str, int] | None = None) -> policies.AllocationPolicy:
    params = {k: v for k, v in spec.items() if k != "name"}
    ctx = PolicyContext(budget_bytes=budget or sum(targets.values()),
                        configured=dict(configured if configured is not None else targets), floor_bytes=floor,
                        slo=SLO(latency=0.15, step=2.0, window=10.0, warmup=30.0))
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


def test_vectors_name_registered_policies() -> None:
    # A vector of a policy that left the registry fails here, not silently.
    assert {c["policy"]["name"] for c in VECTORS["cases"]} <= set(policies.names())


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
                         queries=draw(st.integers(0, 20_000)), p99_query_latency_us=draw(st.integers(0, 10**6)),
                         p50_backend_latency_us=draw(st.integers(0, 10**5)),
                         p90_backend_latency_us=draw(st.integers(0, 10**6)))
        for name in names if draw(st.booleans())
    }
    rbc = {name: draw(st.integers(0, 100)) for name in names}
    shift = draw(st.integers(0, n - 1))
    configured = {name: targets[names[(i + shift) % n]] for i, name in enumerate(names)}
    p99s = draw(st.lists(st.one_of(st.none(), st.integers(0, 300_000)), min_size=4, max_size=4))
    return targets, floor, stats, rbc, configured, p99s


@pytest.mark.parametrize("name", [n for n in policies.names() if not policies.get(n).needs_run])
@settings(max_examples=150, deadline=None)
@given(data=inputs())
def test_properties(name: str, data: Inputs) -> None:
    """Every registered policy with its default parameters (a policy that needs the
    testbed's run description, the oracle, is tested with one in its own tests)."""
    targets, floor, stats, rbc, configured, p99s = data
    outs = []
    for _ in range(2):
        pol = build({"name": name}, targets, floor, configured=configured)
        cur = pol.initial_targets(targets)
        for tick in range(4):  # a few ticks: policies with state change it
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

