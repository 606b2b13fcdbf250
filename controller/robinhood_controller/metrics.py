"""Prometheus metrics of one controller (names in docs/controller.md; the testbed and
the Prometheus tests depend on them)."""
from __future__ import annotations

import logging
import ssl
import sys
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from robinhood_common.auth import AuthError, TokensFile, is_loopback, load_server_files, server_ssl_context
from robinhood_common.topology import TLS

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
    "eviction_policy",
)
"""Every value of the `kind` label of controller_errors_total."""


#: How long a client may take over its TLS handshake, and then be silent while a request
#: is read or an answer written, before its connection is closed.
CLIENT_TIMEOUT_S = 10.0


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape; the environ says whether the client presented a
    verified certificate (mutual TLS). A client silent for CLIENT_TIMEOUT_S loses its
    connection (its thread is freed)."""

    timeout = CLIENT_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def get_environ(self) -> dict[str, Any]:
        env = super().get_environ()
        getpeercert = getattr(self.connection, "getpeercert", None)
        env["robinhood.client_cert"] = bool(getpeercert()) if getpeercert is not None else False
        return env


class _Server(ThreadingWSGIServer):
    """A thread per connection; with TLS, the handshake runs on that thread, bounded by
    CLIENT_TIMEOUT_S, never on the accepting one: a client that connects and sends
    nothing holds up no one else's /metrics or /healthz (a listening socket wrapped
    whole would shake hands inside accept)."""

    tls: ssl.SSLContext | None = None

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        if self.tls is not None:
            try:
                request.settimeout(CLIENT_TIMEOUT_S)
                request = self.tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                request.do_handshake()
            except (OSError, ValueError):  # ssl.SSLError and a timeout are OSErrors
                self.shutdown_request(request)
                return
        super().process_request_thread(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went silent (CLIENT_TIMEOUT_S) or away is no error of ours: no
        traceback for it."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


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
        self.predicted = Gauge("controller_partition_predicted_utilization",
                               "The partition's backend's predicted utilization (load / capacity) with the planned "
                               "allocation (policies that model it: relief).", ["partition"], registry=r)
        self.move_reason = Gauge("controller_partition_move_reason",
                                 "1 for why the partition last moved (policies that say so: relief), 0 for the "
                                 "other reasons.", ["partition", "reason"], registry=r)
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
        self._verifier: TokensFile | None = None
        self._tls: TLS | None = None
        self._ctx: ssl.SSLContext | None = None

    def serve(self, addr: str, *, tokens: str | None = None, tls: TLS | None = None,
              insecure: bool = False) -> int:
        """Serve /metrics (and /healthz) on host:port (port 0: any free port); returns
        the port. tokens: the servers' token file: /metrics then needs a bearer token;
        tls: the topology's tls block (its certificate; client certificates when
        client_auth). A non-loopback address (an empty host is one) needs tokens or
        insecure, as every server of the project (docs/security.md): AuthError."""
        host, _, port = addr.rpartition(":")
        h = host.strip("[]")
        if not tokens and not insecure and not is_loopback(h):
            raise AuthError(f"controller.metrics {addr}: not a loopback address and no auth block in the "
                            "topology: give the topology an auth block (docs/security.md) or --insecure to "
                            "serve it unauthenticated")
        verifier = TokensFile(tokens) if tokens else None
        self._verifier = verifier
        metrics_app = make_wsgi_app(self.registry)
        mtls = tls is not None and tls.client_auth

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            if environ.get("PATH_INFO") == "/healthz":
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"ok\n"]
            if mtls and not environ.get("robinhood.client_cert"):
                # The listener asks for a certificate without requiring one, so that a
                # Kubernetes probe (which presents none) reads /healthz; every other path
                # needs one, as on the Go servers.
                start_response("403 Forbidden", [("Content-Type", "text/plain")])
                return [b"a client certificate is required (mutual TLS): only /healthz answers without one\n"]
            if verifier is not None and verifier.check_header(environ.get("HTTP_AUTHORIZATION")) is None:
                start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                                    ("WWW-Authenticate", 'Bearer realm="robinhood"')])
                return [b"missing or invalid 'Authorization: Bearer TOKEN'\n"]
            return metrics_app(environ, start_response)

        ctx = None
        if tls is not None:  # read before anything listens
            ctx = server_ssl_context(tls.cert, tls.key, tls.ca if tls.client_auth else None, required=False)
        server = make_server(h or "0.0.0.0", int(port), app, _Server, handler_class=_QuietHandler)
        if ctx is not None:
            server.tls = ctx
            self._tls, self._ctx = tls, ctx
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        return int(server.server_port)

    def reload(self) -> list[str]:
        """Re-read the servers' token file and the certificate, key and client CA the
        /metrics server presents and checks (SIGHUP); what was re-read. A file that does
        not read keeps the previous one (logged)."""
        done = []
        if self._verifier is not None and self._verifier.reload():
            done.append("tokens")
        if self._ctx is not None and self._tls is not None:
            try:
                load_server_files(self._ctx, self._tls.cert, self._tls.key,
                                  self._tls.ca if self._tls.client_auth else None)
                done.append("tls")
            except AuthError as e:
                log.warning("event=error kind=tls_files msg=%r (the previous certificate stays)", str(e))
        return done

    def close(self) -> None:
        """Stop the /metrics server, if any, and wait for its thread."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None
