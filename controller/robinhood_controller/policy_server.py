"""`robinhood-controller policy-server`: the controller's own policies for the
discrete-event simulator (bin/sim), so no policy is written twice.

The simulator runs one process and talks JSON lines: one request object per line on
stdin, one answer object per line on stdout (flushed after each); logs go to stderr
only. Every simulated controller interval it sends what the real controller would
have read (memcached's stats of each partition, the RBC snapshot) and gets back the
targets and the whole-MB limits to apply. The decision is :func:`decide.decide`, the
very function :meth:`Controller.tick` runs, and the timeline line is
:func:`timeline.tick_record`, the one the real controller writes. The messages are
defined once, in proto/robinhood/v1/policy.proto: requests are parsed into the
generated ``robinhood.v1.policy_pb2`` messages and answers written from them (the
simulator uses the generated Go types); the protocol is described in
docs/controller.md ("policy-server (the simulator's controller)"), and
tests/vectors/policy_server.json holds an exchange both sides are tested on.

A bad request is answered ``{"ok": false, "error": "<field>: <what is wrong>"}`` and
changes nothing; the server keeps going. ``{"op": "close"}`` or the end of stdin
closes the timelines and ends the process with status 0.
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import IO, Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from robinhood.v1 import policy_pb2 as pb
from robinhood_common.topology import Topology
from robinhood_common.units import format_value

from .config import ConfigError, ControllerConfig, load, resolve_document
from .decide import decide
from .plan import MIB
from .policies import AllocationPolicy, PartitionSample, PolicyError
from .rbc import QueryStats, RBCSnapshot
from .timeline import PartitionAfter, TimelineWriter, tick_record

log = logging.getLogger("robinhood_controller")

REQUESTS: dict[str, type[Message]] = {
    "open": pb.PolicyOpenRequest,
    "tick": pb.PolicyTickRequest,
    "close": pb.PolicyCloseRequest,
}
"""The requests the server answers: op -> its message (proto/robinhood/v1/policy.proto)."""
OPS = tuple(REQUESTS)

REQUIRED: dict[str, tuple[str, ...]] = {
    "PolicyOpenRequest": ("op", "topology", "app_server"),
    "PolicyTickRequest": ("op", "app_server", "now", "partitions"),
    "PolicyPartitionSample": ("limit_bytes", "malloced_bytes", "item_bytes"),
    "PolicyRBCSnapshot": ("counts",),
    "PolicyCloseRequest": ("op",),
}
"""The request fields policy.proto says are "Required." (proto3 has no required
fields), by message name; controller/tests/test_policy_server.py checks each is a field."""


class RequestError(ValueError):
    """A request that cannot be carried out; the message names the field. It is
    answered with ok:false and changes nothing."""


# -- reading a request ------------------------------------------------------------
#
# A request line is checked against its message's descriptor first, so that a bad
# one is answered with the field and what is wrong with it (json_format's own errors
# name neither well), then made into the generated message by its constructor.


_INT_RANGE = {
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-2**63, 2**63 - 1), FieldDescriptor.TYPE_SINT64: (-2**63, 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-2**63, 2**63 - 1), FieldDescriptor.TYPE_INT32: (-2**31, 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-2**31, 2**31 - 1), FieldDescriptor.TYPE_SFIXED32: (-2**31, 2**31 - 1),
}
_DECIMAL = re.compile(r"-?[0-9]+")


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _object(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise RequestError(f"{where}: {format_value(v)} is not an object")
    return v


def _string(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v:
        raise RequestError(f"{where}: {format_value(v)} is not a non-empty string")
    return v


def _integer(v: Any, where: str, lo: int, hi: int) -> int:
    """An integer in [lo, hi]: a JSON integer, or its decimal string (the proto3 JSON
    form of 64-bit integers). JSON booleans and fractions are not."""
    n = int(v) if isinstance(v, str) and _DECIMAL.fullmatch(v) else v
    if isinstance(n, bool) or not isinstance(n, int):
        raise RequestError(f"{where}: {format_value(v)} is not an integer")
    if n < 0 <= lo:
        raise RequestError(f"{where}: {format_value(v)} is negative")
    if not lo <= n <= hi:
        raise RequestError(f"{where}: {format_value(v)} is out of range")
    return n


def _number(v: Any, where: str) -> float:
    """A finite JSON number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RequestError(f"{where}: {format_value(v)} is not a number")
    return float(v)


