"""The reader of the configuration contract: ``schema/*.schema.yaml``.

The topology and experiment files are defined once, as JSON Schema (draft 2020-12)
written in YAML, in ``schema/`` at the top of the repository (this package carries a
generated copy; ``make schema`` refreshes it). This module reads a document against a
schema in two phases, exactly as the Go reader ``lib/config`` does, so both produce the
same normalized document and the same first error:

1. **Structure** (depth first; object properties in schema order, then map entries and
   unknown fields in sorted key order, array items in order): ``x-shorthand`` expands
   a scalar to ``{prop: scalar}``; absent (or null) properties get their ``default``;
   ``type``, ``enum``, ``pattern``, ``minLength``, ``format`` (``duration``,
   ``address``), numeric bounds, ``minItems``/``maxItems``, ``required`` and
   ``additionalProperties`` are checked. Integral floats become integers where an
   integer is asked for; numbers become floats.
2. **Rules** (the same order, a node's rules before its children's): every
   ``x-rules`` entry is a CEL expression that must be true. Its environment: ``self``
   (the node, durations as seconds), ``root`` (the document), ``key`` (the map key of
   the node, or ""), ``index`` (its array index, or -1), ``before`` (the array items
   before it, or []), and the functions ``sum(list)``, ``keys(map)`` (sorted),
   ``q(string)`` (quoted), ``num(number)``, ``dur(seconds)``, ``flatten(list of
   lists)``, ``dups(list)`` (the values occurring more than once, in the order they
   first recur), ``pluck(list of maps, field)`` (the field of each map that has it) and
   ``values(map)`` (in the order of its sorted keys). ``x-let`` names
   sub-expressions. A false rule is reported as ``PATH[.field]: message``, the
   message itself a CEL expression.

The first error ends the read; :class:`ConfigError` carries its path and message.
"""
from __future__ import annotations

import copy
import datetime
import math
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy import celtypes

from .files import FileTooLarge, read_bounded
from .units import DURATION_HINT, format_duration, format_number, format_value, parse_duration_ns

#: Keywords the readers implement; a schema using any other is rejected at load time.
KEYWORDS = frozenset({
    "$schema", "$id", "$ref", "$defs", "$comment", "title", "description", "examples",
    "type", "properties", "additionalProperties", "required", "items", "enum", "pattern",
    "minLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minItems", "maxItems", "default", "format",
    "x-shorthand", "x-rules", "x-let", "x-messages", "x-unit", "x-variants", "x-default",
})
FORMATS = ("duration", "address")
_ADDR_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]*):([0-9]{1,5})$")
_ARTICLE = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
            "number": "a number", "boolean": "true or false"}


