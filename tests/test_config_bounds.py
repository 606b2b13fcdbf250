"""Every command that reads a configuration file refuses one beyond the bounds
(docs/topology.md, "Limits") with one line naming the problem and exit status 2, in
bounded memory, reading no more of a large file than the bound: the Go commands
(topocheck, appserver, rbcserver) and the Python ones (the controller, the testbed) on
the generated cases of tests/config/generated.json and the committed alias bombs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import go_binary

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "config"
GENERATED = json.loads((CASES / "generated.json").read_text())["cases"]
BOMBS = sorted((CASES / "topology" / "invalid").glob("alias*.yaml"))


def commands(kind: str, path: Path) -> dict[str, list[str]]:
    py = [sys.executable, "-m"]
    if kind == "experiment":
        return {"topocheck": [str(go_binary("topocheck")), "--experiment", str(path)],
                "robinhood-testbed": [*py, "robinhood_testbed.cli", "compare", "--experiment", str(path)]}
    return {"topocheck": [str(go_binary("topocheck")), str(path)],
            "appserver": [str(go_binary("appserver")), "--topology", str(path), "--id", "app0", "--check"],
            "rbcserver": [str(go_binary("rbcserver")), "--topology", str(path)],
            "robinhood-controller": [*py, "robinhood_controller.cli", "plan", "--topology", str(path), "--id", "app0"],
            "robinhood-testbed": [*py, "robinhood_testbed.cli", "up", "--topology", str(path)]}


def cases(tmp: Path) -> list[tuple[str, str, Path, str]]:
    out = []
    for c in GENERATED:
        path = tmp / f"{c['name']}.yaml"
        path.write_text(c["head"] + c["repeat"] * c["times"] + c["tail"])
        out.append((c["name"], c["kind"], path, c["expect"]))
    for p in BOMBS:
        out.append((p.stem, "topology", p, p.read_text().split("\n", 1)[0].removeprefix("# expect: ")))
    return out


def test_every_command_refuses_what_is_beyond_the_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert BOMBS, "tests/config/topology/invalid lost its alias bombs"
    report = []
    for name, kind, path, expect in cases(tmp_path):
        for cmd_name, cmd in commands(kind, path).items():
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # a hang guard, not a target
            wall = time.perf_counter() - t0
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert r.returncode == 2, f"{cmd_name} on {name}: exit {r.returncode}\n{r.stderr[-2000:]}"
            assert len(lines) == 1 and lines[0].endswith(expect), f"{cmd_name} on {name}:\n{r.stderr[-2000:]}"
            report.append(f"{cmd_name:22} {name:40} {wall:5.2f} s")
    with capsys.disabled():
        print("\n" + "\n".join(report))


def test_refusing_takes_bounded_memory(tmp_path: Path) -> None:
    """Peak resident memory of a Go and a Python reader refusing the largest cases."""
    case = next(c for c in cases(tmp_path) if c[0] == "many_nodes_without_aliases")
    _, _, path, _ = case
    for cmd in (commands("topology", path)["topocheck"], commands("topology", path)["robinhood-controller"]):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        rss_mib = ru.ru_maxrss / 1024
        assert os.waitstatus_to_exitcode(status) == 2
        # The defects this holds off grew to 6 and 16 GB.
        assert rss_mib < 512, f"{cmd[0]}: {rss_mib:.0f} MiB"
