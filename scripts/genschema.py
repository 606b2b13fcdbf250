#!/usr/bin/env python3
"""Everything generated from schema/ (the configuration contract) and from the policy
registries:

- lib/python/robinhood_common/schema/*.schema.yaml, the copy the Python package carries;
- the reference tables in docs/topology.md and docs/testbed.md, between the markers
  "<!-- BEGIN GENERATED FROM schema/... -->" and "<!-- END GENERATED -->";
- schema/policies.schema.yaml, every policy's parameters as the contract checks them:
  the allocation policies' from the controller's registry (their pydantic fields), the
  dispatch policies' from `bin/appserver --list-dispatch-policies --json` (their
  parameter structs' tags; run `make build` first). Each policy declares its parameters
  once, in its own file; every reader of a topology checks them through this file;
- the tables of allocation policies (docs/controller.md) and dispatch policies
  (docs/appserver.md), from the same declarations;
- the zoo's seed ranges the testbed uses (experiment/testbed/robinhood_testbed/seeds.py,
  from `bin/tracegen scenario seeds --json`: experiment/zoo/seeds.go is the definition).

  scripts/genschema.py              write them
  scripts/genschema.py --registries write only what comes from the policy registries
                                    (`make build` runs this, so a new policy file is
                                    documented, and checked by every reader, by
                                    building; exit 10 when the policies' schema changed)
  scripts/genschema.py --check      fail (exit 1) when a committed copy is stale
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "schema"
COPY = REPO / "lib" / "python" / "robinhood_common" / "schema"
DOCS = {"topology.schema.yaml": REPO / "docs" / "topology.md",
        "experiment.schema.yaml": REPO / "docs" / "testbed.md",
        "hedging.schema.yaml": REPO / "docs" / "hedging.md"}


def load() -> dict[str, dict[str, Any]]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(SCHEMA.glob("*.schema.yaml"))}


def resolve(docs: dict[str, Any], ref: str, base: str) -> tuple[dict[str, Any], str, str]:
    file, _, pointer = ref.partition("#")
    file = file or base
    node: Any = docs[file]
    for part in [p for p in pointer.split("/") if p]:
        node = node[part]
    return node, file, pointer.split("/")[-1]


def effective(docs: dict[str, Any], node: dict[str, Any], base: str) -> dict[str, Any]:
    if "$ref" not in node:
        return node
    target, file, _ = resolve(docs, node["$ref"], base)
    out = dict(effective(docs, target, file))
    out.update({k: v for k, v in node.items() if k != "$ref"})
    return out


def anchor(title: str) -> str:
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def type_text(docs: dict[str, Any], node: dict[str, Any], base: str, titles: dict[str, str]) -> str:
    if "$ref" in node:
        target, file, name = resolve(docs, node["$ref"], base)
        if (file, name) in titles:
            t = titles[(file, name)]
            return f"[{t}](#{anchor(t)})" if file == base else f"{t} (topology)"
        node = effective(docs, node, base)
    if "enum" in node:
        return " \\| ".join(f"`{e}`" for e in node["enum"])
    fmt = node.get("format")
    if fmt == "duration":
        return "duration"
    if fmt == "address":
        return "host:port"
    t = node.get("type", "any")
    if node.get("x-shorthand"):
        return f"mapping (or its `{node['x-shorthand']}`)"
    if t == "array":
        items = node.get("items") or {}
        return f"list of {type_text(docs, items, base, titles)}"
    if t == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {type_text(docs, node['additionalProperties'], base, titles)}"
    if isinstance(t, list):
        return " or ".join(t)
    return {"object": "mapping"}.get(t, t)


def interval(lo: Any, hi: Any, open_lo: bool, open_hi: bool, unit: str = "") -> str:
    """Bounds as a docs table shows them: [lo, hi), > lo, ≤ hi, ... ('' without any)."""
    if lo is not None and hi is not None:
        return f"{'(' if open_lo else '['}{lo}, {hi}{')' if open_hi else ']'}{unit}"
    if lo is not None:
        return f"{'>' if open_lo else '≥'} {lo}{unit}"
    if hi is not None:
        return f"{'<' if open_hi else '≤'} {hi}{unit}"
    return ""


def bounds_text(node: dict[str, Any]) -> str:
    return interval(node.get("exclusiveMinimum", node.get("minimum")), node.get("exclusiveMaximum", node.get("maximum")),
                    "exclusiveMinimum" in node, "exclusiveMaximum" in node, f" {node['x-unit']}" if "x-unit" in node else "")


def default_text(node: dict[str, Any]) -> str:
    if "default" not in node:
        return ""
    d = node["default"]
    if isinstance(d, str):
        return f"`{d}`" if d else '`""`'
    if d == {} or d == []:
        return ""
    return f"`{json.dumps(d, separators=(', ', ': '))}`"


def section(docs: dict[str, Any], node: dict[str, Any], base: str, title: str, titles: dict[str, str]) -> str:
    out = [f"### {title}", ""]
    if node.get("description"):
        out += [" ".join(str(node["description"]).split()), ""]
    props = node.get("properties") or {}
    if props:
        out += ["| field | type | default | meaning |", "|---|---|---|---|"]
        required = set(node.get("required") or [])
        for name, sub in props.items():
            eff = effective(docs, sub, base)
            desc = " ".join(str(sub.get("description") or eff.get("description") or "").split())
            b = bounds_text(eff)
            if b:
                desc = f"{desc} ({b})" if desc else b
            field = f"`{name}`" + (" (required)" if name in required else "")
            out.append(f"| {field} | {type_text(docs, sub, base, titles)} | {default_text(eff)} | {desc} |")
        out.append("")
    extra = node.get("additionalProperties")
    if props and extra is True and "x-variants" in node:
        xv = node["x-variants"]
        unknown = ("; a name the contract does not know is left to the component" if xv.get("open")
                   else "; another name is refused")
        out += [f"Other fields are the parameters of the policy `{xv['field']}` names, checked by every reader "
                f"against that policy's declaration (schema/policies.schema.yaml{unknown}).", ""]
    elif props and extra is True:
        out += ["Other fields are passed on as parameters (validated by the policy).", ""]
    return "\n".join(out)


def reference(docs: dict[str, Any], name: str) -> str:
    doc = docs[name]
    titles: dict[tuple[str, str], str] = {}
    for dname, d in docs.items():
        for key, sub in (d.get("$defs") or {}).items():
            if sub.get("type") == "object" and sub.get("properties"):
                titles[(dname, key)] = sub.get("title", key)
    parts = [section(docs, doc, name, doc.get("title", name) + " (top level)", titles)]
    for key, sub in (doc.get("$defs") or {}).items():
        if (name, key) in titles:
            parts.append(section(docs, sub, name, titles[(name, key)], titles))
    return "\n".join(parts)


def splice(text: str, path: Path, source: str, body: str) -> str:
    begin = f"<!-- BEGIN GENERATED FROM {source} (make schema); do not edit -->"
    end = "<!-- END GENERATED -->"
    if begin not in text:
        raise SystemExit(f"{path}: the marker {begin!r} is missing")
    head, rest = text.split(begin, 1)
    if end not in rest:
        raise SystemExit(f"{path}: no {end!r} after {begin!r}")
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n\n{body}\n{end}{tail}"


def allocation_table() -> str:
    from robinhood_controller import policies

    rows = ["| policy | role | parameters (default, range) | what it does |", "|---|---|---|---|"]
    for d in policies.describe():
        params = "<br>".join(param_text(p) for p in d["params"]) or "—"
        rbc = " Needs the RBC server." if d["needs_rbc"] else ""
        run = " Needs the run's description (`controller.run`): experiments only." if d["needs_run"] else ""
        role = f"**{d['role']}** (the default)" if d["default"] else d["role"]
        rows.append(f"| `{d['name']}` | {role} | {params} | {d['summary']}.{rbc}{run} |")
    return "\n".join(rows) + "\n"


def go_json(name: str, *args: str) -> Any:
    """What `bin/NAME ARGS` prints, as JSON."""
    exe = REPO / "bin" / name
    if not exe.exists():
        raise SystemExit(f"{exe} is missing: run make build first")
    return json.loads(subprocess.run([str(exe), *args], capture_output=True, text=True, check=True).stdout)


def dispatch_describe() -> list[dict[str, Any]]:
    """lib/dispatch's registry, each policy with its parameters' declarations."""
    return go_json("appserver", "--list-dispatch-policies", "--json")


def param_text(p: dict[str, Any]) -> str:
    """One parameter in a docs table: name, type and bounds, default, what it does."""
    b = interval(p.get("minimum"), p.get("maximum"), bool(p.get("exclusive_minimum")), bool(p.get("exclusive_maximum")))
    kind = p["type"] + (f" {b}" if b else "")
    if p.get("enum"):
        kind = " \\| ".join(f"`{e}`" for e in p["enum"])
    d = p.get("default")
    default = "" if d is None else f" = `{d if isinstance(d, str) else json.dumps(d)}`"
    return f"`{p['name']}`{default} ({kind}): {p.get('doc') or p.get('description') or ''}"


def dispatch_table() -> str:
    rows = ["| policy | parameters (default, range) | what it does |", "|---|---|---|"]
    for d in dispatch_describe():
        params = "<br>".join(param_text(p) for p in d["params"]) or "—"
        rows.append(f"| `{d['name']}` | {params} | {d['summary']} |")
    return "\n".join(rows) + "\n"


POLICIES = SCHEMA / "policies.schema.yaml"
POLICIES_HEAD = """\
# Every policy's parameters, as the configuration contract checks them: what a
# topology's `dispatch: {policy: NAME, ...}` and `controller.policy: {name: NAME, ...}`
# may hold (topology.schema.yaml selects the case with x-variants).
#
# Generated by scripts/genschema.py (make build) from the policies' own declarations:
# a dispatch policy's parameter struct (lib/dispatch, its json/range/doc tags) and an
# allocation policy's parameter model (controller/robinhood_controller/policies, its
# pydantic fields). Do not edit: change the policy's file.
"""


def _seconds(d: str) -> float | int:
    from robinhood_common.units import parse_duration_ns
    s = parse_duration_ns(d) / 1e9
    return int(s) if s == int(s) else s


def param_schema(p: dict[str, Any]) -> dict[str, Any]:
    """One declaration (either registry's form) as a schema node of the contract."""
    out: dict[str, Any] = {"description": p.get("doc") or p.get("description") or p["name"]}
    kind = p["type"]
    lo, hi = p.get("minimum"), p.get("maximum")
    lo_key = "exclusiveMinimum" if p.get("exclusive_minimum") else "minimum"
    hi_key = "exclusiveMaximum" if p.get("exclusive_maximum") else "maximum"
    if kind == "duration":
        out.update({"type": "string", "format": "duration"})
        msgs = {}
        if lo is not None:
            out[lo_key] = _seconds(lo)
            msgs[lo_key] = f"must be above {lo}" if p.get("exclusive_minimum") else f"is below the minimum of {lo}"
        if hi is not None:
            out[hi_key] = _seconds(hi)
            msgs[hi_key] = f"must be below {hi}" if p.get("exclusive_maximum") else f"is above the maximum of {hi}"
        if msgs:
            out["x-messages"] = msgs
    elif kind.startswith("map of "):
        out.update({"type": "object", "additionalProperties": {"type": kind.removeprefix("map of ")}})
    else:
        out["type"] = kind
        if p.get("enum"):
            out["enum"] = list(p["enum"])
        out.update({k: v for k, v in ((lo_key, lo), (hi_key, hi)) if v is not None})
    if p.get("default") is not None:
        out["x-default"] = p["default"]
    return out


def policies_schema() -> str:
    from robinhood_controller import policies

    def family(title: str, desc: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"title": title, "description": desc, "properties": {
            d["name"]: {"description": d["summary"], "type": "object", "additionalProperties": False,
                        "properties": {p["name"]: param_schema(p) for p in d["params"]}}
            for d in items}}

    doc = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "policies.schema.yaml",
        "title": "policy parameters",
        "description": "The parameters of every registered policy; x-default is the default the policy applies.",
        "$defs": {
            "dispatch": family("dispatch policies", "lib/dispatch's registry (bin/appserver "
                               "--list-dispatch-policies): a dispatch block's parameters.", dispatch_describe()),
            "allocation": family("allocation policies", "The controller's registry (robinhood-controller "
                                 "policies): a controller.policy block's parameters.", policies.describe()),
        },
    }
    return POLICIES_HEAD + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


