"""Reading the RBC server: request blocking counts and the per-backend statistics the
app servers report (`RBCService/GetStats`: both in one call; `GetRBC` for servers
without statistics)."""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import grpc
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc
from robinhood_common.auth import AuthError, Credential, client_tls_files
from robinhood_common.contract import Contract
from robinhood_common.topology import TLS

log = logging.getLogger(__name__)

# Reconnect quickly after the RBC server comes back: gRPC's default backoff grows to
# two minutes, longer than many ticks.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


@cache
def _band() -> dict[str, Any]:
    """The topology schema's rbc_server defaults: the RBC band (low_pct, high_pct)."""
    return Contract.packaged().defaults("topology.schema.yaml#/$defs/rbc_server")


class RBCError(Exception):
    """GetRBC failed; `kind` is rbc_timeout, rbc_unavailable or rbc_error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class QueryStats:
    """One backend's statistics over the window (docs/protocol.md, GetStats)."""

    hits: int = 0
    misses: int = 0
    shadow_hits: int = 0
    shadow_bytes: int = 0
    queries: int = 0
    p50_query_latency_us: int = 0
    p99_query_latency_us: int = 0
    limit_bytes: int = 0
    p50_backend_latency_us: int = 0
    """Median latency of the queries that reached the backend (every query but the
    hits), µs; 0 when none did or the RBC server is older."""
    p90_backend_latency_us: int = 0
    distance_bucket: tuple[int, ...] = ()
    """The cacheable queries' stack-distance histogram, sparse (GetStats' BackendSummary):
    distance_count[i] queries at a distance in bucket distance_bucket[i], [1.04^b, 1.04^(b+1))
    KiB of limit bytes, the last bucket (469) also holding the queries that never hit. Empty
    when the app servers have no shadow model, or the RBC server is older."""
    distance_count: tuple[int, ...] = ()

    @property
    def miss_ratio(self) -> float | None:
        """Misses / cacheable queries; None without any."""
        n = self.hits + self.misses
        return self.misses / n if n else None


def _query_stats(b: rbc_pb2.BackendSummary) -> QueryStats:
    return QueryStats(hits=int(b.cache_hits), misses=int(b.cache_misses), shadow_hits=int(b.shadow_hits),
                      shadow_bytes=int(b.shadow_bytes), queries=int(b.queries),
                      p50_query_latency_us=int(b.p50_query_latency_us),
                      p99_query_latency_us=int(b.p99_query_latency_us), limit_bytes=int(b.partition_limit_bytes),
                      p50_backend_latency_us=int(b.p50_backend_latency_us),
                      p90_backend_latency_us=int(b.p90_backend_latency_us),
                      distance_bucket=tuple(int(x) for x in b.distance_bucket),
                      distance_count=tuple(int(x) for x in b.distance_count))


@dataclass(frozen=True)
class RBCSnapshot:
    """One GetRBC answer mapped to partition names."""

    counts: dict[str, int]
    """Blocking count per partition name (0 for partitions the answer does not list)."""
    window_requests: int = 0
    band_requests: int = 0
    p99_latency_us: int = 0
    low_pct: float = field(default_factory=lambda: _band()["low_pct"])
    high_pct: float = field(default_factory=lambda: _band()["high_pct"])
    unknown: dict[int, int] = field(default_factory=dict)
    """Counts for backend ids this app server has no partition for."""
    stats: dict[str, QueryStats] = field(default_factory=dict)
    """Per partition, the statistics over every app server (empty without GetStats)."""
    local: dict[str, QueryStats] = field(default_factory=dict)
    """Per partition, this app server's own statistics."""


def stats_snapshot(resp: rbc_pb2.GetStatsResponse, names_by_id: Mapping[int, str], app_server: str) -> RBCSnapshot:
    """Map a GetStatsResponse to partition names: the RBC, every app server's
    statistics summed, and this app server's own."""
    snap = to_snapshot(resp.rbc, names_by_id)
    total = {names_by_id[b.backend]: _query_stats(b) for b in resp.backends if b.backend in names_by_id}
    local: dict[str, QueryStats] = {}
    for a in resp.app_servers:
        if a.app_server_id == app_server:
            local = {names_by_id[b.backend]: _query_stats(b) for b in a.backends if b.backend in names_by_id}
    return RBCSnapshot(counts=snap.counts, window_requests=snap.window_requests, band_requests=snap.band_requests,
                       p99_latency_us=snap.p99_latency_us, low_pct=snap.low_pct, high_pct=snap.high_pct,
                       unknown=snap.unknown, stats=total, local=local)


