"""The oracle's schedule file is read against schema/oracle.schema.yaml: a malformed one is
refused naming the file and the field (tracegen's tests check that what it writes passes)."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from robinhood_common import schedule

STEPS = [{"at_s": 0, "mb": {"a": 20, "b": 20}}, {"at_s": 30, "mb": {"a": 30, "b": 10}}]
DOC: dict[str, Any] = {
    "app_server_schedules": {"app0": {"foresight": {"steps": STEPS, "predicted_violation_pct": 1.5},
                                      "reactive": {"steps": STEPS[:1]}}},
    "app_server_candidates": {"app0": [{"name": "model-pick", "steps": copy.deepcopy(STEPS),
                                        "predicted_violation_pct": 1.5}]},
    "judged": {"chosen": "model-pick", "candidates": {"model-pick": {"violation_pct": 2.0, "p99_ms": None}},
               "dispatch": {"policy": "random"}, "how": "simulated"},
    "class": "margin", "variants": ["foresight", "reactive"], "app_servers": 1, "worst_utilization": None,
}


def write(tmp: Path, doc: Any) -> Path:
    p = tmp / "oracle.json"
    p.write_text(json.dumps(doc))
    return p


def test_a_schedule_file_reads_as_written(tmp_path: Path) -> None:
    assert schedule.read(write(tmp_path, DOC)) == DOC
    part = schedule.app_server(DOC, "app0", "f")
    assert part["foresight"]["steps"][1] == {"at_s": 30.0, "mb": {"a": 30, "b": 10}}


@pytest.mark.parametrize("change, field, fault", [
    (lambda d: d["app_server_schedules"]["app0"]["foresight"]["steps"][1].update(at_s="30s"),
     "app_server_schedules.app0.foresight.steps[1].at_s", '"30s" is not a number'),
    (lambda d: d["app_server_schedules"]["app0"]["reactive"].update(steps=[]),
     "app_server_schedules.app0.reactive.steps", "needs at least 1 item"),
    (lambda d: d["app_server_candidates"]["app0"][0]["steps"][0]["mb"].update(a=20.5),
     "app_server_candidates.app0[0].steps[0].mb.a", "20.5 is not an integer"),
    (lambda d: d["judged"].pop("chosen"), "judged.chosen", "is required"),
    (lambda d: d.update(klass="margin"), "klass", "unknown field (known: app_server_schedules, "),
    (lambda d: d.update({"class": "easy"}), "class", '"easy" is not one of margin, tight, infeasible'),
    (lambda d: d.pop("app_server_schedules"), "app_server_schedules", "is required"),
])
def test_a_malformed_schedule_file_is_refused_naming_the_file_and_field(
        tmp_path: Path, change: Any, field: str, fault: str) -> None:
    doc = copy.deepcopy(DOC)
    change(doc)
    path = write(tmp_path, doc)
    with pytest.raises(schedule.ScheduleError) as e:
        schedule.read(path)
    assert str(e.value).startswith(f"the schedule {path} is not tracegen oracle's: {field}: {fault}"), str(e.value)


def test_a_file_checked_once_is_checked_again_when_it_changes(tmp_path: Path) -> None:
    path = write(tmp_path, DOC)
    schedule.read(path)
    bad = copy.deepcopy(DOC)
    bad["class"] = "easy"
    tmp = tmp_path / "next.json"
    tmp.write_text(json.dumps(bad))
    tmp.replace(path)  # as the judge rewrites it
    with pytest.raises(schedule.ScheduleError, match="class"):
        schedule.read(path)


def test_an_app_servers_part_is_checked_alone(tmp_path: Path) -> None:
    doc = copy.deepcopy(DOC)
    doc["phases"] = "not checked here"
    assert schedule.app_server(doc, "app0", "f")["reactive"]["steps"] == [{"at_s": 0.0, "mb": {"a": 20, "b": 20}}]
    doc["app_server_schedules"]["app0"]["later"] = {}
    with pytest.raises(schedule.ScheduleError, match=r"app_server_schedules\.app0\.later: unknown field"):
        schedule.app_server(doc, "app0", "f")
    with pytest.raises(schedule.ScheduleError, match="f has no schedule for app server app1"):
        schedule.app_server(doc, "app1", "f")
