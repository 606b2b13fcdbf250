#!/usr/bin/env python3
"""Check a commit message: a subject of at most 72 characters that says what changed,
then (when there is more) a blank line and the detail in the body.

  scripts/check-commit-msg.py FILE     check a message file (the commit-msg hook)
  scripts/check-commit-msg.py --since REV
                                       check every commit after REV on this branch

`make` installs .githooks/commit-msg, which runs the first form; tests/test_commit_messages.py
runs the second on every commit since the rule was set.
"""
from __future__ import annotations

import subprocess
import sys

MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with a commit message (git's comment lines and trailing blank
    lines are not part of it)."""
    lines = [ln.rstrip() for ln in message.splitlines() if not ln.startswith("#")]
    while lines and not lines[-1]:
        lines.pop()
    if not lines or not lines[0].strip():
        return ["the subject (first line) is empty"]
    out = []
    if len(lines[0]) > MAX_SUBJECT:
        out.append(f"the subject is {len(lines[0])} characters, at most {MAX_SUBJECT}: put the detail in the body "
                   f"(after a blank line): {lines[0][:MAX_SUBJECT]}…")
    if len(lines) > 1 and lines[1]:
        out.append("the second line is not blank: the body starts after a blank line")
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--since":
        revs = subprocess.run(["git", "rev-list", "--no-merges", f"{argv[1]}..HEAD"], capture_output=True,
                              text=True, check=True).stdout.split()
        bad = 0
        for rev in revs:
            msg = subprocess.run(["git", "log", "-1", "--format=%B", rev], capture_output=True, text=True,
                                 check=True).stdout
            for p in problems(msg):
                print(f"commit {rev[:12]}: {p}", file=sys.stderr)
                bad += 1
        return 1 if bad else 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        found = problems(f.read())
    for p in found:
        print(f"commit message: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
