"""Helpers that put real data into real memcached instances for the tests."""
from __future__ import annotations

from pymemcache.client.base import Client


def client(addr: str) -> Client:
    host, _, port = addr.rpartition(":")
    return Client((host, int(port)), connect_timeout=2, timeout=5, no_delay=True)


def fill(addr: str, mb: float, sizes: tuple[int, ...] = (900, 1800, 3000), prefix: str = "k") -> int:
    """Store about mb MB of values (cycling through sizes) and return the key count.
    Writing more than the limit makes memcached evict: the cache ends up full."""
    c = client(addr)
    try:
        target = int(mb * (1 << 20))
        blobs = [bytes([65 + i]) * s for i, s in enumerate(sizes)]
        written, i = 0, 0
        while written < target:
            batch = {}
            for _ in range(200):
                v = blobs[i % len(blobs)]
                batch[f"{prefix}{i}"] = v
                written += len(v)
                i += 1
            c.set_many(batch, noreply=True)
        c.get(f"{prefix}0")  # round trip: every noreply set before it is processed
        return i
    finally:
        c.close()


def stats(addr: str, *args: str) -> dict[str, object]:
    """`stats [args]` with text keys."""
    c = client(addr)
    try:
        return {k.decode(): v for k, v in c.stats(*args).items()}
    finally:
        c.close()


def limit_mb(addr: str) -> int:
    return int(stats(addr)["limit_maxbytes"]) >> 20  # type: ignore[call-overload]


def malloced(addr: str) -> int:
    return int(stats(addr, "slabs")["total_malloced"])  # type: ignore[call-overload]
