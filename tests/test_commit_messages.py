"""Commit messages a reader can scan: every commit since the rule was set has a subject
of at most 72 characters and its detail in the body (scripts/check-commit-msg.py, which
the commit-msg hook `make` installs also runs)."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The first commit made under the rule; older subjects are as they were.
RULE_SET = "b90f13a"

_spec = importlib.util.spec_from_file_location("check_commit_msg", REPO / "scripts" / "check-commit-msg.py")
assert _spec is not None and _spec.loader is not None
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


def test_the_rule() -> None:
    assert check.problems("Add the thing\n\nWhy and how, at length.\n") == []
    assert check.problems("Add the thing\n# a git comment\n") == []
    assert check.problems("x" * 72) == []
    assert "73 characters" in check.problems("x" * 73)[0]
    assert "not blank" in check.problems("Add the thing\nand more on line two\n")[0]
    assert "empty" in check.problems("\n\nbody only\n")[0]


def test_every_commit_since_the_rule() -> None:
    git = subprocess.run(["git", "rev-parse", "--verify", "--quiet", RULE_SET + "^{commit}"], cwd=REPO,
                         capture_output=True, text=True)
    if git.returncode != 0:
        pytest.skip(f"{RULE_SET} is not in this clone's history (a shallow clone)")
    res = subprocess.run(["python3", str(REPO / "scripts" / "check-commit-msg.py"), "--since", RULE_SET + "^"],
                         cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_make_installs_the_hook() -> None:
    text = (REPO / "Makefile").read_text()
    assert "core.hooksPath .githooks" in text
    assert (REPO / ".githooks" / "commit-msg").stat().st_mode & 0o111
