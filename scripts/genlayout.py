#!/usr/bin/env python3
"""The layout table of docs/architecture.md, generated from the tree.

Every folder holding tracked files (`git ls-files`), the top-level folders and their
direct subfolders (hidden folders left out), gets one row: its path, a one-line
description taken from the folder itself, and the languages of the files below it.
The description is, in this order:

1. a Go package's doc comment, first sentence (the comment right above `package x` in
   any non-test .go file of the folder, doc.go first; in a package of tests only, its
   test files);
2. a Python package's `__init__.py` docstring, first line;
3. the first line of a README.md in the folder (a heading's text);
4. a Python distribution's `description` in the folder's pyproject.toml.

A folder with none of these is an error naming it: give it a doc comment, a docstring
or a one-line README.md. Folders deeper than two levels (e.g. the generated
proto/robinhood/v1) are described by their parent's row.

The table goes between "<!-- BEGIN GENERATED FROM the tree (make layout); do not edit -->"
and the next "<!-- END GENERATED -->" in docs/architecture.md.

  scripts/genlayout.py                   write it
  scripts/genlayout.py --check           fail (exit 1) when the committed table is stale
  scripts/genlayout.py --root DIR        another work tree (default: this repository)
  scripts/genlayout.py --doc FILE        another document (default: ROOT/docs/architecture.md;
                                         its links stay relative to docs/)
"""
from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

BEGIN = "<!-- BEGIN GENERATED FROM the tree (make layout); do not edit -->"
END = "<!-- END GENERATED -->"
DEPTH = 2

LANGUAGES = {
    ".go": "Go", ".py": "Python", ".pyi": "Python", ".proto": "proto", ".yaml": "YAML",
    ".yml": "YAML", ".sh": "shell", ".md": "Markdown", ".json": "JSON", ".jsonl": "JSON",
    ".png": "PNG", ".toml": "TOML", ".csv": "CSV",
}
# A period ends a sentence unless it ends one of these.
ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "etc.", "vs.", "al.", "Fig.", "Figs.", "Eq.")


class LayoutError(Exception):
    pass


def tracked_files(root: Path) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise LayoutError(f"{root}: git ls-files failed: {getattr(e, 'stderr', '') or e}") from e
    return [f for f in out.split("\0") if f]


def folders(files: list[str]) -> dict[str, list[str]]:
    """Folder (depth 1..DEPTH) -> the tracked files below it."""
    below: dict[str, list[str]] = {}
    for f in files:
        parts = f.split("/")[:-1]
        if not parts or any(p.startswith(".") for p in parts):
            continue
        for depth in range(1, min(DEPTH, len(parts)) + 1):
            below.setdefault("/".join(parts[:depth]), []).append(f)
    return below


def first_sentence(text: str) -> str:
    """The first sentence of the first paragraph (Go's rule for a synopsis)."""
    text = " ".join(re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0].split())
    for m in re.finditer(r"[.!?](?=\s|$)", text):
        end = m.end()
        if not any(text[:end].endswith(a) for a in ABBREVIATIONS):
            return text[:end]
    # A paragraph that introduces an example ends with a colon: end the sentence there.
    return text[:-1] + "." if text.endswith(":") else text


