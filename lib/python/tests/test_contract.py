"""The Python reader of the configuration contract against the shared cases in
tests/config (the Go reader, lib/config, is tested on the same files and must give the
same errors and the same normalized documents), plus properties of the schema itself."""
from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
import yaml

from robinhood_common.contract import ConfigError, Contract, read_yaml

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "tests" / "config"


def cases(kind: str, which: str) -> list[Path]:
    return sorted((CASES / kind / which).glob("*.yaml"))


@pytest.mark.parametrize("path", cases("topology", "invalid") + cases("experiment", "invalid") + cases("hedging", "invalid"),
                         ids=lambda p: p.stem)
def test_invalid_cases(path: Path) -> None:
    kind = path.parents[1].name
    first = path.read_text().split("\n", 1)[0]
    assert first.startswith("# expect: ")
    with pytest.raises(ConfigError) as e:
        Contract.packaged().read(f"{kind}.schema.yaml", read_yaml(path.read_text()))
    assert str(e.value) == first.removeprefix("# expect: ")


@pytest.mark.parametrize("path", cases("topology", "valid") + cases("experiment", "valid") + cases("hedging", "valid"),
                         ids=lambda p: p.stem)
def test_valid_cases_normalize(path: Path) -> None:
    kind = path.parents[1].name
    got = Contract.packaged().read(f"{kind}.schema.yaml", read_yaml(path.read_text()))
    want = json.loads(path.with_suffix(".normalized.json").read_text())
    assert json.loads(json.dumps(got)) == want
    # Integers stay integers and floats floats, as the Go reader checks.
    assert json.dumps(got, indent=1, sort_keys=True) + "\n" == path.with_suffix(".normalized.json").read_text()


def test_packaged_copy_is_current() -> None:
    """The package carries a copy of schema/ (make schema writes it)."""
    for src in (REPO / "schema").glob("*.schema.yaml"):
        copy = REPO / "lib" / "python" / "robinhood_common" / "schema" / src.name
        assert copy.read_text() == src.read_text(), f"{copy} is stale: run make schema"


@pytest.mark.parametrize("name", ["topology.schema.yaml", "experiment.schema.yaml", "hedging.schema.yaml",
                                  "policies.schema.yaml"])
def test_schema_is_json_schema(name: str) -> None:
    """Our dialect is real JSON Schema 2020-12: the standard validator accepts the schema
    and the valid cases (it ignores the x- extensions and our formats)."""
    docs = {p.name: yaml.safe_load(p.read_text()) for p in (REPO / "schema").glob("*.schema.yaml")}
    jsonschema.Draft202012Validator.check_schema(docs[name])
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012
    registry = Registry().with_resources(
        (n, Resource.from_contents(d, default_specification=DRAFT202012)) for n, d in docs.items())
    validator = jsonschema.Draft202012Validator(docs[name], registry=registry)
    kind = name.split(".")[0]
    for path in cases(kind, "valid"):
        normalized = json.loads(path.with_suffix(".normalized.json").read_text())
        errors = list(validator.iter_errors(normalized))
        assert not errors, f"{path.name}: {errors[0].message}"


def test_unknown_keyword_is_refused() -> None:
    from robinhood_common.contract import SchemaError
    with pytest.raises(SchemaError, match="not implemented"):
        Contract({"t.schema.yaml": {"type": "object", "oneOf": []}})


def test_rule_that_does_not_compile_is_refused() -> None:
    from robinhood_common.contract import SchemaError
    with pytest.raises(SchemaError, match="does not compile"):
        Contract({"t.schema.yaml": {"type": "object", "x-rules": [{"rule": "self.(", "message": "'x'"}]}})


def test_read_changes_nothing_in_the_input() -> None:
    doc = read_yaml((CASES / "topology" / "valid" / "shorthands.yaml").read_text())
    before = json.dumps(doc, sort_keys=True)
    Contract.packaged().read("topology.schema.yaml", doc)
    assert json.dumps(doc, sort_keys=True) == before


