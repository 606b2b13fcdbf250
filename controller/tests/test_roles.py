"""Roles in the allocation-policy registry (docs/algorithms.md, "Which policy to run"):
one recommended policy, the default wherever none is named; the paper's algorithm under
its name; bounds for experiments only; at most one candidate on trial."""
from __future__ import annotations

import io
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from robinhood_controller import cli, policies
from robinhood_controller.plan import MIB
from robinhood_controller.policies import registry
from robinhood_controller.policies.base import AllocationPolicy, Decision, PlanInput, PolicyContext

REPO = Path(__file__).resolve().parents[2]


def test_every_policy_declares_a_known_role() -> None:
    for n in policies.names():
        assert policies.get(n).role in registry.ROLES, n


def test_one_recommended_policy_that_runs_anywhere() -> None:
    rec = registry.with_role("recommended")
    assert rec == [registry.recommended()]
    cls = policies.get(rec[0])
    assert not cls.needs_run  # it runs in a deployment, not only in experiments
    # ... and with a topology that has no slo block.
    policies.build(rec[0], {}, PolicyContext(budget_bytes=64 * MIB, configured={"a": 32 * MIB, "b": 32 * MIB},
                                             floor_bytes=16 * MIB, slo=None))


def test_the_paper_is_robinhood_and_bounds_are_for_experiments() -> None:
    assert registry.with_role("paper") == ["robinhood"]
    assert set(registry.with_role("bound")) == {n for n in policies.names() if policies.get(n).needs_run}
    assert len(registry.with_role("candidate")) <= 1


def test_the_topology_default_is_the_recommended_policy() -> None:
    schema = yaml.safe_load((REPO / "schema" / "topology.schema.yaml").read_text())
    assert schema["$defs"]["allocation_policy"]["properties"]["name"]["default"] == registry.recommended()


def test_a_comparison_runs_the_recommended_the_paper_and_static_by_default() -> None:
    assert registry.default_arms() == [registry.recommended(), "robinhood", "static"]
    order = registry.ordered()
    assert order[0] == registry.recommended() and order.index("robinhood") < order.index("static")
    assert all(policies.get(n).role == "bound" for n in order[-len(registry.with_role("bound")):])


def test_policies_lists_them_by_role_and_marks_the_default() -> None:
    out = io.StringIO()
    assert cli.cmd_policies(False, out) == 0
    lines = out.getvalue().splitlines()
    heads = [ln for ln in lines if ln.startswith("# ")]
    assert [h.split(":")[0][2:] for h in heads] == [r for r in registry.ROLES if registry.with_role(r)]
    assert lines[0].startswith("# recommended:") and lines[1].startswith(f"{registry.recommended()} (default) ")
    assert sum("(default)" in ln for ln in lines) == 1


def test_register_refuses_an_unknown_role_and_a_bound_that_reads_no_run() -> None:
    class Odd(AllocationPolicy):
        name = "odd-role"
        summary = "x"
        role: ClassVar[str] = "favourite"

        def plan(self, inp: PlanInput) -> Decision:
            return Decision(dict(inp.targets), False)

    with pytest.raises(TypeError, match="role 'favourite' is not one of recommended, paper"):
        registry.register(Odd)

    class Blind(Odd):
        name = "blind-bound"
        role = "bound"

    with pytest.raises(TypeError, match="a bound reads the run"):
        registry.register(Blind)
    assert "odd-role" not in policies.names() and "blind-bound" not in policies.names()
