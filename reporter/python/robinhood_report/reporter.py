"""The reporter: a bounded buffer filled by ``record`` and a background thread that
streams it to the RBC server's ``Report`` in batches (docs/protocol.md)."""
from __future__ import annotations

import collections
import logging
import os
import ssl
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import grpc

from ._proto import rbc_pb2, rbc_pb2_grpc
from .fanout import RequestTimer

log = logging.getLogger("robinhood_report")

MAX_UINT32 = 2**32 - 1
#: The RBC server's default --max-backends: backend ids are below it (the topology's
#: ids are 0-1023).
MAX_BACKENDS = 1024
#: The reconnect back-off's cap, as the Go clients' (docs/reliability.md).
MAX_BACKOFF_S = 2.0
#: Trailers of a Report stream that ended in an error: what it stored and refused.
TRAILER_ACCEPTED = "robinhood-accepted-records"
TRAILER_REJECTED = "robinhood-rejected-records"


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
    """Records handed to a stream that ended in an error and that the server did not
    store: exact when the server said what it stored (its trailers, on every error it
    raises); when the connection itself broke, every record the stream took since it
    opened (the server may have stored some of them)."""
    refused: int
    """Records the server refused one by one (a backend id not below its
    --max-backends)."""
    batches: int
    stream_errors: int
    """Streams that ended in an error (each followed by a reconnect)."""
    unknown_backend: int
    """Records naming a backend missing from ``backends`` (not recorded)."""
    invalid: int
    """Records refused by ``record``: a backend id that is not an integer below
    ``max_backends`` (or, with ``backends``, not one of its ids), or a latency that is not
    an integer in [0, 2**32 - 1] µs (the wire's range: about 71 minutes)."""

    @property
    def not_stored(self) -> int:
        """Every record ``record`` was given that did not reach the server's window."""
        return self.dropped + self.lost + self.refused + self.unknown_backend + self.invalid


def _trailer_counts(e: grpc.RpcError) -> tuple[int | None, int]:
    """The records a failed stream stored and refused, from the server's trailers;
    (None, 0) when it sent none (the connection broke)."""
    try:
        md = dict(e.trailing_metadata() or ())  # type: ignore[attr-defined]
        return int(md[TRAILER_ACCEPTED]), int(md.get(TRAILER_REJECTED, 0))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None, 0


#: The largest token, certificate or key file read (robinhood_common.auth's bounds).
MAX_FILE_BYTES = 1 << 20


