"""Every default lives in one place (docs/architecture.md, "The configuration
contract"): the SLO settings and the RBC band in the schema, the tax in
``policies/robinhood.py``. The commands that take them as flags show the schema's
values, and a second literal copy anywhere in the code fails here, naming the line."""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from robinhood_common.contract import Contract
from robinhood_common.units import format_duration_ns
from robinhood_controller import policies
from robinhood_controller.policies.robinhood import TAX

REPO = Path(__file__).resolve().parents[1]
SLO = Contract.packaged().read_typed("topology.schema.yaml#/$defs/slo", {})[1]  # seconds
BAND = Contract.packaged().defaults("topology.schema.yaml#/$defs/rbc_server")


def tracked(*suffixes: str) -> Iterator[Path]:
    """Tracked source files, not tests, not generated code."""
    out = subprocess.run(["git", "ls-files", *[f"*{s}" for s in suffixes]], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    for rel in out.splitlines():
        p = REPO / rel
        if (p.name.endswith(("_test.go", ".pb.go", "_pb2.py", "_pb2_grpc.py")) or "/tests/" in f"/{rel}"
                or rel.startswith("tests/") or p.name.startswith("test_") or not p.is_file()):
            continue
        yield p


def go_code_lines(p: Path) -> Iterator[tuple[int, str]]:
    """A Go file's lines without // comments (a string holding // is cut too: that can
    only hide a literal, never invent one)."""
    in_block = False
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if in_block:
            if "*/" not in line:
                continue
            line, in_block = line.split("*/", 1)[1], False
        line = re.sub(r"/\*.*?\*/", "", line)
        if "/*" in line:
            line, in_block = line.split("/*", 1)[0], True
        yield n, line.split("//", 1)[0]


def py_numbers(p: Path) -> Iterator[tuple[int, str]]:
    """A Python file's number literals (comments and strings are not numbers)."""
    for tok in tokenize.generate_tokens(io.StringIO(p.read_text()).readline):
        if tok.type == tokenize.NUMBER:
            yield tok.start[0], tok.string


def test_sim_arm_and_tracegen_replay_take_the_slo_defaults_from_the_schema(gobin: Callable[[str], Path]) -> None:
    want = {"slo": SLO["latency"], "slo-step": SLO["step"], "slo-window": SLO["window"], "warmup": SLO["warmup"]}
    for cmd in ([str(gobin("sim")), "arm", "-h"], [str(gobin("tracegen")), "replay", "-h"]):
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stderr
        for flag, seconds in want.items():
            m = re.search(rf"^\s+-{flag} \S+\n(?:\s{{4,}}.*\n)*?\s{{4,}}.*\(default ([^)]+)\)", text, re.M)
            shown = m.group(1) if m else "0s"  # the flag package omits a zero default
            assert shown == format_duration_ns(round(seconds * 1e9)), f"{cmd[0]} {cmd[1]} -{flag}: default {shown}"


def test_the_rbc_band_has_no_second_literal_copy() -> None:
    values = {BAND["low_pct"], BAND["high_pct"]}
    found = []
    for p in tracked(".go"):
        for n, line in go_code_lines(p):
            for lit in re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", line):
                if float(lit) in values:
                    found.append(f"{p.relative_to(REPO)}:{n}: {line.strip()}")
    for p in tracked(".py"):
        for n, lit in py_numbers(p):
            if "." in lit and float(lit) in values:
                found.append(f"{p.relative_to(REPO)}:{n}: {lit}")
    assert not found, "the RBC band is the topology schema's rbc_server default; read it from there:\n" + \
        "\n".join(found)


def test_the_slo_has_no_second_literal_copy() -> None:
    ms = round(SLO["latency"] * 1000)
    found = []
    pattern = re.compile(rf"(?<![\w.]){ms}\s*\*\s*time\.Millisecond|fs\.Duration\(\"(slo|slo-step|slo-window|warmup)\", \d")
    for p in tracked(".go"):
        for n, line in go_code_lines(p):
            if pattern.search(line):
                found.append(f"{p.relative_to(REPO)}:{n}: {line.strip()}")
    for p in tracked(".py"):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            # slo_ms = 150, slo: float = 0.15, Field(150.0, ...) assigned to an slo name
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in targets]
                if any(re.search(r"(?i)(^|_)slo(_|$)", n) for n in names) and node.value is not None and any(
                        isinstance(c, ast.Constant) and isinstance(c.value, (int, float)) and not isinstance(
                            c.value, bool) and c.value != 0 for c in ast.walk(node.value)):
                    found.append(f"{p.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)[:100]}")
    assert not found, "the SLO settings are the schema's slo defaults (config.DefaultSLO, " \
        "PolicyContext.slo); read them from there:\n" + "\n".join(found)


def test_the_tax_default_lives_in_one_place() -> None:
    found = []
    for p in (REPO / "controller" / "robinhood_controller").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and "tax" in node.target.id
                    and isinstance(node.value, ast.Call) and node.value.args
                    and isinstance(node.value.args[0], ast.Constant)):
                found.append(f"{p.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)[:100]}")
    assert not found, "a tax parameter's default is policies.robinhood.TAX:\n" + "\n".join(found)
    taxed = [d for d in policies.describe() for q in d["params"] if q["name"] == "tax"]
    assert taxed and all(q["default"] == TAX for d in taxed for q in d["params"] if q["name"] == "tax")


def test_the_literal_finders_find_a_copy(tmp_path: Path) -> None:
    # The checks above cannot pass by not looking: the finders see planted copies and
    # skip comments.
    py = tmp_path / "x.py"
    py.write_text("# 98.5 in a comment\nband = (98.5, 'x')\n")
    assert [n for n, lit in py_numbers(py) if float(lit) == BAND["low_pct"]] == [2]
    go = tmp_path / "x.go"
    go.write_text("// 99.5 in a comment\nx := 99.5 /* 98.5 */\n/*\n98.5\n*/\n")
    assert [(n, line.strip()) for n, line in go_code_lines(go) if "9" in line] == [(2, "x := 99.5")]
