"""The configuration one controller process runs with: its app server's block of the
topology (docs/topology.md) with the command-line overrides applied, validated by the
contract (schema/topology.schema.yaml) and by the chosen policy's parameter model.

Every setting of the ``controller:`` block can be overridden by the flag of the same
name (``--min-partition-mb`` for ``min_partition_mb``); a flag is applied to the
document before it is validated, so it goes through the same rules, and an error it
causes names it. Nothing is contacted or changed before the configuration is valid.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from robinhood_common import topology as topo
from robinhood_common.contract import ConfigError as ContractError
from robinhood_common.contract import load_yaml, read_config_file, read_yaml

from . import policies
from .plan import MIB


class ConfigError(ValueError):
    """An invalid setting; the message names the field and the value. CLI exit status 2."""


#: Flag → field of the controller block (the flags robinhood-controller accepts).
SETTING_FLAGS: dict[str, str] = {
    "interval": "--interval",
    "min_partition_mb": "--min-partition-mb",
    "metrics": "--metrics",
    "dry_run": "--dry-run",
    "rbc_timeout": "--rbc-timeout",
    "shrink_budget": "--shrink-budget",
    "used_source": "--used-source",
    "memcached_timeout": "--memcached-timeout",
}


@dataclass(frozen=True)
class Overrides:
    """Command-line overrides: controller settings, the policy and its parameters."""

    settings: dict[str, Any]
    """Field → value (None: not given). ``metrics: ""`` removes the endpoint."""
    policy: str | None = None
    """--policy: replaces the policy (and its parameters)."""
    policy_params: dict[str, Any] | None = None
    """--policy-param KEY=VALUE: parameters added to the policy."""


@dataclass(frozen=True)
class PartitionConfig:
    """One partition the controller manages."""

    name: str
    addr: str
    backend_id: int
    initial_mb: int
    store: str = "memcached"
    """"memcached" or "redis" (partition.py)."""
    user: str | None = None
    """Redis: the ACL user to authenticate as (None: the default user)."""
    password: str | None = dataclasses.field(default=None, repr=False)
    """Redis: the password read from the partition's password_file (None: no AUTH)."""


@dataclass(frozen=True)
class ControllerConfig:
    """Everything one controller process runs with, resolved and validated."""

    app_server: str
    where: str
    """The app server's path in the topology (app_servers[i]), for messages."""
    cache_mode: str
    budget_mb: int
    partitions: tuple[PartitionConfig, ...]
    shared_cache: str
    rbc_addr: str
    rbc_window: float
    """The RBC window, seconds (rbc_server.window: the one window setting)."""
    settings: topo.Controller
    policy_params: policies.Params
    auth: topo.Auth | None = None
    """The topology's auth block (paths resolved): the controller calls the RBC server
    with its app server's token and protects its /metrics with the servers' file."""
    tls: topo.TLS | None = None
    """The topology's tls block (paths resolved)."""
    slo: topo.SLO | None = None
    """The topology's slo block (the deployment's request P99 objective), if any."""
    declared: Mapping[str, topo.Limits] = dataclasses.field(default_factory=dict)
    """Per partition, its backend's limits as the topology declares them."""
    app_servers: int = 1
    """The topology's app servers with partitioned caches."""
    backend_timeout_s: float = 4.0
    """The app server's backend_timeout, seconds."""

    @property
    def token_file(self) -> str | None:
        """The controller's own token file: its app server's (auth.token with {id})."""
        return self.auth.token_file(self.app_server) if self.auth else None

    @property
    def budget_bytes(self) -> int:
        """The cache budget in bytes."""
        return self.budget_mb * MIB

    @property
    def policy(self) -> str:
        """The allocation policy's name."""
        return self.settings.policy.name

    @property
    def shrink_budget(self) -> float:
        """The per-tick shrink time budget in seconds (half the interval unless set)."""
        s = self.settings
        return s.shrink_budget if s.shrink_budget is not None else s.interval / 2

    def initial_mb(self) -> dict[str, int]:
        """The configured allocation (what the static policy keeps), in MB."""
        return {p.name: p.initial_mb for p in self.partitions}

    def backend_names(self) -> dict[int, str]:
        """Backend id → partition name, to map RBC snapshots."""
        return {p.backend_id: p.name for p in self.partitions}

    def context(self) -> policies.PolicyContext:
        """What the policy is built with."""
        return policies.PolicyContext(
            budget_bytes=self.budget_bytes,
            configured={n: mb * MIB for n, mb in self.initial_mb().items()},
            floor_bytes=self.settings.min_partition_mb * MIB,
            app_server=self.app_server,
            run=self.settings.run,
            slo=self.slo,
            window_s=self.rbc_window,
            app_servers=self.app_servers,
            backend_timeout_s=self.backend_timeout_s,
            declared=dict(self.declared),
        )

    def build_policy(self) -> policies.AllocationPolicy:
        """The configured allocation policy, built with its parameters and
        :meth:`context` (PolicyError when it cannot be built)."""
        return policies.build(self.settings.policy.name, self.settings.policy.params(), self.context())


