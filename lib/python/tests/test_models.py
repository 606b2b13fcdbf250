"""The typed models have exactly the schema's fields (so a field added to schema/ and
not to the models, or the reverse, fails here), and read the shipped files."""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from robinhood_common import experiment, topology
from robinhood_common.contract import Contract

REPO = Path(__file__).resolve().parents[3]

PAIRS: list[tuple[type[BaseModel], str]] = [
    (topology.Topology, "topology.schema.yaml"),
    (topology.RBCServer, "topology.schema.yaml#/$defs/rbc_server"),
    (topology.Limits, "topology.schema.yaml#/$defs/limits"),
    (topology.KVOptions, "topology.schema.yaml#/$defs/kv_options"),
    (topology.SQLOptions, "topology.schema.yaml#/$defs/sql_options"),
    (topology.ComputeOptions, "topology.schema.yaml#/$defs/compute_options"),
    (topology.Replica, "topology.schema.yaml#/$defs/replica"),
    (topology.Backend, "topology.schema.yaml#/$defs/backend"),
    (topology.Partition, "topology.schema.yaml#/$defs/partition"),
    (topology.Controller, "topology.schema.yaml#/$defs/controller"),
    (topology.Run, "topology.schema.yaml#/$defs/run"),
    (topology.AppServer, "topology.schema.yaml#/$defs/app_server"),
    (topology.AllocationPolicy, "topology.schema.yaml#/$defs/allocation_policy"),
    (topology.Dispatch, "topology.schema.yaml#/$defs/dispatch"),
    (experiment.ExperimentBackend, "experiment.schema.yaml#/$defs/backend"),
    (experiment.Cache, "experiment.schema.yaml#/$defs/cache"),
    (topology.SLO, "topology.schema.yaml#/$defs/slo"),
    (experiment.Synth, "experiment.schema.yaml#/$defs/synth"),
    (experiment.Trace, "experiment.schema.yaml#/$defs/trace"),
    (experiment.Scenario, "experiment.schema.yaml#/$defs/scenario"),
    (experiment.Compare, "experiment.schema.yaml#/$defs/compare"),
]


@pytest.mark.parametrize("model,target", PAIRS, ids=lambda x: getattr(x, "__name__", x))
def test_model_fields_are_the_schema_properties(model: type[BaseModel], target: str) -> None:
    assert list(model.model_fields) == Contract.packaged().properties(target)


def test_experiment_fields() -> None:
    own = {"base_dir", "document"}
    assert [f for f in experiment.Experiment.model_fields if f not in own] == \
        Contract.packaged().properties("experiment.schema.yaml")


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_examples_read(path: Path) -> None:
    if path.name == "topology.yaml":
        t = topology.load(path)
        _, app = t.app_server("app0")
        assert sum(app.initial_allocation_mb().values()) == app.cache_budget_mb
        assert app.controller.policy.name == "robinhood" and app.controller.policy.params()["tax"] == 0.01
    else:
        e = experiment.load(path)
        assert sum(e.initial_allocation().values()) == e.cache.budget_mb
        for i in range(len(e.cache.app_initial_mb)):
            assert sum(e.initial_allocation(i).values()) == e.cache.budget_mb
        # Every shipped experiment has a capacity scenario but the chaos run's, whose
        # faults come from robinhood-testbed chaos, the replicated one's, whose stalls
        # are in its backends' limits (docs/hedging.md), and the zoo's, whose scenario
        # robinhood-testbed zoo draws per seed (docs/zoo.md).
        assert (e.scenario_data() is not None) == (e.name not in ("chaos", "replicated", "zoo", "zoo-real"))


def test_durations_are_seconds() -> None:
    t = topology.parse("backends: [{id: 0, name: a, type: kv, replicas: [{grpc: ':1'}]}]\n"
                       "rbc_server: {window: 1m30s}\n")
    assert t.rbc_server.window == 90.0


def test_errors_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("backends: []\n")
    with pytest.raises(topology.TopologyError, match=r"^topology .*t.yaml: backends: at least one backend is required$"):
        topology.load(p)


