"""The topology file (docs/topology.md), read the way the Go loader reads it.

`topology/topology.go` is the reference; this module enforces the same rules so that a
file the Go components accept is accepted here and a file they reject is rejected here
with a message naming the field and the value. Unknown fields are errors at every level.
Each app server's `controller:` block is validated strictly by
:class:`robinhood_controller.config.ControllerSettings`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from .durations import parse_duration

MAX_BACKENDS = 1024
"""Backend ids are 0 … MAX_BACKENDS-1 (SPEC §3)."""

MEMCACHED_MIN_MB = 8
"""The smallest limit memcached's cache_memlimit accepts (MEMLIMIT_TOO_SMALL below it)."""

CACHE_MODES = ("partitioned", "shared", "none")
BACKEND_TYPES = ("kv", "sql", "compute")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class TopologyError(ValueError):
    """An invalid topology: the message names the field and the value."""


def q(value: Any) -> str:
    """Quote a value the way Go's %q does for strings, so messages match the Go loader."""
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _partition_short_form(v: Any) -> Any:
    return {"addr": v} if isinstance(v, str) else v


def _duration(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return parse_duration(v)
        except ValueError:
            pass
    raise ValueError("is not a duration (use e.g. 500ms, 2s)")


Seconds = Annotated[float, BeforeValidator(_duration)]
OptStr = Annotated[str, BeforeValidator(lambda v: "" if v is None else v)]
"""A string where YAML null means empty, as Go decodes null into a string field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RBCServer(_Strict):
    """The RBC server's addresses."""

    grpc: OptStr = ""
    http: OptStr = ""


class Replica(_Strict):
    """One process serving a backend."""

    grpc: OptStr = ""
    http: OptStr = ""


class Backend(_Strict):
    """One backend service."""

    id: int
    name: str
    type: str
    replicas: list[Replica] = Field(default_factory=list)


class Partition(_Strict):
    """One backend's memcached instance on an application server."""

    addr: OptStr = ""
    initial_mb: int = 0


class AppServer(_Strict):
    """One application server and its cache."""

    id: str
    http: OptStr = ""
    cache_mode: OptStr = ""
    cache_budget_mb: int = 0
    partitions: dict[str, Annotated[Partition, BeforeValidator(_partition_short_form)]] = Field(
        default_factory=dict
    )
    shared_cache: OptStr = ""
    request_timeout: Seconds = 2.0
    backend_timeout: Seconds = 1.0
    controller: dict[str, Any] | None = None
    dispatch: dict[str, Any] | None = None

    def partition_names(self) -> list[str]:
        """Partition (backend) names in sorted order."""
        return sorted(self.partitions)

    def initial_allocation_mb(self) -> dict[str, int]:
        """The configured allocation in MB: `initial_mb` where given; the partitions
        without it share the rest of `cache_budget_mb` evenly (largest remainder, ties
        to the name that sorts first). The result may not sum to the budget when every
        partition has an explicit `initial_mb`; the controller checks that."""
        names = self.partition_names()
        out = {n: self.partitions[n].initial_mb for n in names}
        free = [n for n in names if out[n] == 0]
        if free:
            rest = self.cache_budget_mb - sum(out.values())
            base, extra = divmod(max(rest, 0), len(free))
            for i, n in enumerate(free):
                out[n] = base + (1 if i < extra else 0)
        return out


class Topology(_Strict):
    """A whole deployment."""

    rbc_server: RBCServer = Field(default_factory=RBCServer)
    backends: list[Backend] = Field(default_factory=list)
    app_servers: list[AppServer] = Field(default_factory=list)

    def app_server(self, app_id: str) -> AppServer:
        """The app server with this id; TopologyError naming the known ids otherwise."""
        for a in self.app_servers:
            if a.id == app_id:
                return a
        known = ", ".join(q(a.id) for a in self.app_servers) or "none"
        raise TopologyError(f"--app-server: {q(app_id)} is not in app_servers (known: {known})")

    def backend_ids(self) -> dict[int, str]:
        """Backend id → name."""
        return {b.id: b.name for b in self.backends}

    def validate_rules(self) -> None:
        """The invariants of topology.go's Validate, with the same messages."""
        if not self.backends:
            raise TopologyError("backends: at least one backend is required")
        ids: dict[int, str] = {}
        names: set[str] = set()
        for i, b in enumerate(self.backends):
            where = f"backends[{i}]"
            if not _NAME_RE.match(b.name):
                raise TopologyError(
                    f"{where}.name: {q(b.name)} must be 1-64 characters of letters, digits, '_', '.', '-'"
                )
            if not 0 <= b.id < MAX_BACKENDS:
                raise TopologyError(f"{where}.id: {b.id} is out of range (0..{MAX_BACKENDS - 1})")
            if b.id in ids:
                raise TopologyError(f"{where}.id: {b.id} is already used by backend {q(ids[b.id])}")
            if b.name in names:
                raise TopologyError(f"{where}.name: {q(b.name)} is used twice")
            ids[b.id] = b.name
            names.add(b.name)
            if b.type not in BACKEND_TYPES:
                raise TopologyError(f"{where}.type: {q(b.type)} is not one of kv, sql, compute")
            if not b.replicas:
                raise TopologyError(f"{where}.replicas: backend {q(b.name)} needs at least one replica")
            for j, r in enumerate(b.replicas):
                if not r.grpc:
                    raise TopologyError(f"{where}.replicas[{j}].grpc: address is required")
        seen: set[str] = set()
        for i, a in enumerate(self.app_servers):
            where = f"app_servers[{i}]"
            if not _NAME_RE.match(a.id):
                raise TopologyError(
                    f"{where}.id: {q(a.id)} must be 1-64 characters of letters, digits, '_', '.', '-'"
                )
            if a.id in seen:
                raise TopologyError(f"{where}.id: {q(a.id)} is used twice")
            seen.add(a.id)
            if not a.http:
                raise TopologyError(f"{where}.http: address is required")
            if a.request_timeout <= 0 or a.backend_timeout <= 0:
                raise TopologyError(f"{where}: timeouts must be positive")
            if a.cache_mode == "partitioned":
                for b in self.backends:
                    if b.name not in a.partitions:
                        raise TopologyError(
                            f"{where}.partitions: no partition for backend {q(b.name)} "
                            "(partitioned mode needs one per backend)"
                        )
                total = 0
                for name in a.partition_names():
                    p = a.partitions[name]
                    if name not in names:
                        raise TopologyError(f"{where}.partitions.{name}: no backend is named {q(name)}")
                    if not p.addr:
                        raise TopologyError(f"{where}.partitions.{name}: address is required")
                    if p.initial_mb != 0 and p.initial_mb < MEMCACHED_MIN_MB:
                        raise TopologyError(
                            f"{where}.partitions.{name}.initial_mb: {p.initial_mb} is below "
                            f"memcached's minimum of {MEMCACHED_MIN_MB} MB"
                        )
                    total += p.initial_mb
                if a.cache_budget_mb < MEMCACHED_MIN_MB * len(a.partitions):
                    raise TopologyError(
                        f"{where}.cache_budget_mb: {a.cache_budget_mb} is too small for "
                        f"{len(a.partitions)} partitions of at least {MEMCACHED_MIN_MB} MB"
                    )
                if total > a.cache_budget_mb:
                    raise TopologyError(
                        f"{where}.partitions: initial_mb values sum to {total}, more than "
                        f"cache_budget_mb {a.cache_budget_mb}"
                    )
            elif a.cache_mode == "shared":
                if not a.shared_cache:
                    raise TopologyError(f"{where}.shared_cache: address is required in shared mode")
                if a.cache_budget_mb < MEMCACHED_MIN_MB:
                    raise TopologyError(
                        f"{where}.cache_budget_mb: {a.cache_budget_mb} is below memcached's "
                        f"minimum of {MEMCACHED_MIN_MB} MB"
                    )
            elif a.cache_mode == "none":
                pass
            else:
                raise TopologyError(
                    f"{where}.cache_mode: {q(a.cache_mode)} is not one of partitioned, shared, none"
                )


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("function-"):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(document)"


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line for the first error of a pydantic ValidationError: field path, value,
    and what is wrong."""
    e = err.errors(include_url=False)[0]
    field = _loc(tuple(e["loc"]))
    if prefix:
        field = f"{prefix}.{field}" if field != "(document)" else prefix
    kind = e["type"]
    if kind == "extra_forbidden":
        return f"{field}: unknown field (value {e['input']!r})"
    if kind == "missing":
        return f"{field}: is required"
    msg = str(e["msg"])
    if kind == "value_error":
        return f"{field}: {e['input']!r} {msg.removeprefix('Value error, ')}"
    return f"{field}: {e['input']!r}: {msg}"


def parse(text: str) -> Topology:
    """Parse and validate a topology document (YAML text)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TopologyError(f"not valid YAML: {e}") from None
    if doc is None:
        raise TopologyError("empty document")
    if not isinstance(doc, dict):
        raise TopologyError(f"(document): expected a mapping, got {type(doc).__name__}")
    try:
        top = Topology.model_validate(doc)
    except ValidationError as e:
        raise TopologyError(format_validation_error(e)) from None
    top.validate_rules()
    return top


def load(path: str | Path) -> Topology:
    """Read and validate a topology file; TopologyError names the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise TopologyError(f"topology: cannot read {p}: {e.strerror}") from None
    try:
        return parse(text)
    except TopologyError as e:
        raise TopologyError(f"topology {p}: {e}") from None
