"""Prometheus metrics of one controller (names in docs/controller.md; the testbed and
the Prometheus tests depend on them)."""
from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

log = logging.getLogger(__name__)

ERROR_KINDS = (
    "rbc_timeout",
    "rbc_unavailable",
    "rbc_error",
    "partition_unreachable",
    "memlimit",
    "protocol",
    "shrink_stuck",
    "unsupported",
    "policy",
    "automove_on",
)
"""Every value of the `kind` label of controller_errors_total."""


class Metrics:
    """The controller's metrics in their own registry."""

    def __init__(self, app_server: str, policy: str, partitions: list[str]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.info = Info("controller", "The controller's app server and policy.", registry=r)
        self.info.info({"app_server": app_server, "policy": policy})
        self.target = Gauge("controller_partition_target_bytes",
                            "Planned allocation of the partition (fractional state, bytes).", ["partition"], registry=r)
        self.limit = Gauge("controller_partition_limit_bytes",
                           "memcached limit_maxbytes of the partition.", ["partition"], registry=r)
        self.malloced = Gauge("controller_partition_malloced_bytes",
                              "memcached total_malloced of the partition.", ["partition"], registry=r)
        self.used = Gauge("controller_partition_used_bytes",
                          "Used space u_i of the partition (per used_source).", ["partition"], registry=r)
        self.rbc = Gauge("controller_partition_rbc",
                         "Last request blocking count of the partition's backend.", ["partition"], registry=r)
        self.eligible = Gauge("controller_partition_eligible",
                              "1 when the partition may receive space (unused-space rule), else 0.",
                              ["partition"], registry=r)
        self.up = Gauge("controller_partition_up", "1 when the partition answered this tick.", ["partition"],
                        registry=r)
        self.pages_moved = Counter("controller_pages_moved",
                                   "1 MB slab pages given back by shrinks (slabs reassign OK).",
                                   ["partition"], registry=r)
        self.resize_seconds = Histogram(
            "controller_resize_seconds", "Time from lowering a partition's limit to total_malloced below it.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.tick_seconds = Histogram(
            "controller_tick_seconds", "Duration of one tick (read, plan, resize).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.errors = Counter("controller_errors", "Errors by kind.", ["kind"], registry=r)
        self.ticks = Counter("controller_ticks", "Ticks run.", registry=r)
        self.tick_errors = Counter("controller_tick_errors",
                                   "Ticks that ended in an unexpected error, by kind (the error's type); the "
                                   "next tick runs.", ["kind"], registry=r)
        self.budget = Gauge("controller_budget_bytes", "The app server's cache budget.", registry=r)
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        for p in partitions:
            self.pages_moved.labels(p)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def serve(self, addr: str) -> int:
        """Serve /metrics on host:port (port 0: any free port); returns the port."""
        host, _, port = addr.rpartition(":")
        self._server, self._thread = start_http_server(int(port), addr=host.strip("[]") or "0.0.0.0",
                                                       registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop the /metrics server, if any, and wait for its thread."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None
