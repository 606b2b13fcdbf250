"""The reporter: a bounded buffer filled by ``record`` and a background thread that
streams it to the RBC server's ``Report`` in batches (docs/protocol.md)."""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

from .fanout import RequestTimer

log = logging.getLogger("robinhood_report")

MAX_UINT32 = 2**32 - 1
#: The reconnect back-off's cap, as the Go clients' (docs/reliability.md).
MAX_BACKOFF_S = 2.0


@dataclass(frozen=True)
class Stats:
    """Counters since the reporter started."""

    recorded: int
    """Records accepted by ``record``."""
    dropped: int
    """Records refused because the buffer was full (the RBC server away or slow)."""
    sent: int
    """Records handed to a stream."""
    lost: int
    """Records handed to a stream that then ended in an error: the server may or may
    not have stored them (the stream's last batches)."""
    batches: int
    stream_errors: int
    """Streams that ended in an error (each followed by a reconnect)."""
    unknown_backend: int
    """Records naming a backend missing from ``backends`` (dropped)."""


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


class Reporter:
    """Streams request records to the RBC server at ``target`` (host:port) as
    ``app_server`` (its id in the topology).

    ``backends`` maps backend names to their topology ids, so ``record`` and the
    timers accept names; ids are accepted as they are. ``buffer`` bounds the records
    waiting to be sent (16 bytes each at most, so the default bounds memory to about
    1 MiB); ``batch`` bounds one message; a batch is cut every ``flush_interval`` s.

    Credentials (docs/security.md): ``token`` (the bearer token itself) or
    ``token_file`` (the caller's "name token" file); ``tls_ca`` verifies the server,
    ``tls_cert``/``tls_key`` are presented for mutual TLS.
    """

    def __init__(self, target: str, app_server: str, backends: Mapping[str, int] | None = None, *,
                 buffer: int = 65536, batch: int = 4096, flush_interval: float = 0.1,
                 token: str | None = None, token_file: str | None = None,
                 tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None,
                 start: bool = True) -> None:
        if not app_server:
            raise ValueError("app_server: the app server's id is required (records are attributed to it)")
        if buffer < 1 or batch < 1:
            raise ValueError(f"buffer {buffer} and batch {batch} must be at least 1")
        if flush_interval <= 0:
            raise ValueError(f"flush_interval {flush_interval} must be positive")
        if token and token_file:
            raise ValueError("give token or token_file, not both")
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("tls_cert and tls_key go together")
        self.target, self.app_server = target, app_server
        self.backends = dict(backends or {})
        self.buffer, self.batch, self.flush_interval = buffer, batch, flush_interval
        if token_file:
            fields = Path(token_file).read_text().split()
            if len(fields) != 2:
                raise ValueError(f'{token_file}: a caller\'s token file holds one "name token" line')
            token = fields[1]
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        # record holds _lock for an append (no I/O, no waiting on the network); the
        # sender swaps the whole buffer out under it.
        self._lock = threading.Lock()
        self._q: collections.deque[tuple[int, int]] = collections.deque()
        self._recorded = self._dropped = self._sent = self._batches = self._errors = self._unknown = 0
        self._lost = self._stream_sent = 0
        self._stop = threading.Event()
        opts = [("grpc.max_reconnect_backoff_ms", int(MAX_BACKOFF_S * 1000)),
                ("grpc.initial_reconnect_backoff_ms", 100)]
        if tls_ca or tls_cert:
            creds = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca), private_key=_read(tls_key),
                                                 certificate_chain=_read(tls_cert))
            self._channel = grpc.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.insecure_channel(target, options=opts)
        self._stub = rbc_pb2_grpc.RBCServiceStub(self._channel)
        self._call: grpc.Future | None = None
        self._thread = threading.Thread(target=self._run, name="robinhood-report", daemon=True)
        if start:
            self._thread.start()

    # -- the request path ---------------------------------------------------------

    def record(self, latency_us: int, backend: int | str) -> bool:
        """Record one request: its latency in microseconds and its blocking backend
        (name or id). O(1), never blocks, never raises for a full buffer: returns False
        when the record was dropped (counted)."""
        bid = self.backends.get(backend) if isinstance(backend, str) else backend
        rec = (min(max(int(latency_us), 0), MAX_UINT32), bid)
        with self._lock:
            if bid is None:
                self._unknown += 1
                return False
            if len(self._q) >= self.buffer:
                self._dropped += 1
                return False
            self._q.append(rec)
            self._recorded += 1
        return True

    def request(self) -> RequestTimer:
        """A timer for one request: ``with rep.request() as req: with req.query(name): ...``."""
        return RequestTimer(self)

    def stats(self) -> Stats:
        return Stats(recorded=self._recorded, dropped=self._dropped, sent=self._sent, lost=self._lost,
                     batches=self._batches, stream_errors=self._errors, unknown_backend=self._unknown)

    # -- the background sender ----------------------------------------------------

    def _batches_gen(self) -> Iterator[rbc_pb2.ReportRequest]:
        """The stream's messages: a batch of whatever is buffered, every flush_interval,
        until close (then what is left)."""
        while True:
            stopping = self._stop.wait(self.flush_interval)
            with self._lock:
                taken, self._q = self._q, collections.deque()
            while taken:
                lat, be = [], []
                while taken and len(lat) < self.batch:
                    a, b = taken.popleft()
                    lat.append(a)
                    be.append(b)
                self._sent += len(lat)
                self._stream_sent += len(lat)
                self._batches += 1
                yield rbc_pb2.ReportRequest(app_server_id=self.app_server, latency_us=lat, blocking_backend=be,
                                            sent_unix_nano=time.time_ns())
            if stopping:
                return

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            # Records stay in the buffer (bounded, dropping the newest) until a
            # connection is up: a stream opened on a channel still connecting would
            # take them and fail.
            ready = grpc.channel_ready_future(self._channel)
            while not self._stop.is_set():
                try:
                    ready.result(timeout=0.5)
                    break
                except grpc.FutureTimeoutError:
                    continue
            if self._stop.is_set() and not self._q:
                return
            self._stream_sent = 0
            try:
                self._call = self._stub.Report.future(self._batches_gen(), metadata=self._metadata)
                resp = self._call.result()
                log.debug("report stream closed: %d records accepted", resp.accepted_records)
                backoff = 0.1
            except grpc.RpcError as e:
                if self._stop.is_set() and e.code() == grpc.StatusCode.CANCELLED:
                    return
                self._errors += 1
                self._lost += self._stream_sent
                log.warning("report stream to %s ended: %s: %s; reconnecting", self.target, e.code().name,
                            e.details())
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the buffer is empty (handed to the stream); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._q and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._q

    def close(self, timeout: float = 5.0) -> None:
        """Send what is buffered (within timeout), end the stream and the channel."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._call is not None and not self._call.done():
            self._call.cancel()
        self._channel.close()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


