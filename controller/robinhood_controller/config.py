"""The controller's settings: the app server's `controller:` block, CLI overrides, and
the resolved configuration one controller process runs with (docs/controller.md).

Every setting lives in the topology file and can be overridden by a flag of the same
name (`--min-partition-mb` for `min_partition_mb`). Validation is strict: an unknown
field or a bad value is one ConfigError naming the field and the value, raised before
anything is contacted or changed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from .plan import MIB
from .topology import (
    MEMCACHED_MIN_MB,
    AppServer,
    Seconds,
    Topology,
    TopologyError,
)

DEFAULT_MIN_PARTITION_MB = 48
"""Default floor of a partition's limit. memcached 1.6 with its default slab settings
(-n 48, -f 1.25, 1 MB pages) has 39 slab classes, and a class always gets its first
page even above the limit and never gives its last page back to `slabs reassign`. A
partition whose objects span every size class therefore pins up to 39 MB that no shrink
can take back; 48 MB keeps a shrink to the floor always achievable with room left for
the workload's pages. Workloads with few object sizes can go lower (≥ 8)."""

_ADDR_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]*):(\d{1,5})$")


class ConfigError(ValueError):
    """An invalid setting; the message names the field and the value. CLI exit status 2."""


def is_addr(v: str) -> bool:
    """True for host:port (host may be empty or a bracketed IPv6 address)."""
    m = _ADDR_RE.match(v)
    return m is not None and int(m.group(2)) <= 65535


class ControllerSettings(BaseModel):
    """The `controller:` block of an application server. Unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    policy: str = "robinhood"
    """Allocation policy by name (robinhood | static)."""
    interval: Seconds = 5.0
    """Δ: time between ticks."""
    tax: float = 0.01
    """Fraction of every partition's allocation pooled each tick."""
    unused_gap: float = 0.30
    """A partition with limit − used > unused_gap · used is ineligible for loot."""
    min_partition_mb: int = DEFAULT_MIN_PARTITION_MB
    """No partition is taxed below this many MB."""
    metrics: str = ""
    """host:port for /metrics; empty disables the endpoint."""
    dry_run: bool = False
    """Plan, log and export but never change memcached."""
    rbc_timeout: Seconds = 1.0
    """Deadline of one GetRBC call."""
    rbc_window: Seconds | None = None
    """Window of the RBC query; default: the interval."""
    shrink_budget: Seconds | None = None
    """Time a tick may spend moving pages out of shrinking partitions; default: half the
    interval. Unfinished shrinks continue next tick."""
    used_source: Literal["malloced", "bytes"] = "malloced"
    """What u_i (used space) is: memcached's total_malloced or its bytes stat."""
    memcached_timeout: Seconds = 1.0
    """Socket timeout of one memcached command."""

    @model_validator(mode="after")
    def _ranges(self) -> ControllerSettings:
        from .policies import POLICIES

        checks: list[tuple[str, Any, bool, str]] = [
            ("policy", self.policy, self.policy in POLICIES, f"is not one of {' | '.join(sorted(POLICIES))}"),
            ("interval", self.interval, self.interval >= 0.05, "must be at least 50ms"),
            ("tax", self.tax, 0 <= self.tax <= 0.5, "must be between 0 and 0.5"),
            ("unused_gap", self.unused_gap, 0 <= self.unused_gap <= 100, "must be between 0 and 100"),
            (
                "min_partition_mb",
                self.min_partition_mb,
                self.min_partition_mb >= MEMCACHED_MIN_MB,
                f"is below memcached's minimum cache_memlimit of {MEMCACHED_MIN_MB} MB",
            ),
            ("rbc_timeout", self.rbc_timeout, self.rbc_timeout > 0, "must be positive"),
            (
                "rbc_window",
                self.rbc_window,
                self.rbc_window is None or self.rbc_window > 0,
                "must be positive",
            ),
            (
                "shrink_budget",
                self.shrink_budget,
                self.shrink_budget is None or 0 < self.shrink_budget <= self.interval,
                f"must be positive and at most the interval ({self.interval:g}s)",
            ),
            ("memcached_timeout", self.memcached_timeout, self.memcached_timeout > 0, "must be positive"),
            (
                "metrics",
                self.metrics,
                not self.metrics or is_addr(self.metrics),
                "is not a host:port address (e.g. 127.0.0.1:9100; empty disables /metrics)",
            ),
        ]
        for field, value, ok, why in checks:
            if not ok:
                raise ValueError(f"{field}: {value!r} {why}")
        return self

    @property
    def effective_rbc_window(self) -> float:
        """The RBC window in seconds (the interval unless set)."""
        return self.rbc_window if self.rbc_window is not None else self.interval

    @property
    def effective_shrink_budget(self) -> float:
        """The per-tick shrink time budget in seconds (half the interval unless set)."""
        return self.shrink_budget if self.shrink_budget is not None else self.interval / 2


