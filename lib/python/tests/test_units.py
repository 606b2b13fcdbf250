"""robinhood_common.units against the shared vectors (tests/vectors/units.json, written
from Go's time package and lib/config) and properties of its own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robinhood_common import units
from robinhood_common.split import fill_rest, largest_remainder, split_even, split_weighted

VECTORS = json.loads((Path(__file__).resolve().parents[3] / "tests" / "vectors" / "units.json").read_text())


@pytest.mark.parametrize("case", VECTORS["parse_duration"], ids=lambda c: repr(c["text"]))
def test_parse_duration_like_go(case: dict) -> None:
    if case["valid"]:
        assert units.parse_duration_ns(case["text"]) == case["ns"]
    else:
        with pytest.raises(ValueError, match="is not a duration|out of range"):
            units.parse_duration_ns(case["text"])


@pytest.mark.parametrize("case", VECTORS["format_duration"], ids=lambda c: str(c["ns"]))
def test_format_duration_like_go(case: dict) -> None:
    assert units.format_duration_ns(case["ns"]) == case["text"]


@pytest.mark.parametrize("case", VECTORS["format_number"], ids=lambda c: repr(c["value"]))
def test_format_number_like_go(case: dict) -> None:
    assert units.format_number(float(case["value"])) == case["text"]


@pytest.mark.parametrize("case", VECTORS["quote"], ids=lambda c: repr(c["value"]))
def test_quote_like_go(case: dict) -> None:
    assert units.format_value(case["value"]) == case["text"]


@given(st.integers(min_value=-(1 << 62), max_value=(1 << 62)))
def test_duration_round_trip(ns: int) -> None:
    assert units.parse_duration_ns(units.format_duration_ns(ns)) == ns


@pytest.mark.parametrize("text,want", [
    ("0", 0), ("512", 512), ("1KiB", 1024), ("64MiB", 64 << 20), ("1.5GiB", 3 << 29), ("2 MB", 2_000_000),
    ("1kB", 1000), ("10B", 10), (4096, 4096),
])
def test_parse_bytes(text: str | int, want: int) -> None:
    assert units.parse_bytes(text) == want


@pytest.mark.parametrize("text", ["", "MiB", "1.5", "-1MiB", "1 PiB", "lots", True, -3])
def test_parse_bytes_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        units.parse_bytes(text)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=1 << 45))
def test_format_bytes_is_close(n: int) -> None:
    back = units.parse_bytes(units.format_bytes(n))
    assert abs(back - n) <= max(1, n // 15)


@given(st.integers(min_value=0, max_value=10**12), st.sets(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=12))
def test_split_even_sums_and_is_even(total: int, names: set[str]) -> None:
    out = split_even(total, names)
    assert sum(out.values()) == total
    assert max(out.values()) - min(out.values()) <= 1
    # The extra units go to the names that sort first.
    ordered = sorted(names)
    assert [out[n] for n in ordered] == sorted(out.values(), reverse=True)


@given(st.integers(min_value=0, max_value=10**9),
       st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.integers(0, 1000), min_size=1, max_size=10))
def test_split_weighted_sums_and_is_proportional(total: int, weights: dict[str, int]) -> None:
    out = split_weighted(total, weights)
    assert sum(out.values()) == total
    wsum = sum(weights.values())
    if wsum:
        for n, w in weights.items():
            assert abs(out[n] - total * w / wsum) < 1 + 1e-9


def test_largest_remainder_ties_by_name() -> None:
    assert largest_remainder({"b": (1, 5), "a": (1, 5), "c": (1, 9)}, 2) == {"a": 2, "b": 1, "c": 2}


def test_fill_rest() -> None:
    assert fill_rest({"b": 50}, ["a", "b", "c"], 101) == {"a": 26, "b": 50, "c": 25}
    assert fill_rest({"a": 10, "b": 20}, ["a", "b"], 100) == {"a": 10, "b": 20}


@pytest.mark.parametrize("case", VECTORS["parse_bytes"], ids=lambda c: repr(c["text"]))
def test_parse_bytes_vectors(case: dict) -> None:
    if case["valid"]:
        assert units.parse_bytes(case["text"]) == case["bytes"]
    else:
        with pytest.raises(ValueError):
            units.parse_bytes(case["text"])


@pytest.mark.parametrize("case", VECTORS["format_bytes"], ids=lambda c: str(c["bytes"]))
def test_format_bytes_vectors(case: dict) -> None:
    assert units.format_bytes(case["bytes"]) == case["text"]


SPLIT = json.loads((Path(__file__).resolve().parents[3] / "tests" / "vectors" / "split.json").read_text())


@pytest.mark.parametrize("case", SPLIT["cases"], ids=lambda c: str(c["total"]))
def test_fill_rest_vectors(case: dict) -> None:
    assert fill_rest(case["fixed"], case["names"], case["total"]) == case["allocation"]
