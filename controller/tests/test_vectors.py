"""Runs the shared plan vectors in tests/vectors/ (schema in tests/vectors/README.md)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from robinhood_controller.plan import MIB, adopt, round_limits
from robinhood_controller.policies.robinhood import RobinHoodParams, plan_robinhood

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"


def _cases(name: str, schema: str) -> list[dict[str, Any]]:
    doc = json.loads((VECTORS / name).read_text())
    assert doc["schema"] == schema
    return doc["cases"]


PLAN_CASES = _cases("plan.json", "robinhood-plan/v1")
ADOPT_CASES = _cases("adopt.json", "robinhood-adopt/v1")


def test_vectors_cover_the_required_cases() -> None:
    names = {c["name"] for c in PLAN_CASES}
    assert {"all_zero_rbc", "exclusion_by_unused_space", "exclusion_boundary", "floor_caps_the_tax",
            "proportional_with_leftover_byte", "flow_with_64mb_partitions"} <= names


@pytest.mark.parametrize("case", PLAN_CASES, ids=[c["name"] for c in PLAN_CASES])
def test_plan_vector(case: dict[str, Any]) -> None:
    p = case["params"]
    params = RobinHoodParams(tax=p["tax"], unused_gap=p["unused_gap"], floor_bytes=p["min_partition_mb"] * MIB)
    alloc = dict(case["allocations_bytes"])
    assert sum(alloc.values()) == p["budget_mb"] * MIB
    for i, step in enumerate(case["steps"]):
        used = dict(alloc) if step["used_bytes"] == "full" else step["used_bytes"]
        r = plan_robinhood(alloc, used, step["rbc"], params)
        exp = step["expect"]
        where = f"step {i}"
        if "tax_bytes" in exp:
            assert r.tax == exp["tax_bytes"], where
        if "pool_bytes" in exp:
            assert r.pool == exp["pool_bytes"], where
        if "eligible" in exp:
            assert r.eligible == exp["eligible"], where
        if "redistributed" in exp:
            assert r.redistributed == exp["redistributed"], where
        assert r.targets == exp["targets_bytes"], where
        limits = round_limits(r.targets, p["budget_mb"])
        assert limits == exp["limits_mb"], where
        assert sum(limits.values()) == p["budget_mb"]
        alloc = r.targets


@pytest.mark.parametrize("case", ADOPT_CASES, ids=[c["name"] for c in ADOPT_CASES])
def test_adopt_vector(case: dict[str, Any]) -> None:
    got = adopt(case["limits_mb"], case["budget_mb"], case["min_partition_mb"], configured=case.get("configured_bytes"))
    assert got == case["expect_targets_bytes"]
