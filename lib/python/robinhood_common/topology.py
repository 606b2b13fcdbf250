"""The topology file as typed values (docs/topology.md).

:func:`load` and :func:`parse` read a topology through the contract reader
(:mod:`robinhood_common.contract`), so every rule and default comes from
``schema/topology.schema.yaml``; the models below only give the normalized document
types. Durations are seconds (floats). The models have no defaults of their own: a
test checks that their fields are exactly the schema's properties.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from .contract import ConfigError, Contract, read_config_file, read_yaml
from .files import read_text_bounded
from .split import fill_rest

SCHEMA = "topology.schema.yaml"
#: The largest password_file read (the Go twin: lib/config.MaxPasswordFileBytes).
MAX_PASSWORD_FILE_BYTES = 64 << 10
#: The largest run start file read: it holds one number.
MAX_START_FILE_BYTES = 4096


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RBCServer(_Model):
    """The RBC server's addresses and window settings."""

    grpc: str | None = None
    http: str | None = None
    window: float
    stats_retention: float
    ring_size: int
    low_pct: float
    high_pct: float


class Replica(_Model):
    """One process serving a backend."""

    grpc: str
    http: str | None = None


class Limits(_Model):
    """A backend's capacity model."""

    workers: int
    rate: float
    extra_latency_ms: float
    hiccup_prob: float
    hiccup_ms: float
    cost_ms: float
    stall_prob: float
    stall_ms: float
    queue_limit: int
    purge_delay_ms: float
    purge_cost_ms: float


class KVOptions(_Model):
    redis: str | None = None
    max_bytes: int


class SQLOptions(_Model):
    db: str | None = None
    rows: int


class ComputeOptions(_Model):
    matrix_size: int


class Backend(_Model):
    """One backend service."""

    id: int
    name: str
    type: str | None = None  # None: an external backend, known by id and name only
    replicas: list[Replica] = []
    limits: Limits
    seed: int
    kv: KVOptions | None = None
    sql: SQLOptions | None = None
    compute: ComputeOptions | None = None


class Partition(_Model):
    """One backend's cache instance on an application server: a memcached (addr) or a
    Redis (redis); the schema admits exactly one."""

    addr: str | None = None
    redis: str | None = None
    password_file: str | None = None
    """Redis only: the file whose first line is the password (AUTH)."""
    user: str | None = None
    """Redis only, with password_file: the ACL user (None: the default user)."""
    initial_mb: int | None = None

    def password(self) -> str | None:
        """The first line of password_file without its line break; None without one.
        ConfigError naming the file (never the password) when it cannot be read or
        its first line is empty."""
        if not self.password_file:
            return None
        try:
            text = read_text_bounded(self.password_file, MAX_PASSWORD_FILE_BYTES)
        except OSError as e:
            raise ConfigError("password_file", f"{self.password_file}: {e.strerror or e}") from None
        line = text.split("\n", 1)[0].removesuffix("\r")
        if not line:
            raise ConfigError("password_file", f"{self.password_file}: the first line is empty")
        return line

    @property
    def store(self) -> str:
        """"memcached" or "redis"."""
        return "redis" if self.redis else "memcached"

    @property
    def endpoint(self) -> str:
        """The partition's address, whichever its store."""
        return self.redis or self.addr or ""


class Named(_Model):
    """A policy: its name and its parameters (validated by the policy)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def params(self) -> dict[str, Any]:
        """The parameters: every field but the name."""
        return dict(self.model_extra or {})


class AllocationPolicy(Named):
    name: str


class Dispatch(Named):
    policy: str


class Run(_Model):
    """The experiment run a controller is part of (set by the testbed)."""

    seconds: float | None = None
    start_file: str | None = None
    trace: str | None = None
    scenario: str | None = None
    topology: str | None = None
    oracle: str | None = None

    def start_time(self) -> float | None:
        """The run's start (Unix seconds) from start_file: None without one, before the
        testbed wrote it (no file yet, or an empty one). ConfigError naming the file when
        it is not a regular file of at most MAX_START_FILE_BYTES (a named pipe is refused
        without waiting for a writer) or does not start with a finite, non-negative
        number."""
        if not self.start_file:
            return None
        try:
            text = read_text_bounded(self.start_file, MAX_START_FILE_BYTES)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ConfigError("start_file", f"{self.start_file}: {e.strerror or e}") from None
        fields = text.split()
        if not fields:
            return None
        try:
            t = float(fields[0])
        except ValueError:
            t = math.nan
        if not (math.isfinite(t) and t >= 0):
            raise ConfigError("start_file", f"{self.start_file}: {fields[0][:40]!r} is not a Unix time (seconds)")
        return t


class Controller(_Model):
    """An app server's controller block."""

    policy: AllocationPolicy
    interval: float
    min_partition_mb: int
    metrics: str | None = None
    dry_run: bool
    rbc_timeout: float
    shrink_budget: float | None = None
    used_source: str
    memcached_timeout: float
    run: Run | None = None


