"""Reading request blocking counts from the RBC server (`RBCService/GetRBC`)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

# Reconnect quickly after the RBC server comes back: gRPC's default backoff grows to
# two minutes, longer than many ticks.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


class RBCError(Exception):
    """GetRBC failed; `kind` is rbc_timeout, rbc_unavailable or rbc_error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class RBCSnapshot:
    """One GetRBC answer mapped to partition names."""

    counts: dict[str, int]
    """Blocking count per partition name (0 for partitions the answer does not list)."""
    window_requests: int = 0
    band_requests: int = 0
    p99_latency_us: int = 0
    low_pct: float = 98.5
    high_pct: float = 99.5
    unknown: dict[int, int] = field(default_factory=dict)
    """Counts for backend ids this app server has no partition for."""


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
    """A GetRBC client with a deadline per call. The channel reconnects by itself."""

    def __init__(self, addr: str, timeout: float, window_seconds: float) -> None:
        self.addr = addr
        self.timeout = timeout
        self.window_seconds = window_seconds
        self._channel = grpc.insecure_channel(addr, options=_CHANNEL_OPTIONS)
        self._stub = rbc_pb2_grpc.RBCServiceStub(self._channel)

    def fetch(self, names_by_id: Mapping[int, str]) -> RBCSnapshot:
        """One snapshot over the last window_seconds. RBCError when the server is
        unavailable, too slow (deadline) or answers an error."""
        try:
            resp = self._stub.GetRBC(
                rbc_pb2.GetRBCRequest(window_seconds=self.window_seconds), timeout=self.timeout
            )
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            detail = e.details() if hasattr(e, "details") else str(e)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                kind = "rbc_timeout"
            elif code == grpc.StatusCode.UNAVAILABLE:
                kind = "rbc_unavailable"
            else:
                kind = "rbc_error"
            raise RBCError(kind, f"GetRBC at {self.addr}: {code.name if code else 'error'}: {detail}") from None
        return to_snapshot(resp, names_by_id)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()