class ConfigError(ValueError):
    """An invalid document: ``path`` names the field ("" for the document itself)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path or '(document)'}: {message}")


class SchemaError(Exception):
    """The schema itself is wrong (a bug in schema/, not in the user's file)."""


def is_address(v: str) -> bool:
    """host:port, host possibly empty or a bracketed IPv6 address, port 0-65535."""
    m = _ADDR_RE.match(v)
    return m is not None and int(m.group(2)) <= 65535


def join(path: str, key: str) -> str:
    """The path of a property or map entry below ``path`` (or of an array item, when
    ``key`` starts with ``[``: a rule's field on an array)."""
    if key.startswith("["):
        return path + key
    return f"{path}.{key}" if path else key


# -- CEL ------------------------------------------------------------------------------

def _cel_sum(xs: Any) -> Any:
    vals = list(xs)
    if any(isinstance(x, celtypes.DoubleType) for x in vals):
        return celtypes.DoubleType(sum(float(x) for x in vals))
    return celtypes.IntType(sum(int(x) for x in vals))


def _cel_keys(m: Any) -> Any:
    return celtypes.ListType(sorted(m.keys()))


def _cel_q(s: Any) -> Any:
    return celtypes.StringType(format_value(str(s)))


def _cel_num(x: Any) -> Any:
    if isinstance(x, celtypes.DoubleType):
        return celtypes.StringType(format_number(float(x)))
    return celtypes.StringType(format_number(int(x)))


def _cel_dur(x: Any) -> Any:
    return celtypes.StringType(format_duration(float(x)))


def _cel_flatten(xs: Any) -> Any:
    return celtypes.ListType([x for inner in xs for x in inner])


def _hkey(x: Any) -> Any:
    """A hashable stand-in for a CEL value: the value itself for scalars, None for
    lists and maps (compared one by one)."""
    if isinstance(x, (celtypes.ListType, celtypes.MapType)):
        return None
    return (type(x).__name__, x)


class _Seen:
    """A set of CEL values: hashed for scalars, a list for the rest."""

    def __init__(self) -> None:
        self.hashed: set[Any] = set()
        self.other: list[Any] = []

    def __contains__(self, x: Any) -> bool:
        k = _hkey(x)
        return k in self.hashed if k is not None else any(x == y for y in self.other)

    def add(self, x: Any) -> None:
        k = _hkey(x)
        if k is not None:
            self.hashed.add(k)
        else:
            self.other.append(x)


def _cel_dups(xs: Any) -> Any:
    """The values of a list that occur more than once, each once, in the order in which
    they first occur again."""
    seen, rep, out = _Seen(), _Seen(), []
    for x in xs:
        if x in seen:
            if x not in rep:
                rep.add(x)
                out.append(x)
        else:
            seen.add(x)
    return celtypes.ListType(out)


def _cel_dupindex(xs: Any) -> Any:
    """The index of the first item equal to an earlier one; -1 when all differ."""
    seen = _Seen()
    for i, x in enumerate(xs):
        if x in seen:
            return celtypes.IntType(i)
        seen.add(x)
    return celtypes.IntType(-1)


def _cel_minus(xs: Any, ys: Any) -> Any:
    """The items of xs that ys does not hold, in order."""
    drop = _Seen()
    for y in ys:
        drop.add(y)
    return celtypes.ListType([x for x in xs if x not in drop])


def _cel_overlap(lists: Any) -> Any:
    """[j, x]: the first list j holding an item x that an earlier list holds (x its first
    such item); [] when no two lists share an item. Repeats within one list do not count."""
    earlier = _Seen()
    for j, xs in enumerate(lists):
        if not isinstance(xs, celtypes.ListType):
            raise TypeError("overlap: an item is not a list")
        for x in xs:
            if x in earlier:
                return celtypes.ListType([celtypes.IntType(j), x])
        for x in xs:
            earlier.add(x)
    return celtypes.ListType([])


def _cel_pluck(xs: Any, field: Any) -> Any:
    """The field of every map in a list that has it, in order."""
    out = []
    for x in xs:
        if not isinstance(x, celtypes.MapType):
            raise TypeError("pluck: an item is not a map")
        if field in x:
            out.append(x[field])
    return celtypes.ListType(out)


def _cel_values(m: Any) -> Any:
    """A map's values in the order of its sorted keys (the order of keys())."""
    return celtypes.ListType([m[k] for k in sorted(m.keys())])


_FUNCTIONS = {"sum": _cel_sum, "keys": _cel_keys, "q": _cel_q, "num": _cel_num, "dur": _cel_dur,
              "flatten": _cel_flatten, "dups": _cel_dups, "pluck": _cel_pluck,
              "values": _cel_values, "dupindex": _cel_dupindex, "overlap": _cel_overlap,
              "minus": _cel_minus}


def _parser_cache() -> str | None:
    """Where lark keeps the CEL grammar's parse tables between processes: a folder of
    ours under the user's cache directory (never a name in a shared /tmp: the file is a
    pickle), or None (no cache) when it cannot be made."""
    import os

    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "robinhood"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if base.stat().st_uid != os.getuid():
            return None
    except (OSError, RuntimeError, KeyError):  # no home, or a read-only one
        return None
    return str(base / "cel-lark.cache")


@lru_cache(maxsize=1)
def _env() -> Any:
    """The CEL environment, made on first use. Building celpy's LALR parser takes lark
    0.6-1 s; with the parse tables cached (lark's ``cache``, keyed by the grammar, the
    options and lark's version) a process starts in a tenth of that — every policy server
    of every simulated arm does."""
    import functools

    from celpy import celparser

    cache = _parser_cache()
    made = celparser.Lark
    if cache is not None and celparser.CELParser.CEL_PARSER is None:
        celparser.Lark = functools.partial(made, cache=cache)  # type: ignore[misc]
    try:
        return celpy.Environment()
    finally:
        celparser.Lark = made  # type: ignore[misc]


def _trees_file() -> Path | None:
    cache = _parser_cache()
    if cache is None:
        return None
    from importlib import metadata

    try:
        tag = "-".join(metadata.version(d) for d in ("lark", "cel-python"))
    except metadata.PackageNotFoundError:
        return None
    return Path(cache).with_name(f"cel-trees-{tag}.pickle")


@lru_cache(maxsize=1)
def _trees() -> dict[str, Any]:
    """The parse trees of the CEL expressions compiled before, by expression (a process
    parses the schemas' hundred rules in half a second; it reads them in milliseconds)."""
    import pickle

    path = _trees_file()
    try:
        if path is not None and path.exists():
            got = pickle.loads(path.read_bytes())
            if isinstance(got, dict):
                return got
    except Exception:  # noqa: BLE001 - a damaged cache is rebuilt
        pass
    return {}


#: Expressions this process parsed that the cache file does not hold yet.
_unsaved: set[str] = set()


def _save_trees() -> None:
    """Write the parse-tree cache when this process parsed expressions it lacked (at once,
    by a rename; a failure only costs the next process the parsing)."""
    import os
    import pickle

    path = _trees_file()
    if not _unsaved or path is None:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(pickle.dumps(_trees()))
        tmp.replace(path)
        _unsaved.clear()
    except Exception:  # noqa: BLE001 - the cache is an optimisation
        tmp.unlink(missing_ok=True)


@lru_cache(maxsize=None)
def _program(expr: str) -> Any:
    try:
        env = _env()
        tree = _trees().get(expr)
        if tree is None:
            tree = env.compile(expr)
            _trees()[expr] = tree
            _unsaved.add(expr)
        return env.program(tree, functions=_FUNCTIONS)
    except Exception as e:  # noqa: BLE001 - celpy raises several kinds
        raise SchemaError(f"CEL expression {expr!r} does not compile: {e}") from None


def _substitute(expr: str, lets: dict[str, str]) -> str:
    return _substituted(expr, tuple(lets.items()))


@lru_cache(maxsize=None)
def _substituted(expr: str, lets: tuple[tuple[str, str], ...]) -> str:
    for _ in range(8):
        out = expr
        for name, sub in lets:
            out = re.sub(rf"\b{re.escape(name)}\b(?!\s*\()", f"({sub})", out)
        if out == expr:
            return out
        expr = out
    raise SchemaError(f"x-let definitions nest too deeply in {expr!r}")


# -- the schema set -------------------------------------------------------------------

class Contract:
    """A set of schema files, by ``$id`` (their file names)."""

    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        self.docs = docs
        self._eff: dict[int, dict[str, Any]] = {}
        for name, d in docs.items():
            self._audit(d, name)
        _save_trees()

    @classmethod
    def from_dir(cls, path: str | Path) -> Contract:
        """Every ``*.schema.yaml`` of a directory."""
        docs = {}
        for p in sorted(Path(path).glob("*.schema.yaml")):
            docs[p.name] = _load_schema(p.read_text())
        return cls(docs)

    @classmethod
    def packaged(cls) -> Contract:
        """The copy of ``schema/`` this package carries."""
        return _packaged()

    def _audit(self, node: Any, where: str) -> None:
        if not isinstance(node, dict):
            return
        unknown = set(node) - KEYWORDS
        if unknown:
            raise SchemaError(f"{where}: keywords {sorted(unknown)} are not implemented by the readers")
        if "format" in node and node["format"] not in FORMATS:
            raise SchemaError(f"{where}: format {node['format']!r} is not one of {FORMATS}")
        for k in ("properties", "$defs"):
            for name, sub in (node.get(k) or {}).items():
                self._audit(sub, f"{where}/{k}/{name}")
        for k in ("items", "additionalProperties"):
            if isinstance(node.get(k), dict):
                self._audit(node[k], f"{where}/{k}")
        self._audit_variants(node, where)
        for r in node.get("x-rules") or []:
            lets = node.get("x-let") or {}
            for field in ("rule", "message", "fieldExpression"):
                if field in r:
                    _program(_substitute(r[field], lets))

    def _audit_variants(self, node: dict[str, Any], where: str) -> None:
        """An x-variants keyword is {field: FIELD, cases: REF, open: BOOL}, REF naming a
        node whose properties are the cases."""
        if "x-variants" not in node:
            return
        xv = node["x-variants"]
        if not isinstance(xv, dict) or not xv.get("field") or not xv.get("cases"):
            raise SchemaError(f"{where}: x-variants needs field (a property) and cases (a $ref)")
        for k in xv:
            if k not in ("field", "cases", "open"):
                raise SchemaError(f"{where}: x-variants: {k!r} is not one of field, cases, open")
        if xv["field"] not in (node.get("properties") or {}) and "$ref" not in node:
            raise SchemaError(f"{where}: x-variants: field {xv['field']!r} is not a property")
        cases = self.resolve(xv["cases"], where.split("/")[0])
        if not isinstance(cases, dict) or not isinstance(cases.get("properties"), dict):
            raise SchemaError(f"{where}: x-variants: {xv['cases']} has no properties (the cases)")

    def resolve(self, ref: str, base: str) -> dict[str, Any]:
        """The schema node a ``$ref`` names ("#/$defs/x" or "file#/$defs/x")."""
        file, _, pointer = ref.partition("#")
        doc_name = file or base
        if doc_name not in self.docs:
            raise SchemaError(f"$ref {ref!r}: no schema {doc_name!r}")
        node: Any = self.docs[doc_name]
        for part in [p for p in pointer.split("/") if p]:
            if not isinstance(node, dict) or part not in node:
                raise SchemaError(f"$ref {ref!r}: {part!r} not found")
            node = node[part]
        return node

    def effective(self, node: dict[str, Any], base: str) -> tuple[dict[str, Any], str]:
        """The node with its ``$ref`` chain merged in (the node's own keywords win;
        rules and lets accumulate, the referenced ones first), and the file its
        nested references are relative to."""
        key = id(node)
        if key in self._eff:
            return self._eff[key], self._eff[key]["__base__"]
        if "$ref" not in node:
            out = dict(node)
            out["__base__"] = base
        else:
            ref = node["$ref"]
            file = ref.partition("#")[0] or base
            target, tbase = self.effective(self.resolve(ref, base), file)
            out = dict(target)
            for k, v in node.items():
                if k == "$ref":
                    continue
                if k == "x-rules":
                    out[k] = list(target.get(k) or []) + list(v)
                elif k == "x-let":
                    out[k] = {**(target.get(k) or {}), **v}
                else:
                    out[k] = v
            out["__base__"] = tbase
            # Lets belong to the node that defines them: the rules of either side
            # may use the lets of either side.
        self._eff[key] = out
        return out, out["__base__"]

    def read(self, target: str, doc: Any, path: str = "") -> Any:
        """Validate ``doc`` against ``target`` ("topology.schema.yaml" or
        "topology.schema.yaml#/$defs/limits") and return it normalized (defaults
        filled in, shorthands expanded). ConfigError names the first problem."""
        return self.read_typed(target, doc, path)[0]

    def read_typed(self, target: str, doc: Any, path: str = "") -> tuple[Any, Any]:
        """:meth:`read`, and the same document with every duration in seconds
        (a float): what the typed models are built from."""
        file, _, pointer = target.partition("#")
        if file not in self.docs:
            raise SchemaError(f"no schema {file!r}")
        node = self.resolve("#" + pointer, file) if pointer else self.docs[file]
        r = _Reader(self, file)
        norm, celv, walk = r.check(node, file, doc, path)
        if r.has_rules:  # a document without rules is not converted to CEL values
            r.rules(walk, celv_root=celv)
        return norm, celv

    def properties(self, target: str) -> list[str]:
        """The property names of an object definition, in schema order."""
        file, _, pointer = target.partition("#")
        node = self.resolve("#" + pointer, file) if pointer else self.docs[file]
        eff, _ = self.effective(node, file)
        return list(eff.get("properties") or {})

    def defaults(self, target: str) -> dict[str, Any]:
        """The defaults of an object definition: what it normalizes ``{}`` to."""
        return self.read(target, {})


def _load_schema(text: str) -> Any:
    """A schema file of ours (trusted, well-formed): with libyaml when PyYAML has it, ten
    times faster than the pure-Python reader (every controller and policy server reads
    the whole set at start)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@lru_cache(maxsize=1)
def _packaged() -> Contract:
    base = resources.files("robinhood_common") / "schema"
    docs = {}
    for entry in sorted(base.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".schema.yaml"):
            docs[entry.name] = _load_schema(entry.read_text())
    return Contract(docs)


class _Node:
    """What phase 1 saw at one node, for phase 2."""

    __slots__ = ("schema", "path", "celv", "key", "field", "index", "children")

    def __init__(self, schema: dict[str, Any], path: str, celv: Any) -> None:
        self.schema = schema
        self.path = path
        self.celv = celv
        self.key = ""
        self.field = ""
        """The property name or map key under the parent object ("" for an array item)."""
        self.index = -1
        self.children: list[_Node] = []


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _type_ok(t: str, v: Any) -> bool:
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "integer":
        return _is_int(v) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return _is_num(v) and math.isfinite(v)
    if t == "boolean":
        return isinstance(v, bool)
    raise SchemaError(f"type {t!r} is not implemented")


def _bound_text(b: Any) -> str:
    return "" if b is None else format_number(b)


class _Reader:
    def __init__(self, contract: Contract, base: str) -> None:
        self.c = contract
        self.has_rules = False

    def msg(self, s: dict[str, Any], kw: str, default: str) -> str:
        return (s.get("x-messages") or {}).get(kw, default)

    def check(self, node: dict[str, Any], base: str, v: Any, path: str) -> tuple[Any, Any, _Node]:
        s, base = self.c.effective(node, base)
        self.has_rules = self.has_rules or "x-rules" in s
        if "x-shorthand" in s and v is not None and not isinstance(v, (dict, list)):
            v = {s["x-shorthand"]: v}
        types = s.get("type")
        if types is not None:
            tl = types if isinstance(types, list) else [types]
            matched = next((t for t in tl if _type_ok(t, v)), None)
            if matched is None:
                fmt = s.get("format")
                if fmt == "duration":
                    raise ConfigError(path, f"{format_value(v)} is not a duration ({DURATION_HINT})")
                if fmt == "address":
                    raise ConfigError(path, f"{format_value(v)} is not a host:port address (port 0-65535)")
                want = " or ".join(_ARTICLE[t] for t in tl)
                raise ConfigError(path, f"{format_value(v)} is not {want}")
            if matched == "integer" and isinstance(v, float):
                v = int(v)
            elif matched == "number" and _is_int(v):
                v = float(v)
        if "enum" in s and v not in s["enum"]:
            raise ConfigError(path, f"{format_value(v)} is not one of {', '.join(str(e) for e in s['enum'])}")
        celv: Any = v
        if isinstance(v, str):
            if len(v) < s.get("minLength", 0):
                raise ConfigError(path, self.msg(s, "minLength", "must not be empty" if s["minLength"] == 1
                                                 else f"must be at least {s['minLength']} characters"))
            if "pattern" in s and not re.search(s["pattern"], v):
                raise ConfigError(path, f"{format_value(v)} {self.msg(s, 'pattern', 'does not match ' + s['pattern'])}")
            fmt = s.get("format")
            if fmt == "duration":
                try:
                    celv = parse_duration_ns(v) / 1e9
                except ValueError:
                    raise ConfigError(path, f"{format_value(v)} is not a duration ({DURATION_HINT})") from None
                self.bounds(s, celv, path, shown=format_value(v))
            elif fmt == "address" and not is_address(v):
                raise ConfigError(path, f"{format_value(v)} is not a host:port address (port 0-65535)")
        if _is_num(v):
            self.bounds(s, v, path)
        out = _Node(s, path, None)
        if isinstance(v, dict):
            v, celv = self.check_object(s, base, v, path, out)
        elif isinstance(v, list):
            v, celv = self.check_array(s, base, v, path, out)
        out.celv = celv
        return v, celv, out

    def bounds(self, s: dict[str, Any], v: float, path: str, shown: str | None = None) -> None:
        """Refuse v outside the bounds of s; a duration's bounds are in seconds (v is then in
        seconds, shown the value as written)."""
        lo, lox = (s["exclusiveMinimum"], True) if "exclusiveMinimum" in s else (s.get("minimum"), False)
        hi, hix = (s["exclusiveMaximum"], True) if "exclusiveMaximum" in s else (s.get("maximum"), False)
        below = lo is not None and (v <= lo if lox else v < lo)
        above = hi is not None and (v >= hi if hix else v > hi)
        if not (below or above):
            return
        unit = f" {s['x-unit']}" if "x-unit" in s else ""
        val = shown if shown is not None else format_number(v)
        if below and "exclusiveMinimum" in s and "exclusiveMinimum" in (s.get("x-messages") or {}):
            raise ConfigError(path, f"{val} {s['x-messages']['exclusiveMinimum']}")
        if below and "minimum" in (s.get("x-messages") or {}):
            raise ConfigError(path, f"{val} {s['x-messages']['minimum']}")
        if above and "maximum" in (s.get("x-messages") or {}):
            raise ConfigError(path, f"{val} {s['x-messages']['maximum']}")
        lo_t, hi_t = _bound_text(lo), _bound_text(hi)
        if lo is not None and hi is not None:
            interval = f"{'(' if lox else '['}{lo_t}, {hi_t}{')' if hix else ']'}"
            raise ConfigError(path, f"{val} is out of range {interval}{unit}")
        if below:
            raise ConfigError(path, f"{val} must be above {lo_t}{unit}" if lox
                              else f"{val} is below the minimum of {lo_t}{unit}")
        raise ConfigError(path, f"{val} must be below {hi_t}{unit}" if hix
                          else f"{val} is above the maximum of {hi_t}{unit}")

    def check_object(self, s: dict[str, Any], base: str, v: dict[str, Any], path: str,
                     out: _Node) -> tuple[dict[str, Any], dict[str, Any]]:
        props: dict[str, Any] = s.get("properties") or {}
        extra = s.get("additionalProperties", True)
        for k in v:
            if not isinstance(k, str):
                raise ConfigError(join(path, str(k)), f"key {format_value(k)} is not a string")
        if extra is False:
            for k in sorted(v):
                if k not in props:
                    known = ", ".join(props) or "none"
                    raise ConfigError(join(path, k), f"unknown field (known: {known})")
        for k in s.get("required") or []:
            if v.get(k) is None and "default" not in self.c.effective(props.get(k, {}), base)[0]:
                raise ConfigError(join(path, k), "is required")
        norm: dict[str, Any] = {}
        celv: dict[str, Any] = {}
        for k, sub in props.items():
            val = v.get(k)
            if val is None:
                eff, _ = self.c.effective(sub, base)
                if "default" not in eff:
                    continue
                val = copy.deepcopy(eff["default"])
            n, c, child = self.check(sub, base, val, join(path, k))
            child.field = k
            norm[k], celv[k] = n, c
            out.children.append(child)
        if isinstance(extra, dict):
            for k in sorted(v):
                if k in props:
                    continue
                val = v[k]
                if val is None:
                    raise ConfigError(join(path, k), "is empty")
                n, c, child = self.check(extra, base, val, join(path, k))
                child.key = child.field = k
                norm[k], celv[k] = n, c
                out.children.append(child)
        elif extra is True:
            for k in v:
                if k not in props:
                    norm[k] = celv[k] = v[k]
        if "x-variants" in s:
            self.check_variant(s, base, v, path, norm, celv, out)
        return norm, celv

    def check_variant(self, s: dict[str, Any], base: str, v: dict[str, Any], path: str,
                      norm: dict[str, Any], celv: dict[str, Any], out: _Node) -> None:
        """x-variants: the value of its field names a case (a schema among the
        properties of the node "cases" refers to), and the object's other fields are
        checked against it. A name that is not a case is an error unless the variants are
        open (the component then checks it)."""
        xv = s["x-variants"]
        on = xv["field"]
        file = xv["cases"].partition("#")[0] or base
        cases = self.c.resolve(xv["cases"], base)["properties"]
        name = norm.get(on)
        if name not in cases:
            if xv.get("open"):
                return
            raise ConfigError(join(path, on), f"{format_value(name)} is not one of {', '.join(cases)}")
        rest = {k: e for k, e in v.items() if k != on}
        n, c, child = self.check(cases[name], file, rest, path)
        norm.update(n)
        celv.update(c)
        out.children.extend(child.children)  # the parameters are this object's fields

    def check_array(self, s: dict[str, Any], base: str, v: list[Any], path: str,
                    out: _Node) -> tuple[list[Any], list[Any]]:
        if "minItems" in s and len(v) < s["minItems"]:
            n = s["minItems"]
            raise ConfigError(path, self.msg(s, "minItems", f"needs at least {n} item{'s' if n != 1 else ''}"))
        if "maxItems" in s and len(v) > s["maxItems"]:
            n = s["maxItems"]
            raise ConfigError(path, self.msg(s, "maxItems", f"takes at most {n} item{'s' if n != 1 else ''}"))
        items = s.get("items")
        if items is None:
            return list(v), list(v)
        norm: list[Any] = []
        celv: list[Any] = []
        for i, val in enumerate(v):
            n, c, child = self.check(items, base, val, f"{path}[{i}]")
            child.index = i
            norm.append(n)
            celv.append(c)
            out.children.append(child)
        return norm, celv

    def rules(self, node: _Node, celv_root: Any) -> None:
        # The document is converted to CEL values once; every node's `self` is its part
        # of that tree and an array item's `before` a view of its array's converted
        # items, so a document is converted in linear time whatever its size.
        root = celpy.json_to_cel(celv_root)
        self._rules(node, root, root, _EMPTY)

    def _rules(self, node: _Node, root: Any, cel: Any, before: Any) -> None:
        s = node.schema
        lets = s.get("x-let") or {}
        rules = s.get("x-rules") or []
        if rules:
            act = {
                "self": cel,
                "root": root,
                "key": celtypes.StringType(node.key),
                "index": celtypes.IntType(node.index),
                "before": before,
            }
            for r in rules:
                ok = self._eval(r["rule"], lets, act, node.path)
                if ok is True or (isinstance(ok, celtypes.BoolType) and bool(ok)):
                    continue
                if "fieldExpression" in r:
                    field = str(self._eval(r["fieldExpression"], lets, act, node.path))
                else:
                    field = r.get("field", "")
                message = str(self._eval(r["message"], lets, act, node.path))
                raise ConfigError(join(node.path, field) if field else node.path, message)
        for child in node.children:
            if child.index >= 0:
                self._rules(child, root, cel[child.index], celtypes.ListType(cel[:child.index]))
            else:
                self._rules(child, root, cel[celtypes.StringType(child.field)], _EMPTY)

    def _eval(self, expr: str, lets: dict[str, str], act: dict[str, Any], path: str) -> Any:
        prog = _program(_substitute(expr, lets))
        try:
            result = prog.evaluate(act)
        except Exception as e:  # noqa: BLE001
            raise SchemaError(f"{path or '(document)'}: CEL {expr!r} failed: {e}") from None
        if isinstance(result, celpy.CELEvalError):
            raise SchemaError(f"{path or '(document)'}: CEL {expr!r} failed: {result}")
        return result


_EMPTY = celtypes.ListType([])


#: The bounds of a configuration file (docs/topology.md, "Limits"): its size, its YAML
#: nodes counting every alias as the nodes it repeats (so an alias bomb is refused before
#: it is expanded), and how deep its collections nest as written (so deep nesting is
#: refused before a recursive loader meets it). The Go reader (lib/config) has the same
#: bounds and messages.
MAX_CONFIG_BYTES = 2 << 20
MAX_CONFIG_NODES = 250_000
MAX_CONFIG_DEPTH = 64
TOO_LARGE = f"the file is more than {MAX_CONFIG_BYTES} bytes, the most a configuration file may have"
TOO_MANY_NODES = (f"more than {MAX_CONFIG_NODES} YAML nodes, counting what aliases repeat: a configuration "
                  f"file may have at most {MAX_CONFIG_NODES}")
TOO_DEEP = (f"more than {MAX_CONFIG_DEPTH} levels of nesting: a configuration file may nest its lists and "
            f"mappings at most {MAX_CONFIG_DEPTH} deep")
_EVENT_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# -- Plain scalars as the Go reader reads them -------------------------------------------
# PyYAML resolves plain scalars by YAML 1.1 (yes/no/on/off are booleans, 5e-2 and 0o17
# strings, 1:30 the integer 90), gopkg.in/yaml.v3 by YAML 1.2 with its own additions.
# One file must mean one thing to every component, so the Python readers resolve plain
# scalars exactly as yaml.v3 does when it decodes into an interface (its resolve.go):
# booleans only true/True/TRUE and false/False/FALSE; integers in Go's literal syntax
# (0x, 0o, 0b, a leading 0 is octal; underscores dropped; beyond int64, a float, as
# lib/config makes an unsigned one), floats as yaml.v3's pattern (5e-2, 1e2, .5) and
# .inf/.nan, no sexagesimal numbers, and a timestamp as the RFC 3339 string lib/config
# makes of it. tests/vectors/yaml_scalars.json holds the cases both readers run.

_TRUE, _FALSE = ("true", "True", "TRUE"), ("false", "False", "FALSE")
_NULL = ("", "~", "null", "Null", "NULL")
_SPECIAL_FLOATS = {**dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
                   **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
                   **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf)}
_GO_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _go_uint(s: str, base: int) -> int | None:
    """strconv.ParseUint(s, base, 64) of text without underscores; None on an error."""
    if not s:
        return None
    if base == 0:
        base = 10
        if s[0] == "0":
            if len(s) >= 3 and s[1] in "bBoOxX":
                base, s = {"b": 2, "o": 8, "x": 16}[s[1].lower()], s[2:]
            else:
                base, s = 8, s[1:]
    n = 0
    for c in s:
        d = _DIGITS.find(c.lower()) if c.isascii() else -1
        if not 0 <= d < base:
            return None
        n = n * base + d
    return n if n < 1 << 64 else None


def _go_int(s: str, base: int) -> int | None:
    """strconv.ParseInt(s, base, 64): an optional sign, then ParseUint, within int64."""
    neg = s[:1] == "-"
    u = _go_uint(s[1:] if s[:1] in "+-" else s, base)
    if u is None or u > (1 << 63) - (0 if neg else 1):
        return None
    return -u if neg else u


def _go_float(s: str) -> float | None:
    """strconv.ParseFloat(s, 64) of a decimal literal: None when it overflows."""
    try:
        v = float(s) if s.isascii() else math.nan
    except ValueError:
        return None
    return v if math.isfinite(v) else None


_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})"
                        r"(?:[Tt]([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:\.[0-9]+)?(Z|[-+][0-9]{2}:[0-9]{2})"
                        r"| ([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:\.[0-9]+)?)?\Z")


def _timestamp(s: str) -> str | None:
    """A timestamp yaml.v3 recognizes (2001-12-14, 2001-12-14T21:59:43.1-05:00,
    2001-12-14 21:59:43.1), as lib/config writes it (RFC 3339 to the second); None for
    anything else, a date that does not exist included."""
    m = _TIMESTAMP.match(s)
    if m is None:
        return None
    year, month, day = (int(g) for g in m.group(1, 2, 3))
    clock = m.group(4, 5, 6) if m.group(4) else m.group(8, 9, 10) if m.group(8) else ("0", "0", "0")
    hour, minute, second = (int(g) for g in clock)
    zone = m.group(7) or "Z"
    try:
        datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None
    if zone in ("+00:00", "-00:00"):
        zone = "Z"
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{zone}"


def resolve_plain(s: str) -> tuple[str, Any]:
    """The kind ("null", "bool", "int", "float", "timestamp" (the value a string) or
    "str") and value of a plain (unquoted, untagged) scalar, as yaml.v3 resolves it and
    lib/config keeps it."""
    if s in _NULL:
        return "null", None
    if s in _TRUE or s in _FALSE:
        return "bool", s in _TRUE
    if s in _SPECIAL_FLOATS:
        return "float", _SPECIAL_FLOATS[s]
    c = s[0]
    if c == ".":
        v = _go_float(s)
        return ("float", v) if v is not None else ("str", s)
    if not (c in "+-" or "0" <= c <= "9"):
        return "str", s
    if (t := _timestamp(s)) is not None:
        return "timestamp", t
    plain = s.replace("_", "")
    if (v := _go_int(plain, 0)) is not None:
        return "int", v
    if (v := _go_uint(plain, 0)) is not None:
        return "float", float(v)  # above int64: lib/config keeps an unsigned one as a float
    if _GO_YAML_FLOAT.match(plain) and (f := _go_float(plain)) is not None:
        return "float", f
    for prefix, base in (("0b", 2), ("0o", 8)):
        if plain.startswith(prefix):
            if (v := _go_int(plain[2:], base)) is not None:
                return "int", v
            if (v := _go_uint(plain[2:], base)) is not None:
                return "float", float(v)
        elif plain.startswith("-" + prefix) and (v := _go_int("-" + plain[3:], base)) is not None:
            return "int", v
    return "str", s


_TAGS = {k: f"tag:yaml.org,2002:{k}" for k in ("null", "bool", "int", "float", "str", "timestamp")}


class Loader(_EVENT_LOADER):  # type: ignore[misc,valid-type]
    """PyYAML's safe loader (libyaml when present) with yaml.v3's plain scalars
    (resolve_plain), for every configuration file and flag value a Python component
    reads."""

    def resolve(self, kind: Any, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0] and value != "<<":
            return _TAGS[resolve_plain(value)[0]]
        return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]

    def _scalar_as(self, node: yaml.ScalarNode, kind: str) -> Any:
        got, v = resolve_plain(node.value) if node.value else ("null", None)
        if got == kind or kind == "float" and got == "int":
            return float(v) if kind == "float" else v
        raise yaml.constructor.ConstructorError(None, None, f"cannot decode {node.value!r} as {node.tag}",
                                                node.start_mark)


for _kind in ("null", "bool", "int", "float", "timestamp"):
    Loader.add_constructor(_TAGS[_kind], lambda self, node, k=_kind: self._scalar_as(node, k))
# "<<" is a merge where it is a key (flatten_mapping merges it first), a string elsewhere.
Loader.add_constructor("tag:yaml.org,2002:merge", lambda self, node: node.value)


class Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper resolving plain scalars as Loader does: a string that would
    read back as something else (5e-2, 0o17, 2001-12-14) is quoted, one that reads back
    as itself (yes, on) is not, so what a Python component writes every reader reads as
    it was written."""

    def resolve(self, kind: Any, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0] and value != "<<":
            return _TAGS[resolve_plain(value)[0]]
        return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]