@dataclass(frozen=True)
class PartitionConfig:
    """One partition the controller manages."""

    name: str
    addr: str
    backend_id: int
    initial_mb: int


@dataclass(frozen=True)
class ControllerConfig:
    """Everything one controller process runs with, resolved and validated."""

    app_server: str
    cache_mode: str
    budget_mb: int
    partitions: tuple[PartitionConfig, ...]
    shared_cache: str
    rbc_addr: str
    settings: ControllerSettings

    @property
    def budget_bytes(self) -> int:
        """The cache budget in bytes."""
        return self.budget_mb * MIB

    def initial_mb(self) -> dict[str, int]:
        """The configured allocation (what the static policy keeps), in MB."""
        return {p.name: p.initial_mb for p in self.partitions}

    def backend_names(self) -> dict[int, str]:
        """Backend id → partition name, to map RBC snapshots."""
        return {p.backend_id: p.name for p in self.partitions}


def _settings_error(e: ValidationError, where: str, from_flags: set[str]) -> ConfigError:
    err = e.errors(include_url=False)[0]
    loc = [str(x) for x in err["loc"]]
    msg = str(err["msg"]).removeprefix("Value error, ")
    field = loc[0] if loc else ""
    if not field and ":" in msg:
        field = msg.split(":", 1)[0]
    source = f" (from --{field.replace('_', '-')})" if field in from_flags else ""
    if err["type"] == "extra_forbidden":
        return ConfigError(f"{where}.{field}: unknown field (value {err['input']!r}); "
                           f"known fields: {', '.join(ControllerSettings.model_fields)}")
    if loc:
        sep = " " if err["type"] == "value_error" else ": "
        return ConfigError(f"{where}.{field}{source}: {err['input']!r}{sep}{msg}")
    return ConfigError(f"{where}.{msg}{source}")


def parse_settings(block: dict[str, Any] | None, overrides: dict[str, Any] | None = None,
                   where: str = "controller") -> ControllerSettings:
    """Validate a `controller:` block merged with CLI overrides (None values ignored)."""
    raw = dict(block or {})
    flags = {k for k, v in (overrides or {}).items() if v is not None}
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return ControllerSettings.model_validate(raw)
    except ValidationError as e:
        raise _settings_error(e, where, flags) from None


def resolve(top: Topology, app_id: str, overrides: dict[str, Any] | None = None) -> ControllerConfig:
    """The configuration of the controller of app server `app_id`.

    Checks the controller-specific rules on top of the topology's own: the block and
    overrides, the floor against the budget and the configured allocation, and the RBC
    server address the robinhood policy needs.
    """
    try:
        app = top.app_server(app_id)
    except TopologyError as e:
        raise ConfigError(str(e)) from None
    idx = top.app_servers.index(app)
    where = f"app_servers[{idx}]"
    s = parse_settings(app.controller, overrides, where=f"{where}.controller")
    parts: list[PartitionConfig] = []
    if app.cache_mode == "partitioned":
        _check_partitioned(app, s, where)
        ids = {b.name: b.id for b in top.backends}
        initial = app.initial_allocation_mb()
        parts = [
            PartitionConfig(name=n, addr=app.partitions[n].addr, backend_id=ids[n], initial_mb=initial[n])
            for n in app.partition_names()
        ]
        if s.policy == "robinhood" and not top.rbc_server.grpc:
            raise ConfigError("rbc_server.grpc: address is required by the robinhood policy (value \"\")")
    return ControllerConfig(
        app_server=app.id,
        cache_mode=app.cache_mode,
        budget_mb=app.cache_budget_mb,
        partitions=tuple(parts),
        shared_cache=app.shared_cache or "",
        rbc_addr=top.rbc_server.grpc,
        settings=s,
    )


def _check_partitioned(app: AppServer, s: ControllerSettings, where: str) -> None:
    floor = s.min_partition_mb
    n = len(app.partitions)
    if app.cache_budget_mb < floor * n:
        raise ConfigError(
            f"{where}.cache_budget_mb: {app.cache_budget_mb} is too small for {n} partitions of "
            f"min_partition_mb {floor} (lower controller.min_partition_mb, at least {MEMCACHED_MIN_MB})"
        )
    for name in app.partition_names():
        mb = app.partitions[name].initial_mb
        if mb and mb < floor:
            raise ConfigError(
                f"{where}.partitions.{name}.initial_mb: {mb} is below controller.min_partition_mb {floor}"
            )
    initial = app.initial_allocation_mb()
    for name, mb in initial.items():
        if mb < floor:
            raise ConfigError(
                f"{where}.partitions.{name}: its even share of the budget left by initial_mb values "
                f"is {mb} MB, below controller.min_partition_mb {floor}"
            )
    total = sum(initial.values())
    if total != app.cache_budget_mb:
        raise ConfigError(
            f"{where}.partitions: initial_mb values sum to {total}, not cache_budget_mb "
            f"{app.cache_budget_mb}; leave one partition without initial_mb to take the rest"
        )
