"""The topology loader (same rules as topology/topology.go) and the controller block."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robinhood_controller.config import DEFAULT_MIN_PARTITION_MB, ConfigError, parse_settings, resolve
from robinhood_controller.durations import parse_duration
from robinhood_controller.plan import MIB
from robinhood_controller.topology import TopologyError, load, parse

REPO = Path(__file__).resolve().parents[2]
INVALID = sorted((REPO / "tests" / "topology" / "invalid").glob("*.yaml"))

BASE = """
rbc_server: {grpc: 127.0.0.1:7070}
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


def test_example_topology_loads() -> None:
    top = load(REPO / "examples" / "topology.yaml")
    cfg = resolve(top, "app0")
    assert [p.name for p in cfg.partitions] == ["catalog", "ratings", "recommender"]
    assert cfg.initial_mb() == {"catalog": 64, "ratings": 64, "recommender": 64}
    assert cfg.settings.min_partition_mb == 16 and cfg.settings.interval == 5.0
    assert cfg.backend_names() == {0: "catalog", 1: "ratings", 2: "recommender"}


@pytest.mark.parametrize("path", INVALID, ids=[p.name for p in INVALID])
def test_shared_invalid_examples_are_rejected(path: Path) -> None:
    text = path.read_text()
    want = [ln.removeprefix("# expect-py: ") for ln in text.splitlines() if ln.startswith("# expect-py: ")]
    with pytest.raises(TopologyError) as ei:
        parse(text)
    for w in want:
        assert w in str(ei.value)


def test_even_share_with_largest_remainder() -> None:
    cfg = resolve(parse(BASE), "app0")
    # 100 − 40 = 60 MB for a and c: 30 each.
    assert cfg.initial_mb() == {"a": 30, "b": 40, "c": 30}
    cfg = resolve(parse(BASE.replace("cache_budget_mb: 100", "cache_budget_mb: 101")), "app0")
    assert cfg.initial_mb() == {"a": 31, "b": 40, "c": 30}
    assert sum(cfg.initial_mb().values()) == cfg.budget_mb


def test_defaults_and_overrides() -> None:
    cfg = resolve(parse(BASE), "app0", {"tax": 0.02, "interval": "250ms", "dry_run": True, "policy": None})
    s = cfg.settings
    assert (s.tax, s.interval, s.dry_run, s.policy) == (0.02, 0.25, True, "robinhood")
    assert s.unused_gap == 0.30 and s.used_source == "malloced" and s.metrics == ""
    assert s.effective_rbc_window == 0.25 and s.effective_shrink_budget == 0.125
    assert parse_settings({}).min_partition_mb == DEFAULT_MIN_PARTITION_MB


@pytest.mark.parametrize(
    "block, message",
    [
        ("{min_partition_mb: 16, intervall: 5s}", "controller.intervall: unknown field"),
        ("{min_partition_mb: 16, tax: 0.7}", "controller.tax: 0.7 must be between 0 and 0.5"),
        ("{min_partition_mb: 16, tax: '0.1'}", "controller.tax: '0.1'"),
        ("{min_partition_mb: 16, interval: 5}", "controller.interval: 5 is not a duration"),
        ("{min_partition_mb: 16, interval: 5 seconds}", "controller.interval: '5 seconds' is not a duration"),
        ("{min_partition_mb: 4}", "controller.min_partition_mb: 4 is below memcached's minimum"),
        ("{min_partition_mb: 16, policy: lru}", "controller.policy: 'lru' is not one of robinhood | static"),
        ("{min_partition_mb: 16, metrics: localhost}", "controller.metrics: 'localhost' is not a host:port"),
        ("{min_partition_mb: 16, used_source: rss}", "controller.used_source: 'rss'"),
        ("{min_partition_mb: 16, interval: 1s, shrink_budget: 2s}", "controller.shrink_budget: 2.0 must be positive"),
        ("{min_partition_mb: 16, dry_run: maybe}", "controller.dry_run: 'maybe'"),
        ("{min_partition_mb: 40}", "cache_budget_mb: 100 is too small for 3 partitions of min_partition_mb 40"),
        ("{min_partition_mb: 41, interval: 5s}", "cache_budget_mb: 100 is too small"),
    ],
)
def test_bad_controller_block_names_field_and_value(block: str, message: str) -> None:
    top = parse(BASE.replace("controller: {min_partition_mb: 16}", f"controller: {block}"))
    with pytest.raises(ConfigError) as ei:
        resolve(top, "app0")
    assert message in str(ei.value)
    assert "app_servers[0]" in str(ei.value)


