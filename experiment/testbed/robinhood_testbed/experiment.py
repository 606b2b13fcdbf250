"""Experiment files (read by :mod:`robinhood_common.experiment`) and the arms of a
comparison: cache mode × allocation policy × dispatch policy (docs/testbed.md, "Arms")."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any

from robinhood_common.experiment import Experiment, ExperimentError, load
from robinhood_controller import policies as allocation

__all__ = ["CACHE_MODES", "Arm", "Experiment", "ExperimentError", "arms", "dispatch_policies", "load"]

CACHE_MODES = ("partitioned", "shared", "none")


@dataclass(frozen=True)
class Arm:
    """One run of a comparison."""

    name: str
    """Its results folder and its name in tables and plots."""
    cache_mode: str
    policy: dict[str, Any] | None
    """The allocation policy block ({name, params...}); None without a partitioned cache."""
    dispatch: dict[str, Any] = field(default_factory=lambda: {"policy": "random"})
    """The dispatch block ({policy, params...})."""

    @property
    def policy_name(self) -> str | None:
        return None if self.policy is None else str(self.policy["name"])


def dispatch_policies(appserver: str) -> list[str]:
    """The dispatch policies bin/appserver has registered."""
    res = subprocess.run([appserver, "--list-dispatch-policies"], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise ExperimentError(f"{appserver} --list-dispatch-policies failed: {res.stderr.strip()}")
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def arms(exp: Experiment, cache_modes: list[str] | None = None, policies: list[dict[str, Any]] | None = None,
         dispatch: list[dict[str, Any]] | None = None, known_dispatch: list[str] | None = None) -> list[Arm]:
    """The arms of a comparison: the experiment's ``compare`` axes, or the ones given.

    Allocation policies and their parameters are checked against the controller's
    registry, dispatch policy names against ``known_dispatch`` (the app server's
    registry), before anything starts; ExperimentError names the problem.
    """
    modes = cache_modes or list(exp.compare.cache_modes)
    pols = policies if policies is not None else [p.model_dump() for p in exp.compare.policies]
    if not pols:  # the recommended policy, the paper's and the static split
        pols = [{"name": n} for n in allocation.registry.default_arms()]
    disp = dispatch if dispatch is not None else [d.model_dump() for d in exp.compare.dispatch]
    for m in modes:
        if m not in CACHE_MODES:
            raise ExperimentError(f"cache mode {m!r} is not one of {', '.join(CACHE_MODES)}")
    for p in pols:
        params = {k: v for k, v in p.items() if k != "name"}
        try:
            allocation.registry.validate_params(str(p["name"]), params)
        except allocation.PolicyError as e:
            raise ExperimentError(f"allocation policy {p['name']}: {e}") from None
    if known_dispatch is not None:
        for d in disp:
            if d["policy"] not in known_dispatch:
                raise ExperimentError(f"dispatch policy {d['policy']!r} is not one of {', '.join(known_dispatch)}")
    suffix = len(disp) > 1
    out: list[Arm] = []
    for mode in modes:
        for d in disp:
            tail = f"+{d['policy']}" if suffix else ""
            if mode == "partitioned":
                out += [Arm(f"{p['name']}{tail}", mode, dict(p), dict(d)) for p in pols]
            else:
                out.append(Arm(f"{mode}{tail}", mode, None, dict(d)))
    names = [a.name for a in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ExperimentError(f"two arms are named {dup[0]!r}: give each policy once")
    return out
