from __future__ import annotations

from pymemcache.client.base import Client


def test_memcached_fixture(procs) -> None:
    _, addr = procs.memcached(16)
    host, port = addr.rsplit(":", 1)
    c = Client((host, int(port)))
    c.set("k", b"v")
    assert c.get("k") == b"v"
    assert int(c.stats(b"settings")[b"maxbytes"]) == 16 << 20