def test_error_names_path_and_message() -> None:
    with pytest.raises(ConfigError) as e:
        Contract.packaged().read("topology.schema.yaml#/$defs/limits", {"workers": 0}, path="limits")
    assert e.value.path == "limits.workers"
    assert e.value.message == "0 is out of range [1, 1000000]"


GENERATED = json.loads((CASES / "generated.json").read_text())["cases"]


@pytest.mark.parametrize("case", GENERATED, ids=lambda c: c["name"])
def test_generated_cases_are_refused_within_bounds(case: dict, tmp_path: Path) -> None:
    """The files too large to commit (tests/config/generated.json): refused with exactly
    their error, from text and from a file whose reading stops at the bound, in a bounded
    amount of memory (measured with tracemalloc, printed with -s)."""
    import time
    import tracemalloc

    from robinhood_common import experiment, topology

    text = case["head"] + case["repeat"] * case["times"] + case["tail"]
    path = tmp_path / f"{case['name']}.yaml"
    path.write_text(text)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ConfigError) as e:
            read_yaml(text, case["kind"])
        assert str(e.value) == case["expect"]
        loader = topology.load if case["kind"] == "topology" else experiment.load
        with pytest.raises(ValueError) as e:
            loader(path)
        assert str(e.value).endswith(": " + case["expect"]), e.value
        took = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"{case['name']}: {len(text)} bytes refused twice in {took:.2f} s, peak {peak / 2**20:.1f} MiB")
    # The defect this holds off grew past 6 GB; counting the nodes of a few megabytes
    # of YAML from the parser's events builds nothing.
    assert peak < 256 * 2**20, f"{peak / 2**20:.0f} MiB to refuse it"


def test_the_parse_caches_change_no_verdict(tmp_path: Path) -> None:
    """The CEL grammar's parse tables and the rules' parse trees are cached between
    processes under the user's cache folder (contract._parser_cache): cold, warm and
    damaged, every invalid case gets the same message."""
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from robinhood_common.contract import ConfigError, Contract, read_yaml\n"
        "out = []\n"
        "for p in sorted(Path(sys.argv[1]).glob('*.yaml')):\n"
        "    try:\n"
        "        Contract.packaged().read('topology.schema.yaml', read_yaml(p.read_text()))\n"
        "        out.append('valid')\n"
        "    except ConfigError as e:\n"
        "        out.append(str(e))\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))

    def verdicts() -> list[str]:
        res = subprocess.run([sys.executable, "-c", script, str(CASES / "topology" / "invalid")], env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    cold = verdicts()
    folder = tmp_path / "robinhood"
    files = sorted(p.name for p in folder.iterdir())
    assert (folder.stat().st_mode & 0o777) == 0o700
    assert "cel-lark.cache" in files and any(f.startswith("cel-trees-") for f in files), files
    assert "valid" not in cold and verdicts() == cold
    for p in folder.iterdir():
        p.write_bytes(b"not a pickle")
    assert verdicts() == cold


def _scalar_cases() -> list[dict]:
    doc = json.loads((REPO / "tests" / "vectors" / "yaml_scalars.json").read_text())
    assert doc["schema"] == "robinhood-yaml-scalars/v1" and len(doc["cases"]) >= 50
    return doc["cases"]


@pytest.mark.parametrize("case", _scalar_cases(), ids=lambda c: c["yaml"])
def test_yaml_scalars_read_as_every_reader_reads_them(case: dict) -> None:
    """Each plain scalar of tests/vectors/yaml_scalars.json (the Go reader runs them too)
    reads as written there: yes/on/off are strings, 5e-2 and 1e2 floats, 0o17 the
    integer 15, 1:30 a string, a date the RFC 3339 string, beyond int64 a float."""
    got = read_yaml(f"v: {case['yaml']}\n")["v"]
    kind, want = case["kind"], case["value"]
    if kind == "float" and isinstance(want, str):
        assert isinstance(got, float) and (math.isnan(got) if want == "NaN" else got == float(want.replace("Inf", "inf")))
        return
    assert type(got) is {"null": type(None), "bool": bool, "int": int, "float": float, "str": str}[kind], got
    assert got == want
