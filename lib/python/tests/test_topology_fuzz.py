"""The Python topology reader on arbitrary documents: it accepts one or raises a
ConfigError naming what is wrong — never another exception (the Go reader has the same
test as a fuzz target, lib/config/fuzz_test.go). `make fuzz` runs more examples
(ROBINHOOD_FUZZ=1)."""
from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robinhood_common.contract import ConfigError
from robinhood_common.topology import from_document

EXAMPLES = 5000 if os.environ.get("ROBINHOOD_FUZZ") else 150

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["127.0.0.1:1", "kv", "sql", "partitioned", "shared",
                                                           "5s", "app0", "a", "[::1]:80", "host:99999"]))
keys = st.sampled_from(["backends", "app_servers", "rbc_server", "id", "name", "type", "replicas", "grpc", "http",
                        "cache_mode", "cache_budget_mb", "partitions", "addr", "initial_mb", "controller",
                        "limits", "workers", "rate", "window", "shared_cache", "nope"])
docs = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(keys, inner, max_size=6)), max_leaves=30)

BASE: dict[str, Any] = {"backends": [{"id": 0, "name": "a", "type": "kv", "replicas": [{"grpc": "127.0.0.1:1"}]}]}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs)
def test_any_document_is_read_or_refused_with_a_config_error(doc: Any) -> None:
    try:
        from_document(doc)
    except ConfigError as e:
        assert str(e)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, docs, max_size=4))
def test_a_valid_topology_with_anything_added_is_read_or_refused(extra: dict[str, Any]) -> None:
    try:
        from_document({**BASE, **extra})
    except ConfigError as e:
        assert str(e)