def _read(path: str | None) -> bytes | None:
    """A token or PEM file's bytes: a regular file of at most MAX_FILE_BYTES (a named pipe
    is refused without waiting for a writer, /dev/zero or a sparse 2 GB file by its kind or
    size), as robinhood_common.files reads them; this distribution depends on nothing else
    of the project, hence the few lines again. ValueError names the file."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file (a named pipe, a device or a folder)")
        raise ValueError(f"{path}: {st.st_size} bytes, more than the {MAX_FILE_BYTES} read here")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path}: more than {MAX_FILE_BYTES} bytes, the most read here")
    return data


def _check_tls(ca_path: str | None, ca: bytes | None, cert: str | None, key: str | None) -> None:
    """ValueError naming the file when the CA bundle holds no certificate or the
    certificate and key do not load, as OpenSSL will read them: at construction, not at
    the first connection (gRPC would only log it, and the sender would fail)."""
    if ca is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
        except (ssl.SSLError, ValueError):
            raise ValueError(f"{ca_path}: holds no PEM certificate") from None
    if cert and key:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"TLS certificate {cert} with key {key}: {e}") from None


class Reporter:
    """Streams request records to the RBC server at ``target`` (host:port) as
    ``app_server`` (its id in the topology).

    ``backends`` maps backend names to their topology ids, so ``record`` and the
    timers accept names; an id is accepted when it is below ``max_backends`` (the RBC
    server's ``--max-backends``) and, with ``backends``, one of its ids. ``buffer`` bounds the records
    waiting to be sent (16 bytes each at most, so the default bounds memory to about
    1 MiB); ``batch`` bounds one message; a batch is cut every ``flush_interval`` s.

    Credentials (docs/security.md): ``token`` (the bearer token itself) or
    ``token_file`` (the caller's "name token" file); ``tls_ca`` verifies the server,
    ``tls_cert``/``tls_key`` are presented for mutual TLS.
    """

    def __init__(self, target: str, app_server: str, backends: Mapping[str, int] | None = None, *,
                 buffer: int = 65536, batch: int = 4096, flush_interval: float = 0.1,
                 max_backends: int = MAX_BACKENDS,
                 token: str | None = None, token_file: str | None = None,
                 tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None,
                 start: bool = True) -> None:
        if not app_server:
            raise ValueError("app_server: the app server's id is required (records are attributed to it)")
        if not 1 <= max_backends <= 2**16:
            raise ValueError(f"max_backends {max_backends} must be in [1, 65536]")
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
        self.max_backends = max_backends
        for name, bid in self.backends.items():
            if isinstance(bid, bool) or not isinstance(bid, int) or not 0 <= bid < max_backends:
                raise ValueError(f"backends[{name!r}] = {bid!r} is not an id below max_backends {max_backends}")
        self._ids = frozenset(self.backends.values())
        self.buffer, self.batch, self.flush_interval = buffer, batch, flush_interval
        if token_file:
            fields = (_read(token_file) or b"").decode("utf-8", errors="replace").split()
            if len(fields) != 2:
                raise ValueError(f'{token_file}: a caller\'s token file holds one "name token" line')
            token = fields[1]
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        # record holds _lock for an append (no I/O, no waiting on the network); the
        # sender swaps the whole buffer out under it.
        self._lock = threading.Lock()
        self._q: collections.deque[tuple[int, int]] = collections.deque()
        self._recorded = self._dropped = self._sent = self._batches = self._errors = self._unknown = 0
        self._lost = self._stream_sent = self._refused = self._invalid = 0
        self._stop = threading.Event()
        opts = [("grpc.max_reconnect_backoff_ms", int(MAX_BACKOFF_S * 1000)),
                ("grpc.initial_reconnect_backoff_ms", 100)]
        if tls_ca or tls_cert:
            ca, key, cert = _read(tls_ca), _read(tls_key), _read(tls_cert)
            _check_tls(tls_ca, ca, tls_cert, tls_key)
            creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
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
        (name or id). O(1), never blocks, never raises: returns False when the record
        was not taken (counted in ``stats()``: a full buffer, an unknown name, an id or a
        latency out of range), so one bad record never costs another."""
        if isinstance(backend, str):
            bid = self.backends.get(backend)
            if bid is None:
                with self._lock:
                    self._unknown += 1
                return False
        else:
            bid = backend
        ok_id = (isinstance(bid, int) and not isinstance(bid, bool) and 0 <= bid < self.max_backends
                 and (not self._ids or bid in self._ids))
        ok_lat = (isinstance(latency_us, (int, float)) and not isinstance(latency_us, bool)
                  and 0 <= latency_us <= MAX_UINT32)  # NaN fails both comparisons
        if not (ok_id and ok_lat):
            with self._lock:
                self._invalid += 1
            return False
        rec = (int(latency_us), bid)
        with self._lock:
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
                     refused=self._refused, batches=self._batches, stream_errors=self._errors,
                     unknown_backend=self._unknown, invalid=self._invalid)

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
                self._refused += resp.rejected_records
                log.debug("report stream closed: %d records accepted, %d refused", resp.accepted_records,
                          resp.rejected_records)
                backoff = 0.1
            except grpc.RpcError as e:
                if self._stop.is_set() and e.code() == grpc.StatusCode.CANCELLED:
                    return
                self._errors += 1
                accepted, refused = _trailer_counts(e)
                if accepted is None:  # no word from the server: nothing it took is known to be stored
                    self._lost += self._stream_sent
                else:
                    self._refused += refused
                    self._lost += max(self._stream_sent - accepted - refused, 0)
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


