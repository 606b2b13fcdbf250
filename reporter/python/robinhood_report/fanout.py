"""Timing a request's fan-out: its latency is the request's duration, its blocking
backend named by the project's one rule (``blocking``, docs/algorithms.md "The blocking
backend"; the Go twin is ``lib/fanout.Blocking``, and both pass
``tests/vectors/blocking.json``)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One backend's batch (or one query) of a request."""

    backend: int
    """The backend's id; the smaller id wins a tie."""
    end: float | None
    """When it ended or failed, on any clock; ``None``: it had not ended when the request
    did (abandoned, or its end is unknown), so it ended after every call that did."""
    failed: bool = False
    """It did not get its values."""
    empty: bool = False
    """It had no queries: it cannot block."""


def blocking(calls: Iterable[Call]) -> tuple[int | None, bool]:
    """The request's blocking backend and whether the request failed.

    1. a call without queries never blocks;
    2. when any call failed, the request failed and only failed calls can block: the
       request counts against the backend that failed it;
    3. the blocker is the candidate that ended last, a call with no end counting as
       later than every call that ended;
    4. ties go to the smallest backend id (the answer does not depend on the order).

    ``(None, False)`` when no call has queries: such a request is not reported."""
    best: Call | None = None
    failed = False
    for c in calls:
        if c.empty:
            continue
        if c.failed and not failed:
            failed, best = True, None
        if failed and not c.failed:
            continue
        if best is None or _later(c, best):
            best = c
    return (None if best is None else best.backend), failed


def _later(a: Call, b: Call) -> bool:
    if (a.end is None) != (b.end is None):
        return a.end is None
    if a.end is not None and b.end is not None and a.end != b.end:
        return a.end > b.end
    return a.backend < b.backend


class _Recorder(Protocol):
    def record(self, latency_us: int, backend: int | str) -> bool: ...


class RequestTimer:
    """Times one request. ``query(backend)`` times one of its queries (from any
    thread); on exit the request is recorded with its duration and the blocking backend
    of ``blocking``: the query that ended last or, when queries raised, the failed one
    that ended last. A request whose block raised is recorded too (a failed request
    counts against the backend that failed it); a request without queries is not.

    Backends are names or ids; names are mapped to ids with the reporter's ``backends``
    (when it has them) so that ties go to the smallest id, as in the Go app server."""

    def __init__(self, reporter: _Recorder) -> None:
        self._rep = reporter
        self._lock = threading.Lock()
        # [backend, end or None while running, failed]
        self._queries: list[list[Any]] = []
        self.t0 = 0.0
        self.latency_us: int | None = None
        self.blocking: int | str | None = None
        self.failed = False

    def __enter__(self) -> RequestTimer:
        self.t0 = time.perf_counter()
        return self

    def done(self, backend: int | str, end: float | None = None, *, failed: bool = False) -> None:
        """Mark a query of ``backend`` as ended now (or at perf_counter time ``end``);
        ``failed`` when it did not get its values."""
        end = time.perf_counter() if end is None else end
        with self._lock:
            self._queries.append([backend, end, failed])

    @contextmanager
    def query(self, backend: int | str) -> Iterator[None]:
        """Time one query: ``with req.query("ratings"): client.get(key)``. A query that
        raises is a failed query (the exception propagates)."""
        q: list[Any] = [backend, None, False]
        with self._lock:
            self._queries.append(q)
        try:
            yield
        except BaseException:
            q[2] = True
            raise
        finally:
            q[1] = time.perf_counter()

    def __exit__(self, *_: Any) -> None:
        end = time.perf_counter()
        with self._lock:
            queries = [tuple(q) for q in self._queries]
        if not queries:
            return
        names: Mapping[Hashable, int] = getattr(self._rep, "backends", None) or {}
        # Names the reporter does not know rank after every id, in name order (record()
        # then counts the request as unknown_backend).
        unknown = sorted({str(n) for n, _, _ in queries if not isinstance(n, int) and n not in names})
        ids: dict[int, int | str] = {}
        calls = []
        for name, qend, failed in queries:
            if isinstance(name, int):
                bid = name
            else:
                bid = names[name] if name in names else _UNKNOWN_BASE + unknown.index(str(name))
            ids[bid] = name
            calls.append(Call(backend=bid, end=qend, failed=failed))
        blk, self.failed = blocking(calls)
        if blk is None:
            return
        self.latency_us = int((end - self.t0) * 1e6)
        self.blocking = ids[blk]
        self._rep.record(self.latency_us, self.blocking)


#: Ids given to backend names the reporter does not know, for tie-breaking only.
_UNKNOWN_BASE = 1 << 40


def fan_out(reporter: _Recorder, calls: Mapping[str, Callable[[], T]],
            executor: Executor | None = None) -> dict[str, T]:
    """Run one request's queries in parallel (one callable per backend name) on
    ``executor`` (default: a thread per query), record the request, and return each
    backend's result. A query that raises fails the request: the exception propagates,
    and the request is recorded against the failed backend."""
    own = executor is None
    ex = executor or ThreadPoolExecutor(max_workers=max(1, len(calls)))
    try:
        with RequestTimer(reporter) as req:
            def timed(name: str, fn: Callable[[], T]) -> T:
                with req.query(name):
                    return fn()
            futs = {name: ex.submit(timed, name, fn) for name, fn in calls.items()}
            return {name: f.result() for name, f in futs.items()}
    finally:
        if own:
            ex.shutdown(wait=False)