SEEDS_MODULE = REPO / "experiment" / "testbed" / "robinhood_testbed" / "seeds.py"


def seeds_module() -> str:
    """experiment/testbed/robinhood_testbed/seeds.py: the zoo's seed ranges, as
    experiment/zoo/seeds.go defines them."""
    ranges = go_json("tracegen", "scenario", "seeds", "--json")
    body = "".join(f"    {r['name']!r}: SeedRange({r['name']!r}, {r['meaning']!r}, {r['min']}, {r['max']}, "
                   f"{r['sample_max']}),\n" for r in ranges)
    return ('"""The zoo\'s seed ranges, as experiment/zoo/seeds.go defines them (`bin/tracegen scenario\n'
            'seeds`): a policy is tuned on the development range and reported on the evaluation range.\n\n'
            'Generated by scripts/genschema.py (`make build`); do not edit."""\n'
            "from __future__ import annotations\n\n"
            "from typing import NamedTuple\n\n\n"
            "class SeedRange(NamedTuple):\n"
            '    """One range: --seeds NAME runs its sample, seeds min..sample_max."""\n'
            "    name: str\n    meaning: str\n    min: int\n    max: int\n    sample_max: int\n\n\n"
            f"RANGES: dict[str, SeedRange] = {{\n{body}}}\n")


