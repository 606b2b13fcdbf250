"""The Python topology reader accepts exactly the dispatch policies lib/dispatch registers
(schema/policies.schema.yaml, which `make build` generates from `bin/appserver
--list-dispatch-policies --json`) and refuses another naming the known ones, as the app
server does."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from robinhood_common import topology
from robinhood_common.contract import ConfigError
from robinhood_common.contract import Contract

REPO = Path(__file__).resolve().parents[3]
NAMES = tuple(Contract.packaged().docs["policies.schema.yaml"]["$defs"]["dispatch"]["properties"])

TOPOLOGY = """
backends: [{id: 0, name: kv, type: kv, replicas: [{grpc: "127.0.0.1:1"}, {grpc: "127.0.0.1:2"}]}]
app_servers:
  - {id: app0, http: "127.0.0.1:3", cache_mode: none}
  - {id: app1, http: "127.0.0.1:4", cache_mode: none, dispatch: {policy: POLICY}}
"""


def test_the_names_are_the_registry() -> None:
    exe = REPO / "bin" / "appserver"
    if not exe.exists():
        pytest.skip("bin/appserver is not built (make build)")
    out = subprocess.run([str(exe), "--list-dispatch-policies"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert tuple(line.split()[0] for line in out.splitlines()) == NAMES, "stale: run make build"


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_policy_is_accepted(name: str) -> None:
    t = topology.parse(TOPOLOGY.replace("POLICY", name))
    assert t.app_servers[1].dispatch.policy == name
    assert t.app_servers[0].dispatch.policy == "random"


def test_an_unknown_policy_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        topology.parse(TOPOLOGY.replace("POLICY", "psychic"))
    assert str(e.value) == f'app_servers[1].dispatch.policy: "psychic" is not one of {", ".join(NAMES)}'
