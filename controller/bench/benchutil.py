"""Helpers shared by the controller benchmark scripts in this folder."""
from __future__ import annotations

import socket
import time

from robinhood_common import ports


def free_port() -> int:
    """A loopback port that was free a moment ago (robinhood_common.ports)."""
    return ports.free_port()


def wait_port(port: int, timeout: float = 10) -> None:
    """Wait until something listens on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on port {port}")
