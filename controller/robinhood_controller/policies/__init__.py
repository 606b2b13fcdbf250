"""Allocation policies: plug-ins behind one interface, one module per policy.

A policy only decides targets; it never talks to memcached or the RBC server (the
mechanism in :mod:`robinhood_controller.resize` applies whatever it decides). Each
module of this package defines one :class:`AllocationPolicy` subclass with its own
parameter model and registers it with :func:`register`; the registry imports every
module of the package (and of the ``robinhood_controller.policies`` entry-point group,
for policies in other distributions) the first time it is asked. The topology chooses
one per app server: ``controller.policy: {name: NAME, <its parameters>}``.

``robinhood-controller policies`` lists them; docs/architecture.md ("Adding a policy")
walks through writing one.
"""
from __future__ import annotations

from .base import (
    MOVE_REASONS,
    AllocationPolicy,
    Decision,
    Params,
    PartitionSample,
    PlanInput,
    PolicyContext,
    PolicyError,
    QueryStats,
)
from .registry import build, describe, get, names, register

__all__ = [
    "MOVE_REASONS", "AllocationPolicy", "Decision", "Params", "PartitionSample", "PlanInput", "PolicyContext", "PolicyError", "QueryStats",
    "build", "describe", "get", "names", "register",
]
