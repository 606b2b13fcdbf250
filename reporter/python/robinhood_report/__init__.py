"""robinhood_report: report request latencies and blocking backends from a Python
application server to the RobinHood RBC server (docs/reporter.md).

    from robinhood_report import Reporter

    rep = Reporter("rbc.internal:7070", app_server="app0",
                   backends={"catalog": 0, "ratings": 1})
    with rep.request() as req:               # times the request
        with req.query("catalog"):            # times one query (any thread)
            catalog.get(key)
        with req.query("ratings"):
            ratings.get(key)
    # on exit: latency = the request's duration, blocking backend = the query
    # that ended last; recorded in O(1), sent in the background.
    rep.close()

``Reporter.record(latency_us, backend)`` is the primitive: it never blocks and never
raises on a full buffer (the record is dropped and counted).
"""
from __future__ import annotations

from .fanout import RequestTimer, fan_out
from .reporter import Reporter, Stats

__all__ = ["Reporter", "RequestTimer", "Stats", "fan_out"]
