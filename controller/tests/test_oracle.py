"""The oracle policy against a stand-in for bin/tracegen: what it asks `tracegen
scenario check` (with --lookahead unless told not to) and how it applies the phases'
allocations."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from robinhood_common.topology import Run

from robinhood_controller import policies
from robinhood_controller.plan import MIB
from robinhood_controller.policies import PlanInput, PolicyContext
from robinhood_controller.policies.base import PolicyError

PHASES = {"phases": [
    {"start_s": 0, "end_s": 30, "oracle_mb": {"a": 64, "b": 64}},
    {"start_s": 30, "end_s": 60, "oracle_mb": {"a": 96, "b": 32}},
]}


def fake_tracegen(tmp: Path, code: int = 0) -> tuple[Path, Path]:
    """An executable that records its arguments and prints PHASES (or fails)."""
    args = tmp / "args.json"
    exe = tmp / "tracegen"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\n"
                   f"open({str(args)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                   f"print('note: a line before the document')\n"
                   f"print({json.dumps(json.dumps(PHASES))})\n"
                   f"sys.stderr.write('boom')\nsys.exit({code})\n")
    exe.chmod(0o755)
    return exe, args


def oracle(tmp: Path, exe: Path, **params: object) -> policies.AllocationPolicy:
    run = Run(seconds=60, trace=str(tmp / "trace.jsonl"), scenario=str(tmp / "scenario.yaml"),
              topology=str(tmp / "topology.yaml"))
    ctx = PolicyContext(budget_bytes=128 * MIB, configured={"a": 64 * MIB, "b": 64 * MIB}, floor_bytes=8 * MIB,
                        app_server="app0", run=run)
    return policies.build("oracle", {"tracegen": str(exe), **params}, ctx)


def test_oracle_looks_ahead_by_default(tmp_path: Path) -> None:
    exe, args = fake_tracegen(tmp_path)
    oracle(tmp_path, exe)
    got = json.loads(args.read_text())
    assert got[:3] == ["scenario", "check", str(tmp_path / "scenario.yaml")]
    assert "--lookahead" in got and "--json" in got
    assert got[got.index("--app-server") + 1] == "app0" and got[got.index("--duration") + 1] == "60s"


def test_oracle_without_lookahead(tmp_path: Path) -> None:
    exe, args = fake_tracegen(tmp_path)
    oracle(tmp_path, exe, lookahead=False)
    assert "--lookahead" not in json.loads(args.read_text())


def test_oracle_applies_the_phase_it_is_in(tmp_path: Path) -> None:
    exe, _ = fake_tracegen(tmp_path)
    pol = oracle(tmp_path, exe)
    cur = {"a": 64 * MIB, "b": 64 * MIB}
    d = pol.plan(PlanInput(targets=cur, used=cur, rbc={}, stats={}, now=1000.0))  # the run starts here
    assert d.targets == cur and not d.moved
    d = pol.plan(PlanInput(targets=cur, used=cur, rbc={}, stats={}, now=1031.0))
    assert d.targets == {"a": 96 * MIB, "b": 32 * MIB} and d.moved


def test_oracle_fails_at_start_when_tracegen_does(tmp_path: Path) -> None:
    exe, _ = fake_tracegen(tmp_path, code=1)
    with pytest.raises(PolicyError, match="boom"):
        oracle(tmp_path, exe)


def test_oracle_lookahead_must_be_a_bool(tmp_path: Path) -> None:
    exe, _ = fake_tracegen(tmp_path)
    with pytest.raises(PolicyError):
        oracle(tmp_path, exe, lookahead="sometimes")