def go_doc(path: Path) -> str | None:
    """The package doc comment of one Go file: the comment block right above `package`."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for i, line in enumerate(lines):
        if re.match(r"package\s+\w+", line):
            break
    else:
        return None
    block: list[str] = []
    j = i - 1
    if j >= 0 and lines[j].strip().endswith("*/"):
        while j >= 0 and "/*" not in lines[j]:
            block.insert(0, lines[j])
            j -= 1
        if j < 0:
            return None
        block.insert(0, lines[j])
        text = "\n".join(block)
        text = text[text.index("/*") + 2:text.rindex("*/")]
    else:
        while j >= 0 and lines[j].startswith("//"):
            block.insert(0, lines[j][2:].strip())
            j -= 1
        text = "\n".join(b for b in block if not b.startswith("go:") and not b.startswith("+build"))
    text = text.strip()
    if not text or text.startswith("Code generated"):
        return None
    return first_sentence(text)


def describe(root: Path, folder: str, files: list[str]) -> str | None:
    d = root / folder
    direct = sorted(f for f in files if f.rsplit("/", 1)[0] == folder)
    gos = [f for f in direct if f.endswith(".go") and not f.endswith("_test.go")]
    if not gos:  # a package of tests only (tests/e2e): its tests carry the doc comment
        gos = [f for f in direct if f.endswith(".go")]
    gos.sort(key=lambda f: (not f.endswith("/doc.go"), f))
    for f in gos:
        doc = go_doc(root / f)
        if doc:
            return doc
    init = d / "__init__.py"
    if f"{folder}/__init__.py" in direct and init.is_file():
        try:
            doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        except SyntaxError:
            doc = None
        if doc and doc.strip():
            return doc.strip().splitlines()[0].strip()
    readme = d / "README.md"
    if f"{folder}/README.md" in direct and readme.is_file():
        for line in readme.read_text(encoding="utf-8").splitlines():
            line = line.strip().lstrip("#").strip()
            if line:
                return line
    pyproject = d / "pyproject.toml"
    if f"{folder}/pyproject.toml" in direct and pyproject.is_file():
        try:
            desc = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("description")
        except tomllib.TOMLDecodeError:
            desc = None
        if desc and desc.strip():
            return desc.strip()
    return None


def language(path: str) -> str | None:
    name = Path(path).name
    if name == "README.md":  # the description files say nothing about a folder's contents
        return None
    if name.startswith("Dockerfile"):
        return "Dockerfile"
    return LANGUAGES.get(Path(path).suffix)


def languages(files: list[str]) -> str:
    count = Counter(language(f) for f in files)
    count.pop(None, None)
    return ", ".join(lang for lang, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))[:3])


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(root: Path) -> str:
    below = folders(tracked_files(root))
    missing = []
    rows = ["| folder | what (from the folder itself) | files |", "|---|---|---|"]
    for folder in sorted(below):
        desc = describe(root, folder, below[folder])
        if desc is None:
            missing.append(folder)
            continue
        # Links are relative to docs/architecture.md, wherever the document being checked is.
        rows.append(f"| [`{folder}/`](../{folder}) | {cell(desc)} | {languages(below[folder])} |")
    if missing:
        raise LayoutError("no description for " + ", ".join(f"{m}/" for m in missing)
                          + ": give each a Go package doc comment, an __init__.py docstring or a"
                          " one-line README.md")
    return "\n".join(rows)


def splice(text: str, body: str, doc: Path) -> str:
    start = text.find(BEGIN)
    if start < 0:
        raise LayoutError(f"{doc}: no marker {BEGIN!r}")
    head = start + len(BEGIN)
    end = text.find(END, head)
    if end < 0:
        raise LayoutError(f"{doc}: no {END!r} after {BEGIN!r}")
    return text[:head] + "\n" + body + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when the table is stale; write nothing")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the work tree (default: this repository)")
    ap.add_argument("--doc", type=Path, help="the document (default: ROOT/docs/architecture.md)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    doc = (args.doc or root / "docs" / "architecture.md").resolve()
    try:
        text = doc.read_text(encoding="utf-8")
        new = splice(text, table(root), doc)
    except (LayoutError, OSError) as e:
        print(f"genlayout: {e}", file=sys.stderr)
        return 1
    if args.check:
        if new != text:
            print(f"genlayout: the layout table in {doc} is stale (the tree's folders or their"
                  " descriptions changed); run `make layout` (scripts/genlayout.py) and commit the result."
                  " Rows that differ (- committed, + from the tree):", file=sys.stderr)
            old_rows, new_rows = set(text.splitlines()), set(new.splitlines())
            for line in [l for l in text.splitlines() if l not in new_rows][:10]:
                print(f"  - {line}", file=sys.stderr)
            for line in [l for l in new.splitlines() if l not in old_rows][:10]:
                print(f"  + {line}", file=sys.stderr)
            return 1
        return 0
    if new != text:
        doc.write_text(new, encoding="utf-8")
        print(f"genlayout: wrote the layout table in {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
