"""The controller's configuration: its app server's block of the topology, the flag
overrides, and the policy's parameters. (The topology's own rules are tested, for both
readers, by lib/python/tests and lib/config on the shared cases in tests/config.)"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from robinhood_common.contract import read_yaml
from robinhood_controller.policies import registry
from robinhood_controller import policies
from robinhood_controller.config import ConfigError, ControllerConfig, Overrides, load, resolve_document
from robinhood_controller.plan import MIB

REPO = Path(__file__).resolve().parents[2]

BASE = """
rbc_server: {grpc: 127.0.0.1:7070, window: 3s}
backends:
  - {id: 0, name: a, type: kv, replicas: [{grpc: 127.0.0.1:7100}]}
  - {id: 1, name: b, type: sql, replicas: [{grpc: 127.0.0.1:7101}]}
  - {id: 7, name: c, type: compute, replicas: [{grpc: 127.0.0.1:7102}]}
app_servers:
  - id: app0
    http: 127.0.0.1:8080
    cache_mode: partitioned
    cache_budget_mb: 100
    partitions:
      a: 127.0.0.1:11211
      b: {addr: 127.0.0.1:11212, initial_mb: 40}
      c: 127.0.0.1:11213
    controller: {min_partition_mb: 16}
  - id: shared0
    http: 127.0.0.1:8081
    cache_mode: shared
    cache_budget_mb: 64
    shared_cache: 127.0.0.1:11300
  - id: none0
    http: 127.0.0.1:8082
    cache_mode: none