def _value(v: Any, f: FieldDescriptor, where: str) -> Any:
    """One value of field f, checked; returned as the message constructor takes it."""
    t = f.type
    if t == FieldDescriptor.TYPE_MESSAGE:
        return _message(v, f.message_type, where)
    if t == FieldDescriptor.TYPE_STRING:
        return _string(v, where)
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _number(v, where)
    if t in _INT_RANGE:
        return _integer(v, where, *_INT_RANGE[t])
    if t == FieldDescriptor.TYPE_BOOL:
        if not isinstance(v, bool):
            raise RequestError(f"{where}: {format_value(v)} is not a boolean")
        return v
    raise RequestError(f"{where}: unsupported field type {t}")  # policy.proto uses none other


def _message(v: Any, desc: Descriptor, where: str) -> dict[str, Any]:
    """A JSON object of message desc, checked: no unknown field, the required ones
    present, every value of its field's type. Null fields are left out (unset)."""
    obj = _object(v, where or "request")
    known = desc.fields_by_name
    for k in obj:
        if k not in known:
            raise RequestError(f"{_path(where, k)}: unknown field (known: {', '.join(f.name for f in desc.fields)})")
    for k in REQUIRED.get(desc.name, ()):
        if obj.get(k) is None:
            raise RequestError(f"{_path(where, k)}: missing")
    out: dict[str, Any] = {}
    for k, x in obj.items():
        if x is None:
            continue
        f, w = known[k], _path(where, k)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            out[k] = {n: _value(e, vf, _path(w, n)) for n, e in _object(x, w).items()}
        elif f.is_repeated:
            if not isinstance(x, list):
                raise RequestError(f"{w}: {format_value(x)} is not a list")
            out[k] = [_value(e, f, f"{w}[{i}]") for i, e in enumerate(x)]
        else:
            out[k] = _value(x, f, w)
    return out


def parse_request(line: str) -> Message:
    """One request line as its message (PolicyOpenRequest, PolicyTickRequest or
    PolicyCloseRequest, by its op); RequestError names what is wrong."""
    try:
        req = json.loads(line, parse_constant=_no_constant)
    except ValueError as e:
        raise RequestError(f"request: not JSON ({e})") from None
    except RecursionError:
        raise RequestError("request: nested too deep to be a request") from None
    op = _object(req, "request").get("op")
    if op is None:
        raise RequestError("op: missing")
    cls = REQUESTS.get(op) if isinstance(op, str) else None
    if cls is None:
        raise RequestError(f"op: {format_value(op)} is not one of {', '.join(OPS)}")
    checked = _message(req, cls.DESCRIPTOR, "")
    try:
        # the checked values are what the constructor takes (nested messages and maps
        # as dicts), at a fraction of json_format's cost: a tick is parsed every
        # controller interval of every simulated app server
        return cls(**checked)
    except (TypeError, ValueError) as e:  # not expected after the check
        raise RequestError(f"request: {e}") from None


def _names(keys: Iterable[str], where: str, names: Iterable[str]) -> None:
    """Every key a partition name of the app server."""
    known = tuple(names)
    for k in keys:
        if k not in known:
            raise RequestError(f"{_path(where, k)}: not a partition of this app server (known: {', '.join(known)})")


def _sample(s: pb.PolicyPartitionSample, where: str) -> tuple[PartitionSample, float | None]:
    """One partition's memcached stats, and its hit ratio (None when not given)."""
    sample = PartitionSample(**{f.name: getattr(s, f.name) for f in fields(PartitionSample)})
    if not s.HasField("hit_ratio"):
        return sample, None
    if not 0 <= s.hit_ratio <= 1:
        raise RequestError(f"{where}.hit_ratio: {format_value(s.hit_ratio)} is not between 0 and 1")
    return sample, s.hit_ratio


#: lib/loghist's bucket count: a histogram bucket is below it.
HISTOGRAM_BUCKETS = 470


def _query_stats(m: Mapping[str, pb.PolicyQueryStats], where: str, names: list[str]) -> dict[str, QueryStats]:
    _names(m, where, names)
    for n, q in m.items():
        if len(q.distance_bucket) != len(q.distance_count):
            raise RequestError(f"{where}.{n}.distance_bucket: {len(q.distance_bucket)} entries but distance_count "
                               f"has {len(q.distance_count)}")
        bad = [b for b in q.distance_bucket if b >= HISTOGRAM_BUCKETS]
        if bad:
            raise RequestError(f"{where}.{n}.distance_bucket: {bad[0]} is not below {HISTOGRAM_BUCKETS}")

    def value(q: pb.PolicyQueryStats, name: str) -> object:
        v = getattr(q, name)
        return tuple(v) if name.startswith("distance_") else v
    return {n: QueryStats(**{f.name: value(q, f.name) for f in fields(QueryStats)}) for n, q in m.items()}


