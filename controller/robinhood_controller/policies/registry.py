"""The registry of allocation policies: discovery, lookup, parameter validation."""
from __future__ import annotations

import importlib
import pkgutil
import types
import typing
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError
from robinhood_common.units import format_value

from .base import AllocationPolicy, PolicyContext, PolicyError

ENTRY_POINT_GROUP = "robinhood_controller.policies"
_REGISTRY: dict[str, type[AllocationPolicy]] = {}
_loaded = False
_NOT_POLICIES = {"base", "registry"}

ROLES: dict[str, str] = {
    "recommended": "the policy to run (the default of a topology that names none)",
    "paper": "the paper's algorithm, exactly as the paper has it",
    "baseline": "a fixed split or one of the paper's competitors: what a policy must beat",
    "candidate": "an improvement on trial for one round: promoted, or it leaves the product",
    "bound": ("experiments only (it reads the run's trace and scenario): the oracle, the best schedule known for the "
              "run (not a bound: an online arm's allocation that measures better becomes it), and its reactive "
              "reference"),
}
"""The roles a policy declares (AllocationPolicy.role), in the order they are listed."""


def register(cls: type[AllocationPolicy]) -> type[AllocationPolicy]:
    """Class decorator adding a policy to the registry under ``cls.name``."""
    name = getattr(cls, "name", "")
    if not name or not isinstance(name, str):
        raise TypeError(f"{cls.__qualname__}: an allocation policy needs a name")
    if not getattr(cls, "summary", ""):
        raise TypeError(f"{cls.__qualname__}: an allocation policy needs a summary")
    role = getattr(cls, "role", "")
    if role not in ROLES:
        raise TypeError(f"{cls.__qualname__}: role {role!r} is not one of {', '.join(ROLES)}")
    if role == "bound" and not cls.needs_run:
        raise TypeError(f"{cls.__qualname__}: a bound reads the run (needs_run = True)")
    other = _REGISTRY.get(name)
    if other is not None and other is not cls and (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__):
        raise TypeError(f"allocation policy {name!r} is registered twice ({other.__module__} and {cls.__module__})")
    _REGISTRY[name] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    pkg = importlib.import_module(__package__ or "robinhood_controller.policies")
    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in _NOT_POLICIES and not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def names() -> list[str]:
    """Every registered policy name, sorted."""
    _load()
    return sorted(_REGISTRY)


def ordered() -> list[str]:
    """Every registered policy name, by role (ROLES' order), then by name."""
    _load()
    order = list(ROLES)
    return sorted(_REGISTRY, key=lambda n: (order.index(_REGISTRY[n].role), n))


def with_role(role: str) -> list[str]:
    """The registered policies of one role, sorted."""
    _load()
    return sorted(n for n, c in _REGISTRY.items() if c.role == role)


def recommended() -> str:
    """The recommended policy: the default of a topology that names none. PolicyError
    when the registry holds none, or more than one (a plug-in that declares itself
    recommended must replace the built-in one's role)."""
    rec = with_role("recommended")
    if len(rec) != 1:
        raise PolicyError(f"role: the registry must hold exactly one recommended allocation policy, "
                          f"it holds {', '.join(rec) or 'none'}")
    return rec[0]


def default_arms() -> list[str]:
    """The allocation policies a comparison runs when it names none: the recommended
    one, the paper's and the baselines' fixed split (static); the shared cache is the
    comparison's other default arm."""
    return [recommended()] + [n for n in ("robinhood", "static") if n in _REGISTRY]


def get(name: str) -> type[AllocationPolicy]:
    """The policy class registered as name; PolicyError naming the known ones."""
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise PolicyError(f"name: {format_value(name)} is not one of {', '.join(names())}") from None


def _param_error(cls: type[AllocationPolicy], e: ValidationError) -> PolicyError:
    err = e.errors(include_url=False)[0]
    field = ".".join(str(x) for x in err["loc"])
    value = format_value(err.get("input"))
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        known = ", ".join(cls.Params.model_fields) or "none"
        return PolicyError(f"{field}: unknown parameter of policy {cls.name} (known: {known})")
    def bound(k: str) -> str:
        v = ctx.get(k)
        return f"{v:g}" if isinstance(v, (int, float)) else str(v)

    texts = {
        "greater_than_equal": f"is below the minimum of {bound('ge')}",
        "greater_than": f"must be above {bound('gt')}",
        "less_than_equal": f"is above the maximum of {bound('le')}",
        "less_than": f"must be below {bound('lt')}",
        "float_parsing": "is not a number", "float_type": "is not a number",
        "int_parsing": "is not an integer", "int_type": "is not an integer", "int_from_float": "is not an integer",
        "bool_parsing": "is not true or false", "bool_type": "is not true or false",
        "string_type": "is not a string",
    }
    msg = texts.get(kind, str(err["msg"]).removeprefix("Value error, "))
    return PolicyError(f"{field}: {value} {msg}")


def validate_params(name: str, params: dict[str, Any]) -> Any:
    """The policy's validated parameter model; PolicyError naming the field."""
    cls = get(name)
    try:
        return cls.Params.model_validate(params)
    except ValidationError as e:
        raise _param_error(cls, e) from None


def build(name: str, params: dict[str, Any], ctx: PolicyContext) -> AllocationPolicy:
    """The policy registered as name, built with validated parameters."""
    cls = get(name)
    return cls(validate_params(name, params), ctx)


_TYPES = {float: "number", int: "integer", bool: "boolean", str: "string"}


def declaration(info: Any) -> dict[str, Any]:
    """A parameter's declaration in the contract's terms, from its pydantic field: type
    (number, integer, boolean, string, or map of integer / number), and its bounds
    (minimum, maximum, exclusive_minimum, exclusive_maximum). An optional field is
    declared by its type: leaving it out (or null) is what None means.
    scripts/genschema.py writes these into schema/policies.schema.yaml."""
    ann = info.annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) in (
        typing.Union, types.UnionType) else [ann]
    if len(args) != 1:
        raise TypeError(f"parameter type {ann} cannot be declared (one type, optionally | None)")
    t = args[0]
    out: dict[str, Any] = {}
    if typing.get_origin(t) is dict and typing.get_args(t)[0] is str and typing.get_args(t)[1] in (int, float):
        out["type"] = "map of " + _TYPES[typing.get_args(t)[1]]
    elif t in _TYPES:
        out["type"] = _TYPES[t]
    else:
        raise TypeError(f"parameter type {ann} cannot be declared")
    for m in info.metadata:
        for attr, key, excl in (("ge", "minimum", False), ("gt", "minimum", True),
                                ("le", "maximum", False), ("lt", "maximum", True)):
            if getattr(m, attr, None) is not None:
                out[key] = getattr(m, attr)
                if excl:
                    out[f"exclusive_{key}"] = True
    return out


def describe() -> list[dict[str, Any]]:
    """Every policy, by role: name, role, whether it is the default, summary, whether it
    needs the RBC or the run, and its parameters (name, default, description, and the
    declaration: type and bounds)."""
    out = []
    rec = with_role("recommended")
    for n in ordered():
        cls = _REGISTRY[n]
        params = [{"name": f, "default": info.default, "description": info.description or "", **declaration(info)}
                  for f, info in cls.Params.model_fields.items()]
        out.append({"name": n, "role": cls.role, "default": rec == [n], "summary": cls.summary,
                    "needs_rbc": cls.needs_rbc, "needs_run": cls.needs_run,
                    "color": cls.color, "params": params})
    return out
