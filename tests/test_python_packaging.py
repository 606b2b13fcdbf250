"""Every Python distribution of the repository installs alone into a fresh virtualenv,
the way its docs say (`pip install PATH`), and depends on ranges, never on pins or on a
project-internal name that a public index could serve (docs/architecture.md)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The distributions: folder -> (name, a command its console script answers, modules it imports).
DISTRIBUTIONS = {
    ".": ("robinhood", ["robinhood-controller", "policies"],
          ["robinhood_controller.cli", "robinhood_common.contract", "robinhood.v1.policy_pb2"]),
    "reporter/python": ("robinhood-report", ["robinhood-report", "--help"], ["robinhood_report"]),
}


def pyprojects() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*pyproject.toml"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return [REPO / p for p in out.split()]


def test_the_distributions_are_the_ones_listed_here() -> None:
    assert sorted(str(p.parent.relative_to(REPO)) for p in pyprojects()) == sorted(DISTRIBUTIONS)


@pytest.mark.parametrize("folder", sorted(DISTRIBUTIONS))
def test_dependencies_are_ranges_of_public_packages(folder: str) -> None:
    project = tomllib.loads((REPO / folder / "pyproject.toml").read_text())["project"]
    deps = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        deps += extra
    internal = {tomllib.loads(p.read_text())["project"]["name"] for p in pyprojects()} | {
        "robinhood-proto", "robinhood-common", "robinhood-controller", "robinhood-testbed"}
    for dep in deps:
        name = re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0]
        assert name not in internal, f"{folder}: {dep!r} names a project-internal package"
        assert "==" not in dep and ">=" in dep, f"{folder}: {dep!r} is not a range with a lower bound"


@pytest.mark.parametrize("folder", sorted(DISTRIBUTIONS))
def test_installs_alone_into_a_fresh_virtualenv(folder: str, tmp_path: Path) -> None:
    name, command, modules = DISTRIBUTIONS[folder]
    # A copy of the tracked files: an install builds in its source folder.
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file() and (folder == "." or rel.startswith(folder + "/")):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                          str(src / folder)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=freeze"], capture_output=True, text=True,
                            check=True).stdout
    ours = sorted(line.split("==")[0] for line in listed.splitlines() if line.lower().startswith("robinhood"))
    assert ours == [name], f"installed {ours}, want only {name}"
    imp = subprocess.run([str(venv / "bin" / "python"), "-c", "; ".join(f"import {m}" for m in modules)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert imp.returncode == 0, imp.stderr
    run = subprocess.run([str(venv / "bin" / command[0]), *command[1:]], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout, run.stdout + run.stderr
    if folder == ".":
        # The testbed's own dependencies are an extra: without them it says what to install.
        tb = subprocess.run([str(venv / "bin" / "robinhood-testbed"), "--help"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
        assert tb.returncode == 2 and "pip install 'robinhood[testbed]'" in tb.stderr, tb.stderr
