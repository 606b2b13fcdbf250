"""Timing a request's fan-out: its latency is the request's duration, its blocking
backend the query that ended last (the Go app server's rule, docs/appserver.md)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class _Recorder(Protocol):
    def record(self, latency_us: int, backend: int | str) -> bool: ...


class RequestTimer:
    """Times one request. ``query(backend)`` times one of its queries (from any
    thread); on exit the request is recorded with its duration and the backend whose
    query ended last. A request without queries, or one that raised, is not recorded."""

    def __init__(self, reporter: _Recorder) -> None:
        self._rep = reporter
        self._lock = threading.Lock()
        self._last_end = -1.0
        self._last: int | str | None = None
        self.t0 = 0.0
        self.latency_us: int | None = None
        self.blocking: int | str | None = None

    def __enter__(self) -> RequestTimer:
        self.t0 = time.perf_counter()
        return self

    def done(self, backend: int | str, end: float | None = None) -> None:
        """Mark a query of ``backend`` as ended now (or at perf_counter time ``end``)."""
        end = time.perf_counter() if end is None else end
        with self._lock:
            if end >= self._last_end:
                self._last_end, self._last = end, backend

    @contextmanager
    def query(self, backend: int | str) -> Iterator[None]:
        """Time one query: ``with req.query("ratings"): client.get(key)``."""
        try:
            yield
        finally:
            self.done(backend)

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None or self._last is None:
            return
        self.latency_us = int((time.perf_counter() - self.t0) * 1e6)
        self.blocking = self._last
        self._rep.record(self.latency_us, self._last)


def fan_out(reporter: _Recorder, calls: Mapping[str, Callable[[], T]],
            executor: Executor | None = None) -> dict[str, T]:
    """Run one request's queries in parallel (one callable per backend name) on
    ``executor`` (default: a thread per query), record the request, and return each
    backend's result. A query that raises propagates its exception (and nothing is
    recorded)."""
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