def parse_param(text: str) -> tuple[str, Any]:
    """KEY=VALUE of --policy-param; the value is read as YAML (0.02, true, text)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--policy-param: {text!r} is not KEY=VALUE")
    try:
        return key, load_yaml(value)
    except yaml.YAMLError:
        return key, value


def apply_overrides(doc: dict[str, Any], app_id: str, ov: Overrides) -> tuple[int, dict[str, str]]:
    """Put the overrides into the app server's controller block of a raw topology
    document; returns the app server's index and which path each flag set."""
    apps = doc.get("app_servers") if isinstance(doc, dict) else None
    if not isinstance(apps, list):
        raise ConfigError(f"--id: {app_id!r} is not in app_servers (the topology has none)")
    idx = next((i for i, a in enumerate(apps) if isinstance(a, dict) and a.get("id") == app_id), None)
    if idx is None:
        known = ", ".join(str(a.get("id")) for a in apps if isinstance(a, dict)) or "none"
        raise ConfigError(f"--id: {app_id!r} is not in app_servers (known: {known})")
    app = apps[idx]
    ctl = app.get("controller")
    if not isinstance(ctl, dict):
        ctl = {}
        app["controller"] = ctl
    where = f"app_servers[{idx}].controller"
    flags: dict[str, str] = {}
    for field, value in ov.settings.items():
        if value is None:
            continue
        flags[f"{where}.{field}"] = SETTING_FLAGS[field]
        if field == "metrics" and value == "":
            ctl.pop("metrics", None)
        else:
            ctl[field] = value
    if ov.policy is not None:
        ctl["policy"] = {"name": ov.policy}
        flags[f"{where}.policy"] = "--policy"
    if ov.policy_params:
        block = ctl.get("policy")
        if isinstance(block, str) or block is None:
            block = {"name": block} if block else {}
        block = dict(block)
        block.update(ov.policy_params)
        ctl["policy"] = block
        for k in ov.policy_params:
            flags[f"{where}.policy.{k}"] = "--policy-param"
    return idx, flags


def _annotate(path: str, flags: dict[str, str]) -> str:
    for p, flag in flags.items():
        if path == p or path.startswith(p + ".") or p.startswith(path + "."):
            return f"{path} (from {flag})"
    return path


def _validated(doc: Any, memo: dict[str, topo.Topology] | None) -> topo.Topology:
    """topo.from_document, remembered in memo by the document's content: validating
    a topology (its contract's rules) takes seconds at the paper's scale, and the
    simulator's policy server opens each of its app servers from the same file."""
    if memo is None:
        return topo.from_document(doc)
    # Tagged with the type, so a YAML date and the string it prints as differ.
    key = json.dumps(doc, sort_keys=True, default=lambda o: f"<{type(o).__name__}>{o!r}")
    t = memo.get(key)
    if t is None:
        t = memo[key] = topo.from_document(doc)
    return t


def resolve_document(doc: Any, app_id: str, ov: Overrides | None = None,
                     folder: Path | None = None, memo: dict[str, topo.Topology] | None = None) -> ControllerConfig:
    """The configuration of app server ``app_id``'s controller from a raw topology
    document (it is modified by the overrides); relative paths of the auth and tls
    blocks are relative to folder (the topology file's; default: the working folder).
    memo, when given, remembers validated documents (the topology is immutable)."""
    ov = ov or Overrides(settings={})
    idx, flags = apply_overrides(doc, app_id, ov)
    try:
        t = _validated(doc, memo).resolve_files(folder or Path("."))
    except ContractError as e:
        raise ConfigError(f"{_annotate(e.path, flags)}: {e.message}") from None
    app = t.app_servers[idx]
    where = f"app_servers[{idx}]"
    pol = app.controller.policy
    try:
        cls = policies.get(pol.name)
        params = policies.registry.validate_params(pol.name, pol.params())
    except policies.PolicyError as e:
        path, _, msg = str(e).partition(": ")
        full = f"{where}.controller.policy.{path}"
        raise ConfigError(f"{_annotate(full, flags)}: {msg}") from None
    parts: list[PartitionConfig] = []
    if app.cache_mode == "partitioned":
        ids = {b.name: b.id for b in t.backends}
        initial = app.initial_allocation_mb()
        for n in app.partition_names():
            p = app.partitions[n]
            try:
                password = p.password()
            except ContractError as e:
                raise ConfigError(f"{where}.partitions.{n}.{e.path}: {e.message}") from None
            parts.append(PartitionConfig(name=n, addr=p.endpoint, backend_id=ids[n], initial_mb=initial[n],
                                         store=p.store, user=p.user, password=password))
        if cls.needs_rbc and not t.rbc_server.grpc:
            raise ConfigError(f"rbc_server.grpc: an address is required by the {pol.name} policy (it has none)")
    if app.controller.run is not None:
        try:  # a start file the testbed has not written yet is fine; one that is no such file is not
            app.controller.run.start_time()
        except ContractError as e:
            raise ConfigError(f"{where}.controller.run.{e.path}: {e.message}") from None
    return ControllerConfig(
        app_server=app.id, where=where, cache_mode=app.cache_mode, budget_mb=app.cache_budget_mb,
        partitions=tuple(parts), shared_cache=app.shared_cache or "", rbc_addr=t.rbc_server.grpc or "",
        rbc_window=t.rbc_server.window, settings=app.controller, policy_params=params,
        auth=t.auth, tls=t.tls, slo=t.slo,
        declared={b.name: b.limits for b in t.backends if b.name in {p.name for p in parts}},
        app_servers=max(1, sum(1 for a in t.app_servers if a.cache_mode == "partitioned")),
        backend_timeout_s=app.backend_timeout,
    )


def load(path: str | Path, app_id: str, ov: Overrides | None = None,
         memo: dict[str, topo.Topology] | None = None) -> ControllerConfig:
    """Read a topology file and resolve app server ``app_id``'s controller; ConfigError
    names the file and the field. memo: see resolve_document."""
    p = Path(path)
    try:
        text = read_config_file(p)
        doc = read_yaml(text, "topology")
    except OSError as e:
        raise ConfigError(f"topology: cannot read {p}: {e.strerror}") from None
    except ContractError as e:
        raise ConfigError(f"topology {p}: {e}") from None
    try:
        return resolve_document(doc, app_id, ov, p.parent, memo)
    except ConfigError as e:
        raise ConfigError(f"topology {p}: {e}") from None
