"""robinhood_common.ports: listening ports below the kernel's ephemeral range."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from robinhood_common import ports


@pytest.mark.parametrize("text, want", [
    ("32768\t60999\n", (12768, 32768)),
    ("40000 60999", (20000, 40000)),
    ("15000 60999", (10000, 15000)),
    ("10500 60999", (0, 0)),  # no room for 1000 ports above the floor
    ("1024 65535", (0, 0)),
    ("", (0, 0)),
    ("x y", (0, 0)),
])
def test_listen_range_is_below_the_ephemeral_range(tmp_path: Path, text: str, want: tuple[int, int]) -> None:
    f = tmp_path / "ip_local_port_range"
    f.write_text(text)
    assert ports.listen_range(f) == want


def test_listen_range_without_the_file(tmp_path: Path) -> None:
    assert ports.listen_range(tmp_path / "missing") == (0, 0)


def test_free_port_avoids_the_ephemeral_range_and_repeats() -> None:
    low, high = ports.listen_range()
    seen: set[int] = set()
    for _ in range(50):
        port = ports.free_port()
        assert port not in seen
        seen.add(port)
        if high:
            assert low <= port < high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # still free


def test_free_port_walks_on_past_a_port_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = ports.listen_range()
    if not high:
        pytest.skip("no room below the ephemeral range on this machine")
    busy_port = ports.free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", busy_port))
        busy.listen()
        # The walk is at the busy port, which this process has not handed out.
        monkeypatch.setattr(ports, "_given", set())
        monkeypatch.setattr(ports, "_next", busy_port - low)
        port = ports.free_port()
        assert 0 < (port - busy_port) % (high - low) < 100  # walked on past it (wrapping at the top)


def test_each_process_walks_from_its_own_start(monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = ports.listen_range()
    if not high:
        pytest.skip("no room below the ephemeral range on this machine")
    monkeypatch.setattr(ports, "_given", set())
    monkeypatch.setattr(ports, "_next", None)
    first = ports.free_port()
    second = ports.free_port()
    assert low <= first < high and low <= second < high
    assert (second - first) % (high - low) >= 1  # one after the other, skipping only busy ports
    assert (second - first) % (high - low) < 100
