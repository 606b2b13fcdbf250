"""`robinhood-controller policy-server`: the controller's own policies for the
discrete-event simulator (bin/sim), so no policy is written twice.

The simulator runs one process and talks JSON lines: one request object per line on
stdin, one answer object per line on stdout (flushed after each); logs go to stderr
only. Every simulated controller interval it sends what the real controller would
have read (memcached's stats of each partition, the RBC snapshot) and gets back the
targets and the whole-MB limits to apply. The decision is :func:`decide.decide`, the
very function :meth:`Controller.tick` runs, and the timeline line is
:func:`timeline.tick_record`, the one the real controller writes. The protocol is in
docs/controller.md ("policy-server (the simulator's controller)").

A bad request is answered ``{"ok": false, "error": "<field>: <what is wrong>"}`` and
changes nothing; the server keeps going. ``{"op": "close"}`` or the end of stdin
closes the timelines and ends the process with status 0.
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import IO, Any

from robinhood_common.topology import Topology
from robinhood_common.units import format_value

from .config import ConfigError, ControllerConfig, load
from .decide import decide
from .plan import MIB
from .policies import AllocationPolicy, PartitionSample, PolicyError
from .rbc import QueryStats, RBCSnapshot
from .timeline import PartitionAfter, TimelineWriter, tick_record

log = logging.getLogger("robinhood_controller")

OPS = ("open", "tick", "close")
"""The requests the server answers."""

_OPEN_FIELDS = ("op", "topology", "app_server", "timeline")
_TICK_FIELDS = ("op", "app_server", "now", "partitions", "rbc", "stats", "local")
_CLOSE_FIELDS = ("op",)
_SAMPLE_REQUIRED = ("limit_bytes", "malloced_bytes", "item_bytes")
_SAMPLE_OPTIONAL = ("items", "evictions", "get_hits", "get_misses")
_SAMPLE_FIELDS = (*_SAMPLE_REQUIRED, *_SAMPLE_OPTIONAL, "hit_ratio")
_RBC_COUNTS = ("window_requests", "band_requests", "p99_latency_us")
_RBC_PCTS = ("low_pct", "high_pct")
_RBC_FIELDS = ("counts", *_RBC_COUNTS, *_RBC_PCTS)
_QUERY_FIELDS = tuple(f.name for f in fields(QueryStats))


class RequestError(ValueError):
    """A request that cannot be carried out; the message names the field. It is
    answered with ok:false and changes nothing."""


# -- reading a request ------------------------------------------------------------


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _object(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise RequestError(f"{where}: {format_value(v)} is not an object")
    return v


def _known(obj: Mapping[str, Any], where: str, known: Iterable[str]) -> None:
    allowed = tuple(known)
    for k in obj:
        if k not in allowed:
            raise RequestError(f"{_path(where, k)}: unknown field (known: {', '.join(allowed)})")


def _required(obj: Mapping[str, Any], where: str, key: str) -> Any:
    if key not in obj:
        raise RequestError(f"{_path(where, key)}: missing")
    return obj[key]


def _string(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v:
        raise RequestError(f"{where}: {format_value(v)} is not a non-empty string")
    return v


def _count(v: Any, where: str) -> int:
    """A non-negative integer (JSON booleans and fractions are not)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{where}: {format_value(v)} is not an integer")
    if v < 0:
        raise RequestError(f"{where}: {format_value(v)} is negative")
    return v


def _number(v: Any, where: str) -> float:
    """A finite JSON number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RequestError(f"{where}: {format_value(v)} is not a number")
    return float(v)


def _partition_map(v: Any, where: str, names: Iterable[str]) -> dict[str, Any]:
    """An object keyed by partition names of the app server."""
    obj = _object(v, where)
    known = tuple(names)
    for k in obj:
        if k not in known:
            raise RequestError(f"{_path(where, k)}: not a partition of this app server (known: {', '.join(known)})")
    return obj


def _sample(v: Any, where: str) -> tuple[PartitionSample, float | None]:
    """One partition's memcached stats, and its hit ratio (given, or from the gets)."""
    obj = _object(v, where)
    _known(obj, where, _SAMPLE_FIELDS)
    ints = {k: _count(_required(obj, where, k), _path(where, k)) for k in _SAMPLE_REQUIRED}
    ints.update({k: _count(obj[k], _path(where, k)) for k in _SAMPLE_OPTIONAL if k in obj})
    s = PartitionSample(**ints)
    if "hit_ratio" not in obj:
        gets = s.get_hits + s.get_misses
        return s, (s.get_hits / gets if gets else None)
    ratio = obj["hit_ratio"]
    if ratio is None:
        return s, None
    r = _number(ratio, _path(where, "hit_ratio"))
    if not 0 <= r <= 1:
        raise RequestError(f"{_path(where, 'hit_ratio')}: {format_value(ratio)} is not between 0 and 1")
    return s, r