def render_docs(docs: dict[str, Any] | None) -> dict[Path, str]:
    """The generated docs; with docs None, only the registries' tables."""
    out: dict[Path, str] = {}
    for name, path in DOCS.items() if docs is not None else ():
        out[path] = splice(out.get(path, path.read_text()), path, f"schema/{name}", reference(docs, name))
    ctl = REPO / "docs" / "controller.md"
    out[ctl] = splice(out.get(ctl, ctl.read_text()), ctl, "the allocation policy registry", allocation_table())
    app = REPO / "docs" / "appserver.md"
    out[app] = splice(out.get(app, app.read_text()), app, "the dispatch policy registry", dispatch_table())
    out[SEEDS_MODULE] = seeds_module()
    out[POLICIES] = out[COPY / POLICIES.name] = policies_schema()
    return out


REBUILD = 10
"""--registries' exit status when it rewrote schema/policies.schema.yaml: the Go binaries
embed it, so `make build` builds them again."""


def main(argv: list[str]) -> int:
    check = "--check" in argv
    if "--registries" in argv:
        rebuild = False
        for p, text in render_docs(None).items():
            if not p.exists() or p.read_text() != text:
                p.write_text(text)
                print(f"wrote {p.relative_to(REPO)} (from the registries and bin/tracegen)")
                rebuild |= p == POLICIES
        return REBUILD if rebuild else 0
    docs = load()
    wanted: dict[Path, str] = {COPY / n: (SCHEMA / n).read_text() for n in docs if n != POLICIES.name}
    wanted.update(render_docs(docs))
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    extra = [p for p in COPY.glob("*.schema.yaml") if p.name not in docs]
    if check:
        for p in stale + extra:
            print(f"stale: {p.relative_to(REPO)} (run make schema)", file=sys.stderr)
        return 1 if stale or extra else 0
    COPY.mkdir(parents=True, exist_ok=True)
    for p in extra:
        p.unlink()
    for p in stale:
        p.write_text(wanted[p])
        print(f"wrote {p.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