def _snapshot(req: pb.PolicyTickRequest, names: list[str]) -> RBCSnapshot | None:
    """The RBC snapshot of a tick request (None for "rbc" unset). The statistics come
    with it, as they do from GetStats."""
    stats = _query_stats(req.stats, "stats", names)
    local = _query_stats(req.local, "local", names)
    if not req.HasField("rbc"):
        return None
    r = req.rbc
    _names(r.counts, "rbc.counts", names)
    counts = {n: 0 for n in names}
    counts.update(r.counts)
    pcts = {k: getattr(r, k) for k in ("low_pct", "high_pct") if r.HasField(k)}
    return RBCSnapshot(counts=counts, window_requests=r.window_requests, band_requests=r.band_requests,
                       p99_latency_us=r.p99_latency_us, stats=stats, local=local, **pcts)


# -- writing an answer -----------------------------------------------------------


def answer_object(msg: Message) -> dict[str, Any]:
    """An answer message as the JSON object written on its line: every field without
    presence (defaults included), 64-bit integers as numbers where exact, fields in
    policy.proto's order and map keys sorted, as the simulator writes its requests."""
    d = json_format.MessageToDict(msg, always_print_fields_with_no_presence=True, preserving_proto_field_name=True,
                                  unquote_int64_if_possible=True)
    return _ordered(d, msg.DESCRIPTOR)


def _ordered(d: dict[str, Any], desc: Descriptor) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in desc.fields:
        if f.name not in d:
            continue
        v = d[f.name]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vt = f.message_type.fields_by_name["value"].message_type
            v = {k: _ordered(v[k], vt) if vt is not None else v[k] for k in sorted(v)}
        elif f.message_type is not None:
            v = [_ordered(e, f.message_type) for e in v] if isinstance(v, list) else _ordered(v, f.message_type)
        out[f.name] = v
    return out


def _error(msg: str) -> dict[str, Any]:
    return answer_object(pb.PolicyErrorAnswer(ok=False, error=msg))


# -- the server ------------------------------------------------------------------


@dataclass
class _App:
    """One opened app server: its configuration, policy, timeline and targets."""

    cfg: ControllerConfig
    policy: AllocationPolicy
    timeline: TimelineWriter | None
    names: list[str]
    targets: dict[str, int] | None = None
    ticks: int = 0


