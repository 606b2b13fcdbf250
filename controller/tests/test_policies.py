"""The competitor policies (fair++, lama++, cliffhanger++, tao++, oracle) and the
paper's two: the shared vectors (tests/vectors/policies.json) and properties every
policy must have — targets keep their sum, never go below the floor, and the same input
gives the same output."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robinhood_controller import policies
from robinhood_controller.plan import MIB
from robinhood_controller.policies import PlanInput, PolicyContext, QueryStats

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "tests" / "vectors" / "policies.json").read_text())
assert VECTORS["schema"] == "robinhood-policies/v1"


def build(spec: dict[str, Any], targets: dict[str, int], floor: int, budget: int | None = None) -> policies.AllocationPolicy:
    params = {k: v for k, v in spec.items() if k != "name"}
    ctx = PolicyContext(budget_bytes=budget or sum(targets.values()), configured=dict(targets), floor_bytes=floor)
    return policies.build(spec["name"], params, ctx)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_policy_vector(case: dict[str, Any]) -> None:
    targets = case["targets"]
    pol = build(case["policy"], targets, case["floor_bytes"], case.get("budget_bytes"))
    start = pol.initial_targets(targets)
    stats = {n: QueryStats(**s) for n, s in case["stats"].items()}
    d = pol.plan(PlanInput(targets=start, used=start, rbc={}, stats=stats, now=1000.0))
    assert d.targets == case["expect"]
    assert sum(d.targets.values()) == sum(targets.values())


def test_every_registered_policy_is_listed() -> None:
    assert {"robinhood", "static", "tao++", "cliffhanger++", "fair++", "lama++", "oracle"} <= set(policies.names())


NAMES = ["a", "b", "c", "d"]


@st.composite
def inputs(draw: st.DrawFn) -> tuple[dict[str, int], int, dict[str, QueryStats], dict[str, int]]:
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
    return targets, floor, stats, rbc


@pytest.mark.parametrize("spec", [{"name": "robinhood"}, {"name": "static"}, {"name": "fair++"}, {"name": "lama++"},
                                  {"name": "cliffhanger++"}, {"name": "tao++", "learn": 30.0}],
                         ids=lambda s: s["name"])
@settings(max_examples=150, deadline=None)
@given(data=inputs())
def test_properties(spec: dict[str, Any], data: tuple[dict[str, int], int, dict[str, QueryStats], dict[str, int]]) -> None:
    targets, floor, stats, rbc = data
    outs = []
    for _ in range(2):
        pol = build(spec, targets, floor)
        cur = pol.initial_targets(targets)
        for tick in range(4):  # a few ticks: tao++ learns, then holds
            inp = PlanInput(targets=cur, used=cur, rbc=rbc, stats=stats, now=100.0 + 20 * tick)
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
