"""Every relative link in README.md, docs/*.md and docs/notebook/ resolves: its file or
folder is in the repository (tracked by git, inside the working tree: never a document
outside it), and its #anchor is a heading (GitHub's slug) or an <a id> of the page it
names. docs/README.md is the index of docs/: it links every page and folder there."""
from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((DOCS / "notebook").rglob("*.md"))]

FENCE = re.compile(r"^ {0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); text may hold one level of brackets (a code span
# with [ ] was removed before); the target ends at whitespace (a title may follow).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose_lines(text: str, blank_code: bool = True) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1, with code spans blanked
    (no link is in one) unless blank_code is false."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((i, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line) if blank_code else line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the text without markup, lower case, every
    character but letters, marks, digits, '_', '-' and spaces dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    return anchors_of(page.read_text(encoding="utf-8"))


def anchors_of(text: str) -> frozenset[str]:
    """Every anchor of a page's text: its headings' slugs (a repeated one numbered -1, -2,
    … as GitHub does) and its <a id> / <a name> anchors."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in prose_lines(text, blank_code=False):
        if m := HEADING.match(line):
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    out.update(HTML_ID.findall(text))
    return frozenset(out)


@cache
def tracked() -> frozenset[str]:
    """The repository's tracked files and every folder holding one (relative paths);
    the files of this working tree when git is not there."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True,
                               timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file() and ".git" not in p.parts]
    out = set()
    for f in filter(None, files):
        out.add(f)
        out.update(str(p) for p in Path(f).parents if str(p) != ".")
    return frozenset(out)


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """Each relative link of page (or of text, as if it were page's) that does not
    resolve, as 'page:line: target: why'."""
    if text is None:
        text = page.read_text(encoding="utf-8")
    bad = []
    for n, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:, …
                continue
            path, _, anchor = target.partition("#")
            where = f"{page.relative_to(REPO)}:{n}: {target}"
            dest = (page.parent / path).resolve() if path else page
            try:
                rel = str(dest.relative_to(REPO))
            except ValueError:
                bad.append(f"{where}: outside the repository")
                continue
            if dest != page and rel not in tracked():
                bad.append(f"{where}: no such file or folder in the repository ({rel})")
                continue
            if anchor and dest.suffix == ".md" and anchor not in (anchors_of(text) if dest == page else anchors(dest)):
                bad.append(f"{where}: {dest.relative_to(REPO)} has no heading or <a id> for #{anchor}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    bad = broken_links(page)
    assert not bad, "\n".join(bad)


def test_the_checker_finds_what_is_broken() -> None:
    assert slug("Capturing a memcached's lookups: `tracegen capture`") == "capturing-a-memcacheds-lookups-tracegen-capture"
    assert slug("Which policy to run (roles)") == "which-policy-to-run-roles"
    assert slug("Relief — the policy_x [link](x.md)") == "relief--the-policy_x-link"
    text = ("# Probe\n\n## Twice\n\n## Twice\n\n"
            "[ok](security.md#turning-it-on) [ok](#twice-1) [ok](../README.md) [ok](img) "
            "[ok](https://example.com/x#y) `[not a link](nowhere.md)`\n"
            "[gone](nowhere.md) [bad anchor](security.md#no-such-heading) [far](../../elsewhere/x.md) "
            "[self](#missing)\n```\n[in a code block](nowhere.md)\n```\n")
    bad = broken_links(DOCS / "probe.md", text)  # as a page of docs/ (never written there)
    assert [b.split(": ", 1)[1].split(":")[0] for b in bad] == [
        "nowhere.md", "security.md#no-such-heading", "../../elsewhere/x.md", "#missing"], bad


def test_the_docs_index_links_every_page() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = {t.partition("#")[0].split("/")[0] for _, line in prose_lines(index) for t in LINK.findall(line)}
    want = {p.name for p in DOCS.iterdir() if p.name != "README.md" and (p.suffix == ".md" or p.is_dir())}
    missing = sorted(want - linked)
    assert not missing, f"docs/README.md does not link {missing}: give each page its line"