class PolicyServer:
    """The state of one policy-server process: the opened app servers. Each request
    either succeeds or changes nothing."""

    def __init__(self) -> None:
        self.apps: dict[str, _App] = {}
        self.closed = False
        # Validated topologies by content (config.resolve_document): the simulator
        # opens every app server of one file.
        self._validated: dict[str, Topology] = {}

    def handle(self, line: str) -> dict[str, Any]:
        """The answer to one request line."""
        try:
            req = parse_request(line)
            if isinstance(req, pb.PolicyOpenRequest):
                answer: Message = self._open(req)
            elif isinstance(req, pb.PolicyTickRequest):
                answer = self._tick(req)
            else:
                self.closed = True
                answer = pb.PolicyCloseAnswer(ok=True)
            return answer_object(answer)
        except RequestError as e:
            log.warning("event=bad_request error=%r", str(e))
            return _error(str(e))
        except Exception as e:  # noqa: BLE001 - one request's failure must not end the server
            log.exception("event=request_failed")
            return _error(f"request failed: {type(e).__name__}: {e}")

    def close(self) -> None:
        """Close every timeline."""
        for app in self.apps.values():
            if app.timeline is not None:
                app.timeline.close()
        self.apps.clear()

    def _open(self, req: pb.PolicyOpenRequest) -> pb.PolicyOpenAnswer:
        topology, app_id = req.topology, req.app_server
        path = req.timeline if req.HasField("timeline") else None
        if app_id in self.apps:
            raise RequestError(f"app_server: {format_value(app_id)} is already open")
        try:
            cfg = load(topology, app_id, memo=self._validated)
        except ConfigError as e:
            # config.load speaks of the command line's --id; here it is this field.
            raise RequestError(str(e).replace(": --id: ", ": app_server: ", 1)) from None
        if cfg.cache_mode != "partitioned":
            raise RequestError(f"app_server: {app_id} has cache_mode {cfg.cache_mode}; only a partitioned "
                               "app server has an allocation policy")
        try:
            policy = cfg.build_policy()
        except PolicyError as e:
            raise RequestError(f"{cfg.where}.controller.policy: {e}") from None
        timeline: TimelineWriter | None = None
        if path is not None:
            try:
                timeline = TimelineWriter(path)
            except OSError as e:
                raise RequestError(f"timeline: cannot open {path}: {e.strerror}") from None
        app = _App(cfg=cfg, policy=policy, timeline=timeline, names=[p.name for p in cfg.partitions])
        self.apps[app_id] = app
        s = cfg.settings
        log.info("event=open app_server=%s policy=%s budget_mb=%d partitions=%s timeline=%s",
                 app_id, policy.name, cfg.budget_mb, ",".join(app.names), path or "-")
        return pb.PolicyOpenAnswer(
            ok=True, app_server=cfg.app_server, policy=policy.name, needs_rbc=policy.needs_rbc,
            budget_bytes=cfg.budget_bytes, floor_bytes=s.min_partition_mb * MIB, interval_s=s.interval,
            partitions=[pb.PolicyPartition(name=p.name, backend_id=p.backend_id, initial_mb=p.initial_mb)
                        for p in cfg.partitions],
            budget_mb=cfg.budget_mb, rbc_window_s=cfg.rbc_window)

    def _tick(self, req: pb.PolicyTickRequest) -> pb.PolicyTickAnswer:
        app_id = req.app_server
        app = self.apps.get(app_id)
        if app is None:
            opened = ", ".join(sorted(self.apps)) or "none"
            raise RequestError(f"app_server: {format_value(app_id)} is not open (open: {opened}; "
                               'send {"op":"open",...} first)')
        now = req.now
        _names(req.partitions, "partitions", app.names)
        samples: dict[str, PartitionSample] = {}
        hit_ratio: dict[str, float | None] = {}
        for n, v in req.partitions.items():
            samples[n], hit_ratio[n] = _sample(v, f"partitions.{n}")
        snap = _snapshot(req, app.names)

        cfg, s = app.cfg, app.cfg.settings
        d = decide(app.policy, app.names, app.targets, samples, snap, budget_mb=cfg.budget_mb,
                   floor_mb=s.min_partition_mb, used_source=s.used_source, now=now)
        tick = app.ticks + 1
        if app.timeline is not None:
            # The simulator applies the limits at once: memcached after the tick has them.
            after = {n: PartitionAfter(
                limit_bytes=d.limits_mb[n] * MIB if d.limits_mb is not None else samples[n].limit_bytes,
                malloced_bytes=samples[n].malloced_bytes, item_bytes=samples[n].item_bytes,
                hit_ratio=hit_ratio[n]) for n in app.names if n in samples}
            record = tick_record(
                time=now, tick=tick, app_server=cfg.app_server, policy=app.policy.name, dry_run=False,
                budget_bytes=cfg.budget_bytes, names=app.names, after=after, targets=d.targets,
                limits_mb=d.limits_mb, used=d.used, rbc=snap, eligible=d.eligible, notes=d.notes,
                explain=d.explain)
            try:
                app.timeline.write(record)
            except OSError as e:
                raise RequestError(f"timeline: cannot write {app.timeline.path}: {e.strerror}") from None
        app.targets = d.targets
        app.ticks = tick
        if d.policy_error:
            log.warning("event=error kind=policy app_server=%s tick=%d msg=%r", app_id, tick,
                        f"policy {app.policy.name}: {d.policy_error}; targets kept")
        log.debug("event=tick app_server=%s tick=%d now=%.3f limits_mb=%s notes=%r", app_id, tick, now,
                  d.limits_mb, d.notes)
        return pb.PolicyTickAnswer(ok=True, tick=tick, targets=d.targets, limits_mb=d.limits_mb,
                                   eligible=d.eligible, notes=d.notes)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _answer(out: IO[str], answer: dict[str, Any]) -> None:
    out.write(json.dumps(answer, separators=(",", ":")) + "\n")
    out.flush()


#: The longest request line: a tick of 1,024 partitions is about 300 KB. A longer line is
#: answered with an error and skipped without being held whole.
MAX_REQUEST_BYTES = 4 << 20


