"""Loopback ports for servers we start ourselves (tests, the local testbed).

A port handed out by ``bind(("127.0.0.1", 0))`` comes from the kernel's
ephemeral range, the same range it draws the local ports of *outgoing*
connections from. Between "this port was free" and "the server binds it",
any connection a running process opens (an app server to memcached, a
controller to the RBC server) may take it, and the server then fails with
"Address already in use". So we pick listening ports below the ephemeral
range, where the kernel never hands out a port on its own, and check each one
by binding it. Each process walks the range from a random start, one port after the
other, so two processes picking ports at the same time (the Go test packages run in
parallel) only meet if their walks overlap. The Go tests do the same
(lib/testutil.FreeAddr).
"""
from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOW_FLOOR = 10000  # stay clear of well-known and registered service ports
_WIDTH = 20000
_lock = threading.Lock()
_given: set[int] = set()
_rng = random.Random()
_next: int | None = None  # this process's next candidate, an offset into the range


def listen_range(range_file: Path = _RANGE_FILE) -> tuple[int, int]:
    """The ports [low, high) we pick from: below the kernel's ephemeral range.

    Returns (0, 0) when the ephemeral range leaves no room below it (its low
    end is at or under ``_LOW_FLOOR`` + 1000) or cannot be read; callers then
    fall back to asking the kernel for a port."""
    try:
        low = int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return (0, 0)
    start = max(_LOW_FLOOR, low - _WIDTH)
    if low - start < 1000:
        return (0, 0)
    return (start, low)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port() -> int:
    """A loopback port that was free a moment ago, outside the ephemeral range
    where possible, and never the same twice in this process."""
    global _next
    low, high = listen_range()
    with _lock:
        for _ in range(200):
            if high:
                if _next is None:
                    _next = _rng.randrange(high - low)
                port = low + _next % (high - low)
                _next += 1
            else:
                port = _kernel_port()
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    raise RuntimeError("no free loopback port found in 200 tries")


def free_addr() -> str:
    """``127.0.0.1:PORT`` with a port from :func:`free_port`."""
    return f"127.0.0.1:{free_port()}"
