"""The experiment file as typed values (docs/testbed.md), read through the contract
(``schema/experiment.schema.yaml``). Durations are seconds."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from .contract import ConfigError, Contract, read_config_file, read_yaml
from .split import fill_rest
from .topology import (
    SLO,
    AllocationPolicy,
    ComputeOptions,
    Controller,
    Dispatch,
    KVOptions,
    Limits,
    RBCServer,
    SQLOptions,
)

SCHEMA = "experiment.schema.yaml"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExperimentBackend(_Model):
    name: str
    type: str
    replicas: int
    limits: Limits
    kv: KVOptions | None = None
    sql: SQLOptions | None = None
    compute: ComputeOptions | None = None


class Cache(_Model):
    app_servers: int
    budget_mb: int
    initial_mb: dict[str, int]
    app_initial_mb: list[dict[str, int]]
    store: str
    memcached_args: list[str]


class Stream(_Model):
    """One backend's real key stream (``trace.synth.streams``; tracegen import)."""

    file: str
    format: str | None = None
    skip: int = 0


class Synth(_Model):
    profile: str
    rate: float
    params: dict[str, Any]
    #: Real key streams by backend name; None: every key is synthetic.
    streams: dict[str, Stream] | None = None


class Trace(_Model):
    synth: Synth | None = None
    file: str | None = None


class Scenario(_Model):
    file: str | None = None
    seed: int | None = None
    events: list[dict[str, Any]] | None = None


class SimSettings(_Model):
    generate: bool = False
    sample: float | None = None
    request_sample: float | None = None
    apps: int | None = None


class Compare(_Model):
    cache_modes: list[str]
    policies: list[AllocationPolicy]
    dispatch: list[Dispatch]


class Experiment(_Model):
    """An experiment file, validated; ``base_dir`` is its directory."""

    name: str
    description: str
    seed: int
    duration: float
    backends: list[ExperimentBackend]
    cache: Cache
    controller: Controller
    rbc_server: RBCServer
    slo: SLO
    trace: Trace
    scenario: Scenario | None = None
    compare: Compare
    sim: SimSettings = SimSettings()
    request_timeout: float
    backend_timeout: float
    #: The experiment file's directory (paths in it are relative to this).
    base_dir: str = "."
    #: The normalized document (durations as strings), for writing it back.
    document: dict[str, Any] = {}

    def path(self, p: str) -> Path:
        """A path of the experiment file, resolved against its directory."""
        q = Path(p)
        return q if q.is_absolute() else Path(self.base_dir) / q

    def initial_allocation(self, app: int | None = None) -> dict[str, int]:
        """Initial MB per backend: ``cache.initial_mb`` (or app server ``app``'s entry of
        ``cache.app_initial_mb``), the rest of the budget split evenly (largest
        remainder). ConfigError names the entry when it names an unknown backend or
        does not fit the budget."""
        names = [b.name for b in self.backends]
        fixed, where = self.cache.initial_mb, "cache.initial_mb"
        if app is not None and self.cache.app_initial_mb:
            fixed, where = self.cache.app_initial_mb[app], f"cache.app_initial_mb[{app}]"
            for k in fixed:
                if k not in names:
                    raise ConfigError(where, f"no backend of this experiment is named {k!r}")
            total = sum(fixed.values())
            if total > self.cache.budget_mb or (len(fixed) == len(names) and total != self.cache.budget_mb):
                raise ConfigError(where, f"sums to {total} MB; the budget is {self.cache.budget_mb} MB")
        return fill_rest(fixed, names, self.cache.budget_mb)

    def scenario_data(self) -> dict[str, Any] | None:
        """The scenario as a mapping {seed?, events} (read from its file when given as
        one); ConfigError when the file cannot be read."""
        if self.scenario is None:
            return None
        if self.scenario.file is None:
            out: dict[str, Any] = {"events": self.scenario.events or []}
            if self.scenario.seed is not None:
                out["seed"] = self.scenario.seed
            return out
        p = self.path(self.scenario.file)
        try:
            return read_yaml(read_config_file(p), "scenario")  # type: ignore[no-any-return]
        except OSError as e:
            raise ConfigError("scenario.file", f"cannot read {p}: {e.strerror}") from None
        except ConfigError as e:
            raise ConfigError("scenario.file", f"{p}: {e.message}") from None


def from_document(doc: Any, base_dir: str = ".") -> Experiment:
    """Validate an experiment document and return it typed."""
    norm, typed = Contract.packaged().read_typed(SCHEMA, doc)
    return Experiment.model_validate({**typed, "base_dir": base_dir, "document": norm})


class ExperimentError(ValueError):
    """An experiment that cannot be read or run: the message names the field."""


def load(path: str | Path) -> Experiment:
    """Read and validate an experiment file; ExperimentError names the file and field."""
    p = Path(path)
    try:
        text = read_config_file(p)
    except OSError as e:
        raise ExperimentError(f"{p}: {e.strerror}") from None
    except ConfigError as e:
        raise ExperimentError(f"{p}: {e}") from None
    try:
        exp = from_document(read_yaml(text, "experiment"), str(p.resolve().parent))
    except ConfigError as e:
        raise ExperimentError(f"experiment {p}: {e}") from None
    if exp.trace.file is not None and not exp.path(exp.trace.file).exists():
        raise ExperimentError(f"experiment {p}: trace.file: {exp.path(exp.trace.file)} does not exist")
    streams = exp.trace.synth.streams if exp.trace.synth is not None else None
    for name, stream in (streams or {}).items():
        if not exp.path(stream.file).exists():
            raise ExperimentError(f"experiment {p}: trace.synth.streams.{name}.file: {exp.path(stream.file)} does not exist")
    try:
        exp.scenario_data()
    except ConfigError as e:
        raise ExperimentError(f"experiment {p}: {e}") from None
    return exp
