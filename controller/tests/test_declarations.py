"""Each allocation policy declares its parameters once, on its parameter model; every
reader of a topology checks them through schema/policies.schema.yaml, which make build
generates from those models. These tests hold the two to each other."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from robinhood_common.contract import Contract, read_yaml
from robinhood_controller import policies
from robinhood_controller.policies import registry

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((REPO / "tests" / "config" / "topology" / "invalid").glob("policy_*.yaml"))


def contract_cases() -> dict:
    return Contract.packaged().docs["policies.schema.yaml"]["$defs"]["allocation"]["properties"]


def test_the_contract_holds_every_declaration() -> None:
    """Same policies, same parameters, same bounds and defaults (else: make build)."""
    cases = contract_cases()
    assert list(cases) == [d["name"] for d in policies.describe()], "stale: run make build"
    for d in policies.describe():
        props = cases[d["name"]]["properties"]
        assert list(props) == [p["name"] for p in d["params"]], f"{d['name']}: stale: run make build"
        for p in d["params"]:
            s = props[p["name"]]
            assert s.get("x-default") == p["default"], (d["name"], p["name"])
            for key in ("minimum", "maximum"):
                if key in p:
                    word = f"exclusive{key.capitalize()}" if p.get(f"exclusive_{key}") else key
                    assert s[word] == p[key], (d["name"], p["name"], key)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_the_controller_refuses_what_the_contract_refuses(path: Path) -> None:
    """The shared invalid cases both contract readers refuse: the controller's own check
    (the parameter model) refuses them too, naming the same field."""
    text = path.read_text()
    want = text.splitlines()[0].removeprefix("# expect: ")
    block = read_yaml(text)["app_servers"][0]["controller"]["policy"]
    name = block.pop("name")
    if not name:
        pytest.skip("an empty name is the contract's alone")
    with pytest.raises(policies.PolicyError) as e:
        registry.validate_params(name, block)
    field = str(e.value).split(":")[0]
    assert f"policy.{field}" in want, (str(e.value), want)


def test_every_declared_bound_is_enforced_by_the_model() -> None:
    """Just past each declared bound, and NaN, the model refuses the value."""
    tried = 0
    for d in policies.describe():
        for p in d["params"]:
            if p["type"] not in ("number", "integer"):
                continue
            bad = [math.nan] if p["type"] == "number" else []
            step = 1 if p["type"] == "integer" else 1e-9
            if "minimum" in p:
                bad.append(p["minimum"] if p.get("exclusive_minimum") else p["minimum"] - step)
            if "maximum" in p:
                bad.append(p["maximum"] if p.get("exclusive_maximum") else p["maximum"] + step)
            for v in bad:
                with pytest.raises(policies.PolicyError, match=f"^{p['name']}: "):
                    registry.validate_params(d["name"], {p["name"]: v})
                tried += 1
    assert tried >= 20