def _lines(inp: IO[bytes]) -> Iterator[bytes | None]:
    """inp's lines, each at most MAX_REQUEST_BYTES; None for a longer one (its rest is
    read and dropped in bounded pieces)."""
    while True:
        raw = inp.readline(MAX_REQUEST_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_REQUEST_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = inp.readline(MAX_REQUEST_BYTES)
            yield None
            continue
        yield raw


def serve(inp: IO[bytes], out: IO[str]) -> int:
    """Answer requests from inp on out until close or the end of inp; 0 then, 1 when
    out is closed by the reader. Blank lines are skipped."""
    server = PolicyServer()
    log.info("event=policy_server_start pid=%d", os.getpid())
    try:
        for raw in _lines(inp):
            if raw is None:
                log.warning("event=bad_request error=%r", "request: longer than the limit")
                _answer(out, _error(f"request: longer than {MAX_REQUEST_BYTES} bytes"))
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                _answer(out, _error(f"request: not UTF-8 ({e.reason} at byte {e.start})"))
                continue
            if not line.strip():
                continue
            _answer(out, server.handle(line))
            if server.closed:
                break
    except BrokenPipeError:
        log.warning("event=stopped reason=%r", "stdout closed by the reader")
        return 1
    finally:
        server.close()
    log.info("event=stopped")
    return 0


def serve_stdio() -> int:
    """:func:`serve` on the process's stdin and stdout. Answers get their own copy of
    stdout; file descriptor 1 and sys.stdout then point to stderr, so nothing a
    policy (or a program it runs) prints can get into the answers."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    try:
        return serve(sys.stdin.buffer, answers)
    finally:
        try:
            answers.close()
        except BrokenPipeError:
            pass


#: A small topology the forking server reads before it forks (see _warm).
_WARM_TOPOLOGY = {
    "rbc_server": {"grpc": "127.0.0.1:1"},
    "backends": [{"id": i, "name": n, "type": "kv", "replicas": [{"grpc": f"127.0.0.1:{2 + i}"}]}
                 for i, n in enumerate(("a", "b"))],
    "app_servers": [{"id": "app0", "http": "127.0.0.1:4", "cache_mode": "partitioned", "cache_budget_mb": 96,
                     "partitions": {"a": "127.0.0.1:5", "b": "127.0.0.1:6"}, "controller": {"policy": "robinhood"}}],
}


def _warm() -> None:
    """Make what every session's ``open`` makes the same way, once, before the forks: the
    schema set with the programs of its CEL rules, and one small topology read through
    them (the first read of a process is the slow one; a forked session inherits the
    warm state: about 0.2 s less per session)."""
    import copy

    from robinhood_common.contract import Contract

    Contract.packaged()
    try:
        resolve_document(copy.deepcopy(_WARM_TOPOLOGY), "app0")
    except ConfigError as e:  # the schema moved on: only the warming is lost
        log.warning("event=warm_failed error=%r", str(e))


def serve_forking(path: str, ready: IO[str]) -> int:
    """Listen on the Unix socket at ``path`` and answer each connection as :func:`serve`
    answers stdin: in a child forked for it, so the imports and the schema set are paid
    once for many sessions (the simulator opens one per simulated arm) and every session
    starts from the same state as a process of its own. One line ``listening PATH`` on
    ``ready`` when it accepts connections. It stops, status 0, on SIGTERM, SIGINT or at
    the end of stdin (the process that started it is gone), removing the socket; sessions
    running then finish."""
    import selectors
    import signal
    import socket

    _warm()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "something is there already")
        sock.bind(path)
        sock.listen(64)
        mine = os.stat(path).st_ino
    except OSError as e:
        sock.close()
        print(f"robinhood-controller policy-server: --listen {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    children: set[int] = set()
    ready.write(f"listening {path}\n")
    ready.flush()
    log.info("event=policy_server_listening path=%s pid=%d", path, os.getpid())
    try:
        while not stop:
            for key, _ in sel.select(timeout=1.0):
                if key.data == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        stop = True
                    continue
                conn, _ = sock.accept()
                pid = os.fork()
                if pid == 0:  # the session's process
                    rc = 1
                    try:
                        for s, h in old.items():
                            signal.signal(s, h)
                        sel.close()
                        sock.close()
                        with conn, conn.makefile("rb") as inp, conn.makefile("w", encoding="utf-8") as out:
                            rc = serve(inp, out)
                    except BaseException:  # noqa: BLE001 - said before the process goes
                        log.exception("event=session_failed pid=%d", os.getpid())
                    finally:
                        os._exit(rc)
                children.add(pid)
                conn.close()
            while children:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                children.discard(pid)
    finally:
        sel.close()
        sock.close()
        try:
            if os.stat(path).st_ino == mine:  # not another server's socket made since
                os.unlink(path)
        except OSError:
            pass
        for s, h in old.items():
            signal.signal(s, h)
        for pid in children:
            os.waitpid(pid, 0)
    log.info("event=stopped")
    return 0