def dump_yaml(doc: Any, **kw: Any) -> str:
    """doc as YAML text every reader reads back as doc (Dumper); keywords as yaml.dump's."""
    return yaml.dump(doc, Dumper=Dumper, **kw)  # type: ignore[no-any-return]


def load_yaml(text: str) -> Any:
    """The first document of YAML text with yaml.v3's plain scalars (Loader); without
    the bounds of read_yaml (its caller's input is small: a flag's value)."""
    return yaml.load(text, Loader=Loader)


def count_nodes(text: str, limit: int = MAX_CONFIG_NODES) -> int:
    """The YAML nodes of text's first document, aliases expanded (a scalar 1, a
    collection 1 + its items', mapping keys included; an alias its target's), counted from
    the parser's events without building anything, and stopping once past ``limit``.
    Text that is not YAML counts what was read before the error (the loader reports it).
    ConfigError (TOO_DEEP) when collections nest deeper than MAX_CONFIG_DEPTH as written."""
    anchors: dict[str, int] = {}
    opened: list[tuple[int, str | None]] = []  # (total when it opened, anchor) of open collections
    total = 0
    start, end = (yaml.MappingStartEvent, yaml.SequenceStartEvent), (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    try:
        for ev in yaml.parse(text, Loader=_EVENT_LOADER):
            if isinstance(ev, yaml.ScalarEvent):
                total += 1
                if ev.anchor is not None:
                    anchors[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                total += anchors.get(ev.anchor, 0)
            elif isinstance(ev, start):
                opened.append((total, ev.anchor))
                total += 1
                if len(opened) > MAX_CONFIG_DEPTH:
                    raise ConfigError("", TOO_DEEP)
            elif isinstance(ev, end):
                at, anchor = opened.pop()
                if anchor is not None:
                    anchors[anchor] = total - at
            elif isinstance(ev, yaml.DocumentEndEvent):
                break
            if total > limit:
                return limit + 1
    except yaml.YAMLError:
        pass
    return total


def read_config_file(path: str | Path) -> str:
    """A configuration file's text, reading at most MAX_CONFIG_BYTES + 1 bytes of it:
    ConfigError at the document when it is larger; OSError when it cannot be read or is
    not a regular file (a named pipe, a device: refused without blocking)."""
    try:
        data = read_bounded(path, MAX_CONFIG_BYTES)
    except FileTooLarge:
        raise ConfigError("", TOO_LARGE) from None
    return data.decode("utf-8", errors="replace")


def read_yaml(text: str, what: str = "document") -> Any:
    """Parse YAML text; ConfigError when it is not YAML, empty, or beyond the bounds."""
    if len(text) > MAX_CONFIG_BYTES or len(text.encode("utf-8", errors="replace")) > MAX_CONFIG_BYTES:
        raise ConfigError("", TOO_LARGE)
    if count_nodes(text) > MAX_CONFIG_NODES:
        raise ConfigError("", TOO_MANY_NODES)
    try:
        doc = yaml.load(text, Loader=Loader)
    except yaml.YAMLError as e:
        raise ConfigError("", "not valid YAML: " + " ".join(str(e).split())) from None
    if doc is None:
        raise ConfigError("", f"empty {what}")
    return doc