"""


BASE_RH = BASE.replace("controller: {min_partition_mb: 16}", "controller: {min_partition_mb: 16, policy: robinhood}")


def resolve(text: str, app: str = "app0", **kw: Any) -> ControllerConfig:
    ov = Overrides(settings=kw.pop("settings", {}), **kw)
    return resolve_document(read_yaml(text), app, ov)


def test_example_topology_loads() -> None:
    cfg = load(REPO / "examples" / "topology.yaml", "app0")
    assert [p.name for p in cfg.partitions] == ["catalog", "ratings", "recommender"]
    assert cfg.initial_mb() == {"catalog": 64, "ratings": 64, "recommender": 64}
    assert cfg.settings.min_partition_mb == 16 and cfg.settings.interval == 5.0
    assert cfg.backend_names() == {0: "catalog", 1: "ratings", 2: "recommender"}
    assert cfg.policy == "robinhood" and cfg.policy_params.model_dump() == {"tax": 0.01, "unused_gap": 0.3}


def test_even_share_with_largest_remainder() -> None:
    # 100 − 40 = 60 MB for a and c: 30 each.
    assert resolve(BASE).initial_mb() == {"a": 30, "b": 40, "c": 30}
    cfg = resolve(BASE.replace("cache_budget_mb: 100", "cache_budget_mb: 101"))
    assert cfg.initial_mb() == {"a": 31, "b": 40, "c": 30}
    assert sum(cfg.initial_mb().values()) == cfg.budget_mb


def test_defaults_come_from_the_schema_and_the_policy() -> None:
    cfg = resolve(BASE)
    s = cfg.settings
    assert (s.interval, s.dry_run, s.used_source, s.metrics, s.rbc_timeout) == (5.0, False, "malloced", None, 1.0)
    assert cfg.rbc_window == 3.0 and cfg.shrink_budget == 2.5
    # A topology that names no policy runs the recommended one, with its defaults.
    assert cfg.policy == registry.recommended() == "relief"
    assert cfg.policy_params.model_dump() == {"alarm": 0.3, "memory": 30, "donor_step": 0.25}
    assert resolve(BASE.replace("controller: {min_partition_mb: 16}", "controller: {}").replace(
        "cache_budget_mb: 100", "cache_budget_mb: 200").replace("initial_mb: 40", "initial_mb: 60")
    ).settings.min_partition_mb == 48


def test_overrides() -> None:
    cfg = resolve(BASE_RH, settings={"interval": "250ms", "dry_run": True, "metrics": "127.0.0.1:0"},
                  policy_params={"tax": 0.02})
    assert (cfg.settings.interval, cfg.settings.dry_run, cfg.settings.metrics) == (0.25, True, "127.0.0.1:0")
    assert cfg.shrink_budget == 0.125 and cfg.policy_params.model_dump()["tax"] == 0.02
    cfg = resolve(BASE.replace("{min_partition_mb: 16}", "{min_partition_mb: 16, metrics: 127.0.0.1:9}"),
                  settings={"metrics": ""})
    assert cfg.settings.metrics is None
    # --policy replaces the policy with its own defaults.
    cfg = resolve(BASE.replace("{min_partition_mb: 16}", "{min_partition_mb: 16, policy: {name: robinhood, tax: 0.1}}"),
                  policy="static")
    assert cfg.policy == "static" and cfg.policy_params.model_dump() == {}


@pytest.mark.parametrize(
    "block, message",
    [
        ("{min_partition_mb: 16, intervall: 5s}", "app_servers[0].controller.intervall: unknown field"),
        ("{min_partition_mb: 16, tax: 0.1}", "app_servers[0].controller.tax: unknown field"),
        ("{min_partition_mb: 16, policy: {name: robinhood, tax: 0.7}}",
         "app_servers[0].controller.policy.tax: 0.7 is out of range [0, 0.5]"),
        ("{min_partition_mb: 16, policy: {name: robinhood, taxes: 0.1}}",
         "app_servers[0].controller.policy.taxes: unknown field (known: tax, unused_gap)"),
        ("{min_partition_mb: 16, policy: {name: static, tax: 0.1}}",
         "app_servers[0].controller.policy.tax: unknown field (known: none)"),
        ("{min_partition_mb: 16, policy: lru}",
         'app_servers[0].controller.policy.name: "lru" is not one of ' + ", ".join(policies.names())),
        ("{min_partition_mb: 16, interval: 5}", "app_servers[0].controller.interval: 5 is not a duration"),
        ("{min_partition_mb: 4}", "app_servers[0].controller.min_partition_mb: 4 is below memcached's minimum"),
        ("{min_partition_mb: 16, metrics: localhost}",
         'app_servers[0].controller.metrics: "localhost" is not a host:port address'),
        ("{min_partition_mb: 16, interval: 1s, shrink_budget: 2s}",
         "app_servers[0].controller.shrink_budget: must be positive and at most the interval (1s)"),
        ("{min_partition_mb: 40}",
         "app_servers[0].cache_budget_mb: 100 is too small for 3 partitions of min_partition_mb 40"),
    ],
)
def test_bad_controller_block_names_field_and_value(block: str, message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        resolve(BASE.replace("controller: {min_partition_mb: 16}", f"controller: {block}"))
    assert str(ei.value).startswith(message), str(ei.value)


def test_override_error_says_which_flag() -> None:
    with pytest.raises(ConfigError, match=r"policy.tax \(from --policy-param\): 0.9 is out of range \[0, 0.5\]"):
        resolve(BASE_RH, policy_params={"tax": 0.9})
    with pytest.raises(ConfigError, match=r"policy.tax \(from --policy-param\): unknown field \(known: alarm, donor_step, memory\)"):
        resolve(BASE, policy_params={"tax": 0.01})
    with pytest.raises(ConfigError, match=r"controller.interval \(from --interval\): \"soon\" is not a duration"):
        resolve(BASE, settings={"interval": "soon"})
    with pytest.raises(ConfigError, match=r"policy.name \(from --policy\): \"lru\" is not one of"):
        resolve(BASE, policy="lru")


def test_rbc_server_is_required_by_rbc_policies_only() -> None:
    no_rbc = BASE.replace("rbc_server: {grpc: 127.0.0.1:7070, window: 3s}", "rbc_server: {}")
    with pytest.raises(ConfigError, match="rbc_server.grpc: an address is required by the relief policy"):
        resolve(no_rbc)
    with pytest.raises(ConfigError, match="rbc_server.grpc: an address is required by the robinhood policy"):
        resolve(no_rbc, policy="robinhood")
    assert resolve(no_rbc, policy="static").rbc_addr == ""


def test_unknown_app_server_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"--id: 'x' is not in app_servers \(known: app0, shared0, none0\)"):
        resolve(BASE, "x")


def test_shared_and_none_modes_have_no_partitions() -> None:
    shared = resolve(BASE, "shared0")
    assert shared.cache_mode == "shared" and shared.partitions == () and shared.shared_cache == "127.0.0.1:11300"
    assert resolve(BASE, "none0").partitions == ()


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="topology: cannot read"):
        load(tmp_path / "missing.yaml", "app0")
    p = tmp_path / "t.yaml"
    p.write_text("")
    with pytest.raises(ConfigError, match=r"t.yaml: \(document\): empty topology"):
        load(p, "app0")


def test_policies_get_the_slo_from_the_topology() -> None:
    # No objective in the topology: none in the policy's context (no default of its own).
    assert resolve(BASE).context().slo is None
    ctx = resolve(BASE + "slo: {latency: 80ms, warmup: 1m}\n").context()
    assert ctx.slo is not None and (ctx.slo.latency, ctx.slo.warmup) == (0.08, 60.0)
    assert ctx.slo.step == 5.0  # the rest: the schema's defaults


def test_budget_bytes() -> None:
    assert resolve(BASE).budget_bytes == 100 * MIB


def test_redis_password_file_is_relative_to_the_topology_and_read_once(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "a").write_text("pa ss\r\nsecond line\n")
    (tmp_path / "secrets" / "empty").write_text("\n")
    text = BASE.replace("a: 127.0.0.1:11211", "a: {redis: 127.0.0.1:6379, password_file: secrets/a, user: ctl}")
    p = tmp_path / "t.yaml"
    p.write_text(text)
    cfg = load(p, "app0")
    a = cfg.partitions[0]
    assert (a.name, a.store, a.user, a.password) == ("a", "redis", "ctl", "pa ss")
    assert "pa ss" not in repr(a)
    assert cfg.partitions[1].password is None and cfg.partitions[1].user is None
    p.write_text(text.replace("secrets/a", "secrets/empty"))
    with pytest.raises(ConfigError, match=r"app_servers\[0\]\.partitions\.a\.password_file: .*secrets/empty: the first line is empty"):
        load(p, "app0")
    p.write_text(text.replace("secrets/a", "secrets/missing"))
    with pytest.raises(ConfigError, match=r"app_servers\[0\]\.partitions\.a\.password_file: .*secrets/missing: No such file"):
        load(p, "app0")