def to_snapshot(resp: rbc_pb2.GetRBCResponse, names_by_id: Mapping[int, str]) -> RBCSnapshot:
    """Map a GetRBCResponse's backend ids to partition names."""
    counts = {name: 0 for name in names_by_id.values()}
    unknown: dict[int, int] = {}
    for b in resp.backends:
        name = names_by_id.get(b.backend)
        if name is None:
            unknown[b.backend] = int(b.blocking_count)
        else:
            counts[name] = int(b.blocking_count)
    return RBCSnapshot(
        counts=counts,
        window_requests=int(resp.window_requests),
        band_requests=int(resp.band_requests),
        p99_latency_us=int(resp.p99_latency_us),
        low_pct=float(resp.low_pct),
        high_pct=float(resp.high_pct),
        unknown=unknown,
    )


class RBCClient:
    """A GetStats (or GetRBC) client with a deadline per call. The channel reconnects
    by itself."""

    def __init__(self, addr: str, timeout: float, window_seconds: float, app_server: str = "",
                 token_file: str | None = None, tls: TLS | None = None) -> None:
        """token_file: the caller's token file (sent as a bearer token with every call);
        tls: the topology's tls block (verify the server with its CA, present its
        certificate when client_auth is on). AuthError when a file cannot be used."""
        self.addr = addr
        self.timeout = timeout
        self.window_seconds = window_seconds
        self.app_server = app_server
        self.has_stats = True
        self._cred = Credential(token_file) if token_file else None
        self._tls = tls
        self._channel, self._stub = self._connect()

    def _connect(self) -> tuple[grpc.Channel, rbc_pb2_grpc.RBCServiceStub]:
        """A channel to the server with the TLS files as they are now."""
        tls = self._tls
        if tls is not None:
            ca, cert, key = client_tls_files(tls.ca, tls.cert if tls.client_auth else None,
                                             tls.key if tls.client_auth else None)
            creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
            channel = grpc.secure_channel(self.addr, creds, options=_CHANNEL_OPTIONS)
        else:
            channel = grpc.insecure_channel(self.addr, options=_CHANNEL_OPTIONS)
        return channel, rbc_pb2_grpc.RBCServiceStub(channel)

    def reload(self) -> list[str]:
        """Re-read the caller's token file and, with TLS, the CA, certificate and key
        (SIGHUP): a new channel for the next call. What was re-read; a file that does
        not read keeps the previous one (logged)."""
        done = []
        if self._cred is not None and self._cred.reload():
            done.append("token")
        if self._tls is not None:
            try:
                channel, stub = self._connect()
            except AuthError as e:
                log.warning("event=error kind=tls_files msg=%r (the previous channel stays)", str(e))
            else:
                old, self._channel, self._stub = self._channel, channel, stub
                # A call in flight on the old channel may finish: close it once the
                # longest call could have ended.
                closer = threading.Timer(self.timeout + 1.0, old.close)
                closer.daemon = True
                closer.start()
                done.append("tls")
        return done

    def _md(self) -> tuple[tuple[str, str], ...] | None:
        return self._cred.metadata() if self._cred else None

    def fetch(self, names_by_id: Mapping[int, str]) -> RBCSnapshot:
        """One snapshot over the last window_seconds: the RBC and the statistics, in
        one GetStats call (GetRBC alone from a server without statistics). RBCError
        when the server is unavailable, too slow (deadline) or answers an error."""
        if self.has_stats:
            try:
                resp = self._stub.GetStats(
                    rbc_pb2.GetStatsRequest(window_seconds=self.window_seconds), timeout=self.timeout,
                    metadata=self._md())
                return stats_snapshot(resp, names_by_id, self.app_server)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise self._error("GetStats", e) from None
                self.has_stats = False
        try:
            rresp = self._stub.GetRBC(rbc_pb2.GetRBCRequest(window_seconds=self.window_seconds), timeout=self.timeout,
                                      metadata=self._md())
        except grpc.RpcError as e:
            raise self._error("GetRBC", e) from None
        return to_snapshot(rresp, names_by_id)

    def _error(self, method: str, e: grpc.RpcError) -> RBCError:
        code = e.code() if hasattr(e, "code") else None
        detail = e.details() if hasattr(e, "details") else str(e)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            kind = "rbc_timeout"
        elif code == grpc.StatusCode.UNAVAILABLE:
            kind = "rbc_unavailable"
        else:
            kind = "rbc_error"
        return RBCError(kind, f"{method} at {self.addr}: {code.name if code else 'error'}: {detail}")

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()
