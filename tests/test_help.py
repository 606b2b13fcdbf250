"""Every command answers --help with its usage and exit status 0, and the usage speaks
of commands, flags and docs/ pages, never of a source file."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import go_binary

REPO = Path(__file__).resolve().parents[1]


def go_commands() -> list[str]:
    out = subprocess.run(["go", "list", "-f", '{{if eq .Name "main"}}{{.ImportPath}}{{end}}', "./..."], cwd=REPO,
                         capture_output=True, text=True, check=True, timeout=300).stdout
    return sorted(line.rsplit("/", 1)[1] for line in out.split())


PYTHON_COMMANDS = {
    "robinhood-controller": ["robinhood_controller.cli"],
    "robinhood-testbed": ["robinhood_testbed.cli"],
    "robinhood-report": ["robinhood_report.cli"],
}
SOURCE_FILE = re.compile(r"\b[\w/]+\.(go|py)\b")


def check(cmd: list[str]) -> None:
    r = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60)
    text = r.stdout + r.stderr
    assert r.returncode == 0, f"{cmd} --help: exit {r.returncode}\n{text}"
    assert "usage" in text.lower() or "Usage" in text, f"{cmd} --help printed no usage:\n{text}"
    assert not SOURCE_FILE.search(text), f"{cmd} --help points at a source file: {SOURCE_FILE.search(text)}"


@pytest.mark.parametrize("name", go_commands())
def test_go_commands(name: str) -> None:
    check([str(go_binary(name))])


@pytest.mark.parametrize("name", sorted(PYTHON_COMMANDS))
def test_python_commands(name: str) -> None:
    check([sys.executable, "-m", *PYTHON_COMMANDS[name]])


@pytest.mark.parametrize(("name", "doc"), [("appserver", "appserver.md"), ("rbcserver", "rbcserver.md"),
                                           ("backend", "backends.md")])
def test_every_server_flag_is_documented(name: str, doc: str) -> None:
    text = subprocess.run([str(go_binary(name)), "--help"], capture_output=True, text=True, timeout=60).stderr
    flags = re.findall(r"^  -([a-z][a-z0-9-]*)", text, re.M)
    page = (REPO / "docs" / doc).read_text()
    assert len(flags) > 5
    missing = [f for f in flags if not re.search(rf"`--{re.escape(f)}\b", page)]
    assert not missing, f"docs/{doc} does not document {', '.join('--' + f for f in missing)}"