def _query_stats(v: Any, where: str, names: Iterable[str]) -> dict[str, QueryStats]:
    """Per partition, QueryStats fields (each optional, 0 when absent)."""
    if v is None:
        return {}
    out: dict[str, QueryStats] = {}
    for n, entry in _partition_map(v, where, names).items():
        w = _path(where, n)
        obj = _object(entry, w)
        _known(obj, w, _QUERY_FIELDS)
        out[n] = QueryStats(**{k: _count(x, _path(w, k)) for k, x in obj.items()})
    return out


def _snapshot(req: Mapping[str, Any], names: list[str]) -> RBCSnapshot | None:
    """The RBC snapshot of a tick request (None for "rbc": null or absent). The
    statistics come with it, as they do from GetStats."""
    stats = _query_stats(req.get("stats"), "stats", names)
    local = _query_stats(req.get("local"), "local", names)
    v = req.get("rbc")
    if v is None:
        return None
    obj = _object(v, "rbc")
    _known(obj, "rbc", _RBC_FIELDS)
    given = _partition_map(_required(obj, "rbc", "counts"), "rbc.counts", names)
    counts = {n: 0 for n in names}
    counts.update({n: _count(c, f"rbc.counts.{n}") for n, c in given.items()})
    ints = {k: _count(obj[k], f"rbc.{k}") for k in _RBC_COUNTS if k in obj}
    pcts = {k: _number(obj[k], f"rbc.{k}") for k in _RBC_PCTS if k in obj}
    return RBCSnapshot(counts=counts, stats=stats, local=local, **ints, **pcts)


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
            try:
                req = json.loads(line, parse_constant=_no_constant)
            except ValueError as e:
                raise RequestError(f"request: not JSON ({e})") from None
            req = _object(req, "request")
            op = _required(req, "", "op")
            if op == "open":
                return self._open(req)
            if op == "tick":
                return self._tick(req)
            if op == "close":
                _known(req, "", _CLOSE_FIELDS)
                self.closed = True
                return {"ok": True}
            raise RequestError(f"op: {format_value(op)} is not one of {', '.join(OPS)}")
        except RequestError as e:
            log.warning("event=bad_request error=%r", str(e))
            return {"ok": False, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - one request's failure must not end the server
            log.exception("event=request_failed")
            return {"ok": False, "error": f"request failed: {type(e).__name__}: {e}"}

    def close(self) -> None:
        """Close every timeline."""
        for app in self.apps.values():
            if app.timeline is not None:
                app.timeline.close()
        self.apps.clear()

    def _open(self, req: dict[str, Any]) -> dict[str, Any]:
        _known(req, "", _OPEN_FIELDS)
        topology = _string(_required(req, "", "topology"), "topology")
        app_id = _string(_required(req, "", "app_server"), "app_server")
        path = req.get("timeline")
        if path is not None:
            path = _string(path, "timeline")
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
        return {
            "ok": True,
            "app_server": cfg.app_server,
            "policy": policy.name,
            "needs_rbc": policy.needs_rbc,
            "budget_bytes": cfg.budget_bytes,
            "floor_bytes": s.min_partition_mb * MIB,
            "interval_s": s.interval,
            "partitions": [{"name": p.name, "backend_id": p.backend_id, "initial_mb": p.initial_mb}
                           for p in cfg.partitions],
            "budget_mb": cfg.budget_mb,
            "rbc_window_s": cfg.rbc_window,
        }

    def _tick(self, req: dict[str, Any]) -> dict[str, Any]:
        _known(req, "", _TICK_FIELDS)
        app_id = _string(_required(req, "", "app_server"), "app_server")
        app = self.apps.get(app_id)
        if app is None:
            opened = ", ".join(sorted(self.apps)) or "none"
            raise RequestError(f"app_server: {format_value(app_id)} is not open (open: {opened}; "
                               'send {"op":"open",...} first)')
        now = _number(_required(req, "", "now"), "now")
        samples: dict[str, PartitionSample] = {}
        hit_ratio: dict[str, float | None] = {}
        for n, v in _partition_map(_required(req, "", "partitions"), "partitions", app.names).items():
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
                limits_mb=d.limits_mb, used=d.used, rbc=snap, eligible=d.eligible, notes=d.notes)
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
        return {"ok": True, "tick": tick, "targets": d.targets, "limits_mb": d.limits_mb,
                "eligible": d.eligible, "notes": d.notes}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _answer(out: IO[str], answer: dict[str, Any]) -> None:
    out.write(json.dumps(answer, separators=(",", ":")) + "\n")
    out.flush()


def serve(inp: IO[bytes], out: IO[str]) -> int:
    """Answer requests from inp on out until close or the end of inp; 0 then, 1 when
    out is closed by the reader. Blank lines are skipped."""
    server = PolicyServer()
    log.info("event=policy_server_start pid=%d", os.getpid())
    try:
        for raw in iter(inp.readline, b""):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                _answer(out, {"ok": False, "error": f"request: not UTF-8 ({e.reason} at byte {e.start})"})
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
