"""The tree's size budgets (docs/architecture.md, "Size budgets"): the reference pages stay
short enough to read, and the experiment side (experiment/, sim/, scripts/) stays smaller
than the product it evaluates and within its line budget. A budget that fails is a
prompt to move a derivation to docs/notebook/ or to fold code, not to raise the number
without a line in the notebook saying why."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Reference pages: docs/*.md (docs/notebook/ holds dated runs and derivations).
REFERENCE_TOTAL = 6000
REFERENCE_PAGE = 600
ALGORITHMS_PAGE = 500
# The experiment side's source lines outside tests (see source_lines).
EXPERIMENT_SIDE = ("experiment/", "sim/", "scripts/")
EXPERIMENT_BUDGET = 19_500

SOURCE = re.compile(r"\.(go|py|sh)$")
NOT_SOURCE = re.compile(
    r"(_test\.go$|(^|/)tests?/|(^|/)test_[^/]*\.py$|(^|/)testdata/|(^|/)conftest\.py$|"
    r"(^|/)testutil/|\.pb\.go$|_pb2(_grpc)?\.pyi?$)")


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True,
                         timeout=60).stdout.decode()
    return [f for f in out.split("\0") if f]


def source_lines(files: list[str]) -> dict[str, int]:
    """Lines of each tracked source file (Go, Python, shell) that is not a test, test
    helper or generated code."""
    out = {}
    for f in files:
        if SOURCE.search(f) and not NOT_SOURCE.search(f) and (REPO / f).is_file():
            out[f] = len((REPO / f).read_bytes().splitlines())
    return out


def test_reference_pages_stay_short() -> None:
    pages = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (REPO / "docs").glob("*.md")}
    long = {n: k for n, k in pages.items() if k > REFERENCE_PAGE}
    assert not long, f"reference pages over {REFERENCE_PAGE} lines: {long}; move derivations to docs/notebook/"
    assert pages["algorithms.md"] <= ALGORITHMS_PAGE, f"docs/algorithms.md: {pages['algorithms.md']} lines"
    assert sum(pages.values()) <= REFERENCE_TOTAL, f"docs/*.md: {sum(pages.values())} lines in all"


def test_the_experiment_side_is_smaller_than_the_product() -> None:
    lines = source_lines(tracked())
    exp = sum(n for f, n in lines.items() if f.startswith(EXPERIMENT_SIDE))
    product = sum(n for f, n in lines.items() if not f.startswith(EXPERIMENT_SIDE))
    assert exp < product, f"the experiment side has {exp} source lines, the product {product}"
    biggest = sorted(((n, f) for f, n in lines.items() if f.startswith(EXPERIMENT_SIDE)), reverse=True)[:5]
    assert exp <= EXPERIMENT_BUDGET, (
        f"the experiment side has {exp} source lines outside tests, over its budget of "
        f"{EXPERIMENT_BUDGET}; the largest files: {biggest}")


def test_the_count_skips_tests_and_generated_code() -> None:
    files = ["sim/sim.go", "sim/sim_test.go", "experiment/testbed/tests/test_zoo.py",
             "scripts/test_x.py", "lib/testutil/ports.go", "proto/robinhood/v1/x.pb.go",
             "controller/robinhood_controller/pb/x_pb2.py", "docs/algorithms.md"]
    kept = [f for f in files if SOURCE.search(f) and not NOT_SOURCE.search(f)]
    assert kept == ["sim/sim.go"]