class AppServer(_Model):
    """One application server and its cache."""

    id: str
    http: str | None = None  # None: an app server of the operator's own, whose controller alone is attached
    cache_mode: str
    cache_budget_mb: int
    partitions: dict[str, Partition]
    shared_cache: str | None = None
    request_timeout: float
    backend_timeout: float
    dispatch: Dispatch
    controller: Controller

    def partition_names(self) -> list[str]:
        """Partition (backend) names in sorted order."""
        return sorted(self.partitions)

    def initial_allocation_mb(self) -> dict[str, int]:
        """The configured allocation in MB: ``initial_mb`` where given, the partitions
        without it share the rest of the budget evenly (largest remainder, ties to the
        name sorting first). The schema's rules make it sum to the budget."""
        fixed = {n: p.initial_mb for n, p in self.partitions.items() if p.initial_mb is not None}
        return fill_rest(fixed, self.partition_names(), self.cache_budget_mb)


class Auth(_Model):
    """Bearer tokens: the servers' token file and the callers' own ({id} in it)."""

    tokens: str
    token: str

    def token_file(self, caller: str) -> str:
        """The token file of caller (its id replaces {id})."""
        return self.token.replace("{id}", caller)


class TLS(_Model):
    """TLS for every listener: the CA clients verify with, the servers' certificate."""

    ca: str
    cert: str
    key: str
    client_auth: bool


class SLO(_Model):
    """The request P99 objective and how its series is judged (the schema's $defs/slo,
    shared by the experiment file and the topology), seconds."""

    latency: float
    step: float
    window: float
    warmup: float


class Topology(_Model):
    """A whole deployment."""

    rbc_server: RBCServer
    backends: list[Backend]
    app_servers: list[AppServer]
    auth: Auth | None = None
    tls: TLS | None = None
    slo: SLO | None = None

    def resolve_files(self, folder: Path) -> Topology:
        """The topology with the relative paths of its auth and tls blocks and of its
        partitions' password files made relative to folder (the topology file's)."""
        def rel(v: str) -> str:
            return v if Path(v).is_absolute() else str(folder / v)
        upd: dict[str, Any] = {}
        if self.auth is not None:
            upd["auth"] = self.auth.model_copy(update={"tokens": rel(self.auth.tokens), "token": rel(self.auth.token)})
        if self.tls is not None:
            upd["tls"] = self.tls.model_copy(update={k: rel(getattr(self.tls, k)) for k in ("ca", "cert", "key")})
        if any(p.password_file for a in self.app_servers for p in a.partitions.values()):
            upd["app_servers"] = [a.model_copy(update={"partitions": {
                n: p.model_copy(update={"password_file": rel(p.password_file)}) if p.password_file else p
                for n, p in a.partitions.items()}}) for a in self.app_servers]
        return self.model_copy(update=upd) if upd else self

    def app_server(self, app_id: str) -> tuple[int, AppServer]:
        """The index and the app server with this id; ConfigError naming the known
        ids otherwise."""
        for i, a in enumerate(self.app_servers):
            if a.id == app_id:
                return i, a
        known = ", ".join(a.id for a in self.app_servers) or "none"
        raise ConfigError("", f"no app server {app_id!r} (the topology has: {known})")

    def backend_ids(self) -> dict[int, str]:
        """Backend id → name."""
        return {b.id: b.name for b in self.backends}


def absolute_files(doc: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A copy of a topology document with the relative paths of its auth and tls blocks
    and of its partitions' password files made relative to ``folder`` (the topology
    file's), for a copy of the document written elsewhere (the testbed's run folder).
    The document is not validated here; fields that are not strings are left alone."""
    import copy

    out = copy.deepcopy(doc)

    def fix(block: Any, keys: tuple[str, ...]) -> None:
        if isinstance(block, dict):
            for k in keys:
                v = block.get(k)
                if isinstance(v, str) and v and not Path(v).is_absolute():
                    block[k] = str(folder / v)

    fix(out.get("auth"), ("tokens", "token"))
    fix(out.get("tls"), ("ca", "cert", "key"))
    for a in out.get("app_servers") or []:
        if isinstance(a, dict) and isinstance(a.get("partitions"), dict):
            for part in a["partitions"].values():
                fix(part, ("password_file",))
    return out


def from_document(doc: Any) -> Topology:
    """Validate a topology document (a mapping) and return it typed. A dispatch policy
    and its parameters, and an allocation policy's parameters, are checked against their
    declarations (schema/policies.schema.yaml, generated from the policies' files)."""
    _, typed = Contract.packaged().read_typed(SCHEMA, doc)
    return Topology.model_validate(typed)


def parse(text: str) -> Topology:
    """Parse and validate a topology document (YAML text)."""
    return from_document(read_yaml(text, "topology"))


class TopologyError(ValueError):
    """A topology that cannot be read: the message names the file and the field."""


def load(path: str | Path) -> Topology:
    """Read and validate a topology file; TopologyError names the file and field."""
    p = Path(path)
    try:
        return parse(read_config_file(p)).resolve_files(p.parent)
    except OSError as e:
        raise TopologyError(f"topology: cannot read {p}: {e.strerror}") from None
    except ConfigError as e:
        raise TopologyError(f"topology {p}: {e}") from None
