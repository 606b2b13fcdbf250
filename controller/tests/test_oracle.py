"""The oracle policies read the run's schedule file (``tracegen oracle``'s JSON, named in
controller.run.oracle): which schedule each applies, how it follows it in time, and what
it says of a file it cannot use."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from robinhood_common.topology import Run

from robinhood_controller import policies
from robinhood_controller.plan import MIB
from robinhood_controller.policies import PlanInput, PolicyContext
from robinhood_controller.policies.base import PolicyError

SCHEDULES = {"app_server_schedules": {"app0": {
    "foresight": {"steps": [{"at_s": 0, "mb": {"a": 64, "b": 64}}, {"at_s": 25, "mb": {"a": 96, "b": 32}}],
                  "predicted_violation_pct": 1.0},
    "reactive": {"steps": [{"at_s": 0, "mb": {"a": 64, "b": 64}}, {"at_s": 30, "mb": {"a": 112, "b": 16}}],
                 "predicted_violation_pct": 9.0},
}}}


def schedule_file(tmp: Path, doc: object = SCHEDULES) -> Path:
    p = tmp / "oracle.json"
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def build(name: str, path: Path | None, app: str = "app0", **params: object) -> policies.AllocationPolicy:
    run = Run(seconds=60, oracle=str(path) if path else None)
    ctx = PolicyContext(budget_bytes=128 * MIB, configured={"a": 64 * MIB, "b": 64 * MIB}, floor_bytes=8 * MIB,
                        app_server=app, run=run)
    return policies.build(name, dict(params), ctx)


def targets_at(pol: policies.AllocationPolicy, *times: float) -> list[dict[str, int]]:
    cur = {"a": 64 * MIB, "b": 64 * MIB}
    return [{n: v // MIB for n, v in pol.plan(PlanInput(targets=cur, used=cur, rbc={}, stats={}, now=t)).targets.items()}
            for t in times]


def test_the_oracle_applies_the_schedule_with_foresight(tmp_path: Path) -> None:
    pol = build("oracle", schedule_file(tmp_path))
    # The run starts at the first tick (no start file): 1000 s.
    assert targets_at(pol, 1000.0, 1024.0, 1025.0, 1059.0) == [
        {"a": 64, "b": 64}, {"a": 64, "b": 64}, {"a": 96, "b": 32}, {"a": 96, "b": 32}]


def test_the_reactive_oracle_applies_the_reactive_schedule(tmp_path: Path) -> None:
    path = schedule_file(tmp_path)
    assert targets_at(build("oracle-reactive", path), 1000.0, 1029.0, 1030.0) == [
        {"a": 64, "b": 64}, {"a": 64, "b": 64}, {"a": 112, "b": 16}]
    # one name for the reactive schedule: the oracle takes no lookahead
    with pytest.raises(PolicyError, match="lookahead: unknown parameter of policy oracle"):
        build("oracle", path, lookahead=False)


def test_a_schedule_it_cannot_use_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="controller.run.oracle"):
        build("oracle", None)
    with pytest.raises(PolicyError, match="cannot read"):
        build("oracle", tmp_path / "missing.json")
    with pytest.raises(PolicyError, match="cannot read"):
        build("oracle", schedule_file(tmp_path, "{not json"))
    with pytest.raises(PolicyError, match="has no schedule for app server app9"):
        build("oracle", schedule_file(tmp_path), app="app9")
    only_foresight = {"app_server_schedules": {"app0": {"foresight": SCHEDULES["app_server_schedules"]["app0"]["foresight"]}}}
    with pytest.raises(PolicyError, match="has no reactive schedule for app server app0"):
        build("oracle-reactive", schedule_file(tmp_path, only_foresight))
    skipped = {"class": "infeasible", "app_server_schedules": {"app0": {}},
               "schedules_skipped": "the run is infeasible and --feasible-only was given: no schedule"}
    with pytest.raises(PolicyError, match="no schedule for app server app0: the run is infeasible"):
        build("oracle", schedule_file(tmp_path, skipped))
    bad = {"app_server_schedules": {"app0": {"foresight": {"steps": [{"at_s": 5, "mb": {"a": 1}}, {"at_s": 2, "mb": {}}]}}}}
    with pytest.raises(PolicyError, match="not in time order"):
        build("oracle", schedule_file(tmp_path, bad))
    with pytest.raises(PolicyError):
        build("oracle", schedule_file(tmp_path), lookahead="sometimes")


def one_step(mb: object, at: object = 0) -> str:
    return '{"app_server_schedules": {"app0": {"foresight": {"steps": [{"at_s": %s, "mb": %s}]}}}}' % (at, mb)


@pytest.mark.parametrize("text, fault", [
    (one_step('{"a": 100, "b": 100}'), "steps[0].mb: the sizes sum to 200 MB, not the cache budget (128 MB)"),
    (one_step('{"a": 60, "b": 60}'), "the sizes sum to 120 MB, not the cache budget (128 MB)"),
    (one_step('{"a": 136, "b": -8}'), "steps[0].mb.b: -8 MB is below controller.min_partition_mb (8 MB)"),
    (one_step('{"a": 124, "b": 4}'), "steps[0].mb.b: 4 MB is below controller.min_partition_mb (8 MB)"),
    (one_step('{"a": 64, "b": 32, "zz": 32}'), "steps[0].mb: 'zz' is not a partition of app server app0 (it has a, b)"),
    (one_step('{"a": 128}'), "steps[0].mb: no size for partition 'b'"),
    (one_step('{"a": 127, "b": true}'), "steps[0].mb.b: true is not an integer"),
    (one_step('{"a": 64.5, "b": 63.5}'), "steps[0].mb.a: 64.5 is not an integer"),
    (one_step('{"a": [64], "b": 64}'), "steps[0].mb.a: a list is not an integer"),
    (one_step('[64, 64]'), "app_server_schedules.app0.foresight.steps[0].mb: a list is not a mapping"),
    (one_step('{"a": 64, "b": 64}', at="Infinity"), "not JSON: Infinity is not a JSON number"),
    (one_step('{"a": 64, "b": 64}', at="NaN"), "not JSON: NaN is not a JSON number"),
    (one_step('{"a": 64, "b": 64}', at="1e999"), "not JSON: 1e999 is not a JSON number"),
    (one_step('{"a": 64, "b": 64}', at="-1"), "steps[0].at_s: -1.0 is below the minimum of 0"),
    ("[" * 1_000_000, "not JSON: nested too deep"),
])
def test_a_schedule_the_policy_cannot_apply_is_refused_at_start(tmp_path: Path, text: str, fault: str) -> None:
    """Each of these was accepted at start and then never applied (or ended in a traceback)."""
    with pytest.raises(PolicyError) as e:
        build("oracle", schedule_file(tmp_path, text))
    assert fault in str(e.value) and str(tmp_path) in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_schedule_that_is_no_regular_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "sparse.json"
    with open(big, "wb") as f:
        f.truncate(2 << 30)
    for path, fault in ((fifo, "a named pipe (FIFO), not a regular file"), (Path("/dev/zero"), "a character device"),
                        (big, "2147483648 bytes, more than the 4194304 read here")):
        with pytest.raises(PolicyError, match=re.escape(f"cannot read the schedule {path}: {fault}")):
            build("oracle", path)
