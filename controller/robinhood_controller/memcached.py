"""The memcached partition driver: one pymemcache Client per partition (docs/algorithms.md, "Applying a plan").

It only speaks the commands verified against memcached 1.6.18: `stats`, `stats slabs`,
`stats settings`, `cache_memlimit <MB>`, `slabs reassign <class|-1> 0` and
`slabs automove 0`. Which pages to move and when is decided by resize.py.
"""
from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheError, MemcacheUnexpectedCloseError

from .partition import AttachInfo, MemlimitError, PartitionStats, ProtocolError, Reassign, Unreachable, Unsupported


T = TypeVar("T")


def _int(v: object) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, bytes):
        return int(v.split(b".")[0])
    return int(str(v).split(".")[0])


def _text(v: object) -> str:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, bool):  # pymemcache reads memcached's "1"/"0" settings as booleans
        return "1" if v else "0"
    return str(v)


class MemcachedPartition:
    """A managed memcached instance (the Partition protocol of partition.py); every
    method raises a PartitionError subclass on failure and leaves the client ready to
    reconnect on the next call."""

    store = "memcached"
    evicts_itself = False
    limit_slack = 0

    def __init__(self, name: str, addr: str, timeout: float = 1.0) -> None:
        host, _, port = addr.rpartition(":")
        self.name = name
        self.addr = addr
        self.timeout = timeout
        self._client = Client(
            (host.strip("[]") or "127.0.0.1", int(port)),
            connect_timeout=timeout,
            timeout=timeout,
            no_delay=True,
        )

    def close(self) -> None:
        """Close the connection (the next call reconnects)."""
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a dead socket may fail; nothing to do
            pass

    def _call(self, what: str, fn: Callable[..., T], *args: object) -> T:
        try:
            return fn(*args)
        except (OSError, socket.timeout, MemcacheUnexpectedCloseError) as e:
            self.close()
            if isinstance(e, (socket.timeout, TimeoutError)) and (junk := self._not_memcached()) is not None:
                raise ProtocolError(f"partition {self.name} ({self.addr}): {what}: the peer answers bytes that are "
                                    f"not memcached's protocol ({junk!r} to `version`): is it a memcached?") from None
            why = str(e) or ("connection closed by the server" if isinstance(e, MemcacheUnexpectedCloseError)
                             else type(e).__name__)
            raise Unreachable(f"partition {self.name} ({self.addr}): {what}: {why}") from None
        except MemcacheError as e:
            self.close()
            raise ProtocolError(f"partition {self.name} ({self.addr}): {what}: {e}") from None

    def _not_memcached(self) -> bytes | None:
        """After a timeout: the first bytes a fresh connection's `version` gets back when
        they are not memcached's answer (a peer speaking something else, or garbage);
        None when it answers `VERSION …` or nothing (a slow or hung memcached)."""
        host, _, port = self.addr.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=self.timeout) as s:
                s.settimeout(self.timeout)
                s.sendall(b"version\r\n")
                got = s.recv(64)
        except (OSError, ValueError):
            return None
        return got[:32] if got and not got.startswith(b"VERSION ") else None

    def _raw(self, cmd: str) -> str:
        return _text(self._call(cmd, self._client.raw_command, cmd))

    def settings(self) -> dict[str, str]:
        """`stats settings` as text values."""
        raw = self._call("stats settings", self._client.stats, "settings")
        return {_text(k): _text(v) for k, v in raw.items()}

    def read(self) -> PartitionStats:
        """Read limit, bytes, total_malloced, pages per class and counters."""
        st = self._call("stats", self._client.stats)
        slabs = self._call("stats slabs", self._client.stats, "slabs")
        try:
            pages: dict[int, int] = {}
            for k, v in slabs.items():
                key = _text(k)
                if key.endswith(":total_pages"):
                    pages[int(key.split(":", 1)[0])] = _int(v)
            return PartitionStats(
                limit_bytes=_int(st[b"limit_maxbytes"]),
                item_bytes=_int(st[b"bytes"]),
                malloced_bytes=_int(slabs[b"total_malloced"]),
                items=_int(st[b"curr_items"]),
                evictions=_int(st[b"evictions"]),
                get_hits=_int(st[b"get_hits"]),
                get_misses=_int(st[b"get_misses"]),
                pid=_int(st[b"pid"]),
                uptime=_int(st[b"uptime"]),
                reassign_running=bool(_int(st.get(b"slab_reassign_running", 0))),
                pages=pages,
            )
        except (KeyError, ValueError) as e:
            raise ProtocolError(f"partition {self.name} ({self.addr}): unexpected stats: missing or bad {e}") from None

    def malloced(self) -> tuple[int, bool, dict[int, int]]:
        """(total_malloced, a page move is running, pages per class) — the cheap
        reading the shrink loop polls."""
        slabs = self._call("stats slabs", self._client.stats, "slabs")
        st = self._call("stats", self._client.stats)
        pages = {int(_text(k).split(":", 1)[0]): _int(v) for k, v in slabs.items() if _text(k).endswith(":total_pages")}
        return _int(slabs[b"total_malloced"]), bool(_int(st.get(b"slab_reassign_running", 0))), pages

    def attach(self, read_only: bool = False) -> AttachInfo:
        """Check the instance can be managed and take over page moving from it.

        Refuses (Unsupported) an instance with slab reassignment disabled or one that
        preallocated its memory (-L), which cannot change its limit. Unless read_only,
        probes cache_memlimit with the current limit (no change) and sends
        `slabs automove 0` so memcached's own page mover does not fight the controller.
        """
        s = self.settings()
        if s.get("slab_reassign", "yes") not in ("yes", "1", "True"):
            raise Unsupported(
                f"partition {self.name} ({self.addr}): slab reassignment is disabled "
                "(started with -o no_slab_reassign); it cannot be shrunk. Restart it without that option."
            )
        if "maxbytes" not in s:
            raise Unsupported(f"partition {self.name} ({self.addr}): `stats settings` has no maxbytes; "
                              "not a memcached ≥ 1.5 that supports cache_memlimit")
        version = _text(self._call("version", self._client.version))
        st = self._call("stats", self._client.stats)
        checked = False
        if not read_only:
            limit = _int(st[b"limit_maxbytes"])
            # Probe with the current limit (a no-op) when it is a whole MB memcached accepts.
            if limit % (1 << 20) == 0 and limit >> 20 >= 8:
                ans = self._raw(f"cache_memlimit {limit >> 20}")
                if ans.startswith("MEMLIMIT_ADJUST_FAILED"):
                    raise Unsupported(
                        f"partition {self.name} ({self.addr}): cache_memlimit is refused ({ans!r}); the instance "
                        "preallocated its memory (-L). Restart it without -L to let the controller resize it."
                    )
                if ans != "OK":
                    raise ProtocolError(f"partition {self.name} ({self.addr}): cache_memlimit probe answered {ans!r}")
                checked = True
            ans = self._raw("slabs automove 0")
            if ans != "OK":
                raise ProtocolError(f"partition {self.name} ({self.addr}): `slabs automove 0` answered {ans!r}")
        return AttachInfo(version=version, pid=_int(st[b"pid"]), took_over=f"slab_automove={s.get('slab_automove', '?')}",
                          checked_memlimit=checked)

    def release(self, took_over: str) -> str | None:
        """`slabs automove N` with the value attach found (nothing when it was off)."""
        key, _, was = took_over.partition("=")
        if key != "slab_automove" or not was.isdigit() or was == "0":
            return None
        ans = self._raw(f"slabs automove {was}")
        if ans != "OK":
            raise ProtocolError(f"partition {self.name} ({self.addr}): `slabs automove {was}` answered {ans!r}")
        return took_over

    def automove_off(self) -> bool:
        """Turn memcached's own page mover off again if someone turned it on (`slabs
        automove 1` from any client); True when it was on."""
        if self.settings().get("slab_automove", "0").lower() in ("0", "false", "no"):
            return False
        ans = self._raw("slabs automove 0")
        if ans != "OK":
            raise ProtocolError(f"partition {self.name} ({self.addr}): `slabs automove 0` answered {ans!r}")
        return True

    def repair(self) -> tuple[str, str] | None:
        """automove_off, as the Partition protocol's repair."""
        if self.automove_off():
            return "automove_on", "memcached's slab automove was on; turned it off again"
        return None

    def set_limit(self, mb: int) -> None:
        """cache_memlimit mb. MemlimitError when memcached refuses it."""
        ans = self._raw(f"cache_memlimit {int(mb)}")
        if ans == "OK":
            return
        if ans.startswith("MEMLIMIT"):
            raise MemlimitError(f"partition {self.name} ({self.addr}): cache_memlimit {mb} refused: {ans}")
        raise ProtocolError(f"partition {self.name} ({self.addr}): cache_memlimit {mb} answered {ans!r}")

    def reassign(self, src_class: int) -> Reassign:
        """`slabs reassign <src_class> 0`: move one page of src_class (-1: any class) to
        the global pool, from where memcached frees it when above its limit."""
        ans = self._raw(f"slabs reassign {src_class} 0")
        word = ans.split(" ", 1)[0]
        try:
            return Reassign(word)
        except ValueError:
            raise ProtocolError(f"partition {self.name} ({self.addr}): slabs reassign answered {ans!r}") from None