def test_override_error_says_which_flag() -> None:
    with pytest.raises(ConfigError, match=r"controller.tax: 0.9 must be between 0 and 0.5 \(from --tax\)"):
        resolve(parse(BASE), "app0", {"tax": 0.9})
    with pytest.raises(ConfigError, match=r"controller.interval \(from --interval\): 'soon' is not a duration"):
        resolve(parse(BASE), "app0", {"interval": "soon"})


def test_controller_rules_on_the_partitions() -> None:
    # initial_mb below the floor.
    top = parse(BASE.replace("initial_mb: 40", "initial_mb: 10"))
    with pytest.raises(ConfigError, match=r"partitions.b.initial_mb: 10 is below controller.min_partition_mb 16"):
        resolve(top, "app0")
    # Explicit initial_mb everywhere that does not fill the budget.
    doc = BASE.replace("a: 127.0.0.1:11211", "a: {addr: 127.0.0.1:11211, initial_mb: 20}").replace(
        "c: 127.0.0.1:11213", "c: {addr: 127.0.0.1:11213, initial_mb: 20}")
    with pytest.raises(ConfigError, match="initial_mb values sum to 80, not cache_budget_mb 100"):
        resolve(parse(doc), "app0")
    # The even share of what initial_mb leaves is below the floor.
    with pytest.raises(ConfigError, match=r"partitions.a: its even share .* is 12 MB"):
        resolve(parse(BASE.replace("initial_mb: 40", "initial_mb: 76")), "app0")
    # robinhood needs the RBC server.
    with pytest.raises(ConfigError, match="rbc_server.grpc: address is required by the robinhood policy"):
        resolve(parse(BASE.replace("rbc_server: {grpc: 127.0.0.1:7070}", "rbc_server: {}")), "app0")
    cfg = resolve(parse(BASE.replace("rbc_server: {grpc: 127.0.0.1:7070}", "rbc_server: {}")), "app0",
                  {"policy": "static"})
    assert cfg.rbc_addr == ""


def test_unknown_app_server_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r'--app-server: "x" is not in app_servers \(known: "app0", "shared0", "none0"\)'):
        resolve(parse(BASE), "x")


def test_shared_and_none_modes_have_no_partitions() -> None:
    top = parse(BASE)
    shared = resolve(top, "shared0")
    assert shared.cache_mode == "shared" and shared.partitions == () and shared.shared_cache == "127.0.0.1:11300"
    assert resolve(top, "none0").partitions == ()


def test_topology_messages() -> None:
    with pytest.raises(TopologyError, match="empty document"):
        parse("")
    with pytest.raises(TopologyError, match="not valid YAML"):
        parse("backends: [")
    with pytest.raises(TopologyError, match=r"backends\[0\].replicas\[0\].grpc: address is required"):
        parse(BASE.replace("replicas: [{grpc: 127.0.0.1:7100}]", "replicas: [{http: 127.0.0.1:1}]"))
    with pytest.raises(TopologyError, match=r"partitions.a.initial_mb: 4 is below memcached's minimum of 8 MB"):
        parse(BASE.replace("a: 127.0.0.1:11211", "a: {addr: 127.0.0.1:11211, initial_mb: 4}"))
    with pytest.raises(TopologyError, match=r"partitions.a.port: unknown field"):
        parse(BASE.replace("a: 127.0.0.1:11211", "a: {addr: 127.0.0.1:11211, port: 1}"))
    with pytest.raises(TopologyError, match=r"app_servers\[0\].request_timeout: '2 s' is not a duration"):
        parse(BASE.replace("cache_mode: partitioned", "cache_mode: partitioned\n    request_timeout: 2 s"))
    with pytest.raises(TopologyError, match=r'partitions.zz: no backend is named "zz"'):
        parse(BASE.replace("c: 127.0.0.1:11213", "c: 127.0.0.1:11213\n      zz: 127.0.0.1:1"))


@pytest.mark.parametrize("text, seconds", [
    ("5s", 5.0), ("250ms", 0.25), ("1m30s", 90.0), ("1.5h", 5400.0), ("0", 0.0), ("100us", 1e-4),
    ("2µs", 2e-6), ("-1s", -1.0), (".5s", 0.5),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "s", "5 s", "5x", "1.2.3s", "5s5"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@given(st.integers(0, 10**6), st.sampled_from(["ms", "s", "m"]))
def test_parse_duration_integers(n: int, unit: str) -> None:
    scale = {"ms": 1e-3, "s": 1.0, "m": 60.0}[unit]
    assert parse_duration(f"{n}{unit}") == pytest.approx(n * scale)


def test_budget_bytes() -> None:
    assert resolve(parse(BASE), "app0").budget_bytes == 100 * MIB
