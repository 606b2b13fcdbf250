"""Experiment files: what to run, on which topology, with which trace and scenario.

An experiment names the topology size (backends, their types, replicas and capacity
limits, app servers, cache budget), the trace (synthesis parameters or a file), the
scenario, the SLO settings and the duration. `docs/testbed.md` describes every field;
`examples/demo.yaml` is the experiment `make demo` runs.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

#: Policies the testbed knows how to deploy. `shared` is a cache mode (one memcached
#: for all backends, LRU: the paper's OneRF policy); the others are controller policies
#: on partitioned caches; `none` runs without a cache.
CACHE_MODE_POLICIES = {"shared": "shared", "none": "none"}


class ExperimentError(ValueError):
    """An invalid experiment file; the message names the field and the value."""


def parse_duration(v: Any) -> float:
    """Seconds from "150ms", "5s", "2m", "1h" or a plain number of seconds."""
    if isinstance(v, bool):
        raise ValueError(f"{v!r} is not a duration")
    if isinstance(v, (int, float)):
        if v < 0:
            raise ValueError(f"{v!r} is negative")
        return float(v)
    if isinstance(v, str):
        m = _DURATION.match(v)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"{v!r} is not a duration (use e.g. 500ms, 5s, 2m)")


def format_duration(seconds: float) -> str:
    """The Go duration string for seconds ("1.5s", "250ms")."""
    if seconds < 1 and seconds != 0:
        return f"{round(seconds * 1000)}ms"
    return f"{seconds:g}s"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Model):
    """A backend replica's capacity model (docs/backends.md)."""

    workers: int | None = Field(default=None, ge=1)
    rate: float | None = Field(default=None, ge=0)
    extra_latency_ms: float | None = Field(default=None, ge=0)
    hiccup_prob: float | None = Field(default=None, ge=0, le=1)
    hiccup_ms: float | None = Field(default=None, ge=0)

    def flags(self) -> list[str]:
        out: list[str] = []
        for field, flag in (("workers", "--workers"), ("rate", "--rate"),
                            ("extra_latency_ms", "--extra-latency-ms"),
                            ("hiccup_prob", "--hiccup-prob"), ("hiccup_ms", "--hiccup-ms")):
            v = getattr(self, field)
            if v is not None:
                out += [flag, f"{v:g}" if isinstance(v, float) else str(v)]
        return out


class BackendSpec(_Model):
    name: str
    type: Literal["kv", "sql", "compute"]
    replicas: int = Field(default=1, ge=1, le=8)
    limits: Limits = Limits()
    #: Extra command-line flags for bin/backend (e.g. ["--rows", "20000"]).
    args: list[str] = []

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} must be 1-64 characters of letters, digits, '_', '.', '-'")
        return v


class CacheSpec(_Model):
    app_servers: int = Field(default=1, ge=1, le=8)
    budget_mb: int = Field(ge=8)
    #: Initial partition sizes in MB by backend name; the rest of the budget is split
    #: evenly. This is also what the `static` policy keeps.
    initial_mb: dict[str, int] = {}
    #: Extra memcached flags (e.g. ["-t", "1"]).
    memcached_args: list[str] = ["-t", "1"]


class ControllerSpec(_Model):
    interval: float = 5.0
    tax: float = Field(default=0.01, gt=0, lt=1)
    unused_gap: float = Field(default=0.30, ge=0)
    min_partition_mb: int | None = Field(default=None, ge=8)
    #: Any further controller settings, passed through to the topology's controller block.
    extra: dict[str, Any] = {}

    @field_validator("interval", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)


class RBCSpec(_Model):
    window: float = 5.0
    ring_size: int = Field(default=1_000_000, ge=1000)

    @field_validator("window", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)


class SLOSpec(_Model):
    latency: float = 0.150
    step: float = 5.0
    window: float = 60.0
    warmup: float = 0.0

    @field_validator("latency", "step", "window", "warmup", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)


class SynthSpec(_Model):
    profile: str = "onerf"
    rate: float = Field(gt=0)
    #: Further `tracegen synth` flags without the leading dashes, e.g. {"zipf": 0.9,
    #: "keys": 20000, "mean-size": 2048}.
    params: dict[str, Any] = {}


