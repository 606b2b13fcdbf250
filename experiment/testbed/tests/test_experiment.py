from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from robinhood_testbed.deploy import build_topology
from robinhood_testbed.experiment import ExperimentError, format_duration, load, parse_duration
from robinhood_testbed.procs import PortAllocator
from robinhood_testbed.run import check_scenario

REPO = Path(__file__).resolve().parents[3]

BASE = {
    "name": "t",
    "duration": "60s",
    "backends": [{"name": "a", "type": "kv"}, {"name": "b", "type": "sql", "replicas": 2,
                                                "limits": {"workers": 4, "rate": 300}}],
    "cache": {"budget_mb": 40},
    "trace": {"synth": {"rate": 100}},
    "slo": {"latency": "150ms", "step": "5s", "window": "20s", "warmup": "10s"},
}


def write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_durations() -> None:
    assert parse_duration("150ms") == pytest.approx(0.15)
    assert parse_duration("2m") == 120
    assert parse_duration(3) == 3
    assert format_duration(0.15) == "150ms"
    assert format_duration(60) == "60s"
    for bad in ("5 parsecs", "-1s", True, -2):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_valid_experiment_and_allocation(tmp_path: Path) -> None:
    exp = load(write(tmp_path, BASE))
    assert exp.duration == 60 and exp.slo.latency == pytest.approx(0.15)
    assert exp.initial_allocation() == {"a": 20, "b": 20}
    data = {**BASE, "cache": {"budget_mb": 41, "initial_mb": {"b": 10}}}
    assert load(write(tmp_path, data)).initial_allocation() == {"a": 31, "b": 10}


@pytest.mark.parametrize("patch, message", [
    ({"duration": "soon"}, "duration: 'soon' is not a duration"),
    ({"backends": [{"name": "a", "type": "mysql"}]}, "backends.0.type"),
    ({"backends": [{"name": "a", "type": "kv"}, {"name": "a", "type": "kv"}]}, "name 'a' is used twice"),
    ({"cache": {"budget_mb": 12}}, "cannot hold the initial allocation"),
    ({"cache": {"budget_mb": 40, "initial_mb": {"zz": 10}}}, "'zz' is not a backend"),
    ({"trace": {}}, "exactly one of trace.synth and trace.file"),
    ({"colour": "red"}, "colour: unknown field"),
    ({"slo": {"warmup": "90s"}}, "slo.warmup"),
    ({"scenario": "missing.yaml"}, "scenario: cannot read"),
])
def test_invalid_experiments(tmp_path: Path, patch: dict, message: str) -> None:
    with pytest.raises(ExperimentError, match=None) as ei:
        load(write(tmp_path, {**BASE, **patch}))
    assert message in str(ei.value)


def test_topology_per_policy(tmp_path: Path) -> None:
    exp = load(write(tmp_path, BASE))
    topo, ep = build_topology(exp, "robinhood", PortAllocator())
    app = topo["app_servers"][0]
    assert app["cache_mode"] == "partitioned"
    assert {n: p["initial_mb"] for n, p in app["partitions"].items()} == {"a": 20, "b": 20}
    assert app["controller"]["policy"] == "robinhood"
    assert len(topo["backends"][1]["replicas"]) == 2
    addrs = [ep.rbc_grpc, ep.rbc_http, *ep.app_http.values(), *ep.caches["app0"].values(),
             *[a for reps in ep.backends.values() for r in reps for a in r]]
    assert len(addrs) == len(set(addrs)), "every address is distinct"
    topo, ep = build_topology(exp, "shared", PortAllocator())
    app = topo["app_servers"][0]
    assert app["cache_mode"] == "shared" and app["shared_cache"] and "controller" not in app
    assert not ep.controller_metrics


EXPERIMENTS = [p for p in sorted((REPO / "examples").glob("*.yaml"))
               if {"backends", "trace"} <= set(yaml.safe_load(p.read_text()))]


def test_an_experiment_per_scenario_kind() -> None:
    names = {p.stem for p in EXPERIMENTS}
    assert {"demo", "spikes", "quick-ramp", "slow-ramp", "random-walk"} <= names


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_shipped_experiments_are_valid(path: Path, tmp_path: Path, gobin) -> None:
    gobin("tracegen")
    exp = load(path)
    topo, _ = build_topology(exp, "robinhood", PortAllocator())
    topo_path = tmp_path / "topology.yaml"
    topo_path.write_text(yaml.safe_dump(topo))
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(exp.scenario_data()))
    check_scenario(scenario, topo_path, exp.duration)  # raises ExperimentError naming the problem