class TraceSpec(_Model):
    synth: SynthSpec | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> "TraceSpec":
        if (self.synth is None) == (self.file is None):
            raise ValueError("give exactly one of trace.synth and trace.file")
        return self


class Experiment(_Model):
    name: str
    description: str = ""
    seed: int = 1
    duration: float
    backends: list[BackendSpec] = Field(min_length=1)
    cache: CacheSpec
    controller: ControllerSpec = ControllerSpec()
    rbc: RBCSpec = RBCSpec()
    slo: SLOSpec = SLOSpec()
    trace: TraceSpec
    #: Path of a scenario file (relative to the experiment file), or an inline scenario.
    scenario: str | dict[str, Any] | None = None
    policies: list[str] = ["robinhood", "static", "shared"]
    #: Request timeouts of the app servers.
    request_timeout: float = 2.0
    backend_timeout: float = 1.0
    #: Where the experiment file lives (set by load()).
    base_dir: str = "."

    @field_validator("duration", "request_timeout", "backend_timeout", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} must be 1-64 characters of letters, digits, '_', '.', '-'")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Experiment":
        names = [b.name for b in self.backends]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"backends: name {sorted(dup)[0]!r} is used twice")
        for n, mb in self.cache.initial_mb.items():
            if n not in names:
                raise ValueError(f"cache.initial_mb: {n!r} is not a backend of this experiment")
            if mb < 8:
                raise ValueError(f"cache.initial_mb.{n}: {mb} is below memcached's minimum of 8 MB")
        rest = len(names) - len(self.cache.initial_mb)
        if sum(self.cache.initial_mb.values()) + 8 * rest > self.cache.budget_mb:
            raise ValueError(f"cache.budget_mb: {self.cache.budget_mb} MB cannot hold the initial "
                             f"allocation plus 8 MB for each other partition")
        if self.slo.warmup >= self.duration:
            raise ValueError(f"slo.warmup: {self.slo.warmup:g}s is not shorter than duration {self.duration:g}s")
        return self

    def path(self, p: str) -> Path:
        """A path from the experiment file, resolved against its directory."""
        q = Path(p)
        return q if q.is_absolute() else Path(self.base_dir) / q

    def initial_allocation(self) -> dict[str, int]:
        """Initial MB per backend: the configured ones, the rest split evenly (largest remainder)."""
        fixed = dict(self.cache.initial_mb)
        others = [b.name for b in self.backends if b.name not in fixed]
        left = self.cache.budget_mb - sum(fixed.values())
        out = dict(fixed)
        if others:
            base, extra = divmod(left, len(others))
            for i, n in enumerate(others):
                out[n] = base + (1 if i < extra else 0)
        return {b.name: out[b.name] for b in self.backends}

    def scenario_data(self) -> dict[str, Any] | None:
        """The scenario as a mapping (loaded from its file when given as a path)."""
        if self.scenario is None:
            return None
        if isinstance(self.scenario, dict):
            return self.scenario
        p = self.path(self.scenario)
        try:
            return yaml.safe_load(p.read_text())
        except OSError as e:
            raise ExperimentError(f"scenario: cannot read {p}: {e.strerror}") from None


def _format_error(path: str, e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    value = err.get("input")
    if err["type"] in ("missing",):
        return f"{path}: {loc}: field is required"
    if err["type"] == "extra_forbidden":
        return f"{path}: {loc}: unknown field"
    shown = "" if isinstance(value, (dict, list)) else f" (got {value!r})"
    return f"{path}: {loc}: {msg}{shown}"


def load(path: str | Path) -> Experiment:
    """Read and validate an experiment file; ExperimentError names what is wrong."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ExperimentError(f"{p}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ExperimentError(f"{p}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"{p}: an experiment is a YAML mapping")
    data.setdefault("base_dir", str(p.resolve().parent))
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as e:
        raise ExperimentError(_format_error(str(p), e)) from None
    if exp.trace.file is not None and not exp.path(exp.trace.file).exists():
        raise ExperimentError(f"{p}: trace.file: {exp.path(exp.trace.file)} does not exist")
    exp.scenario_data()  # fail early on an unreadable scenario file
    return exp
