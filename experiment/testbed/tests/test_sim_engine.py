"""The simulator as the testbed's second engine: `compare --engine sim` runs bin/sim
on the testbed's own arms, trace, topologies and report, with the controller's own
policy code behind `robinhood-controller policy-server`."""
from __future__ import annotations

import json
import re
import shlex
import subprocess

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from robinhood_controller import policies
from test_testbed_e2e import TINY, cli_args


@pytest.fixture
def built(gobin: Callable[[str], Path]) -> None:
    for name in ("sim", "tracegen", "appserver"):
        gobin(name)


def run_sim(tmp_path: Path, out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    exp = tmp_path / "tiny.yaml"
    exp.write_text(yaml.safe_dump(TINY))
    return subprocess.run(cli_args("compare", "--engine", "sim", "--experiment", str(exp), "--out",
                                   str(tmp_path / out), "--policies", "all", *extra),
                          capture_output=True, text=True, timeout=600)


def test_every_policy_in_the_simulator(tmp_path: Path, built: None) -> None:
    # Two arms at a time (the runs are independent processes; the results do not depend on it).
    res = run_sim(tmp_path, "a", "--jobs", "2")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = tmp_path / "a"
    arms = [*policies.names(), "shared"]  # --policies all: every registered policy
    for arm in arms:
        d = out / arm
        summary = json.loads((d / "replay" / "summary.json").read_text())
        assert summary["sent"] > 1500 and summary["slo"]["points_counted"] > 5, arm
        assert (d / "rbc.jsonl").read_text().count("\n") >= 20, f"{arm}: one RBC line a simulated second"
        result = json.loads((d / "result.json").read_text())
        assert result["engine"] == "sim" and set(result["hit_ratio"]) == {"alpha", "beta"}
        sim = json.loads((d / "sim.json").read_text())
        assert sim["requests"] == summary["sent"]
        if arm != "shared":
            ticks = [json.loads(line) for line in (d / "controller-app0.jsonl").read_text().splitlines()]
            assert len(ticks) >= 20, f"{arm}: one tick a simulated second"
            for t in ticks:
                limits = [p["limit_bytes"] for p in t["partitions"].values()]
                assert sum(limits) == 40 << 20 and min(limits) >= 16 << 20, f"{arm}: limits {limits}"
    # RobinHood moves space to beta, whose rate drops to 40 queries/s at 10 s.
    ticks = [json.loads(line) for line in (out / "robinhood" / "controller-app0.jsonl").read_text().splitlines()]
    assert ticks[-1]["partitions"]["beta"]["target_bytes"] > ticks[0]["partitions"]["beta"]["target_bytes"]
    assert (out / "report.html").is_file() and (out / "comparison.md").read_text().count("\n") == len(arms) + 2

    # Deterministic: the same experiment again gives the same files.
    res = run_sim(tmp_path, "b", "--jobs", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    def summary(folder: Path) -> dict:
        s = json.loads((folder / "replay" / "summary.json").read_text())
        s.pop("trace"), s["scenario"].pop("file")  # the folders' own paths
        return s

    for arm in arms:
        assert summary(out / arm) == summary(tmp_path / "b" / arm), arm
        assert (out / arm / "rbc.jsonl").read_text() == (tmp_path / "b" / arm / "rbc.jsonl").read_text(), arm

    # versus: a folder against itself differs by nothing.
    res = subprocess.run(cli_args("versus", "--testbed", str(out), "--sim", str(tmp_path / "b"),
                                  "--plot", str(tmp_path / "vs.png")), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Largest difference: 0.0 percentage points; the two engines rank the arms alike." in res.stdout
    assert (tmp_path / "vs.png").read_bytes()[:4] == b"\x89PNG"
    res = subprocess.run(cli_args("versus", "--testbed", str(out), "--sim", str(tmp_path / "b"), "--labels",
                                  "exact,miniature"), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "| arm | exact viol. % | miniature viol. % |" in res.stdout, res.stderr
    res = subprocess.run(cli_args("versus", "--testbed", str(out), "--sim", str(tmp_path / "b"), "--labels",
                                  "exact"), capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "--labels: 'exact' is not two comma-separated names" in res.stderr


def test_sim_engine_bad_flags(tmp_path: Path, built: None) -> None:
    res = run_sim(tmp_path, "c", "--prometheus")
    assert res.returncode == 2 and "--prometheus: the simulator runs no processes" in res.stderr
    res = run_sim(tmp_path, "d", "--sample", "2")
    assert res.returncode == 2 and "--sample: 2 is not in (0, 1]" in res.stderr
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()
    exp = tmp_path / "tiny.yaml"
    res = subprocess.run(cli_args("run", "--experiment", str(exp), "--sample", "0.5", "--out", str(tmp_path / "e")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--sample is for --engine sim" in res.stderr



def test_sweep(tmp_path: Path, built: None) -> None:
    from robinhood_testbed import sweep
    doc = dict(TINY)
    assert sweep.apply(doc, "spike-depth", "0.5")["scenario"]["events"][0]["set"]["rate"] == 20
    assert sweep.apply(doc, "budget", "48")["cache"]["budget_mb"] == 48
    assert doc["cache"]["budget_mb"] == 40, "apply changes a copy"
    exp = tmp_path / "tiny.yaml"
    exp.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "sw"
    res = subprocess.run(cli_args("sweep", "--experiment", str(exp), "--param", "spike-depth", "--values", "0.5,2",
                                  "--seeds", "1,2", "--policies", "robinhood,static", "--out", str(out)),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = (out / "sweep.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 3, "value × seed × arm (robinhood, static, shared)"
    table = (out / "sweep.md").read_text()
    assert "| robinhood |" in table and "spike-depth = 0.5" in table
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    # A deeper cut cannot be easier than a shallower one for the static split.
    static = {r.split(",")[1] + r.split(",")[2]: float(r.split(",")[4]) for r in rows[1:] if ",static," in r}
    assert static["0.51"] >= static["21"] and static["0.52"] >= static["22"]
    # Bad input: named, nothing run.
    for args, msg in ((["--param", "spike-depth", "--values", "deep"], "spike-depth needs numbers"),
                      (["--param", "nope.x", "--values", "1"], "the experiment has no 'nope' block"),
                      (["--param", "budget", "--values", "2"], "the experiment becomes invalid")):
        res = subprocess.run(cli_args("sweep", "--experiment", str(exp), "--seeds", "1", "--policies", "static",
                                      "--out", str(tmp_path / "bad"), *args), capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and msg in res.stderr, (args, res.stderr)
        assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").rglob("summary.json"))


def test_matrix_of_generated_miniatures(tmp_path: Path, built: None) -> None:
    """Two experiments (the trace generated in bin/sim, a miniature) × two seeds, two
    runs at a time: one row per run, the report with the paper's figures beside."""
    doc = {**TINY, "cache": {"budget_mb": 40, "app_servers": 2},
           "sim": {"generate": True, "sample": 0.25, "request_sample": 0.5, "apps": 1}}
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump({**doc, "name": "paper-spikes"}))
    b.write_text(yaml.safe_dump({**doc, "name": "other"}))
    out = tmp_path / "mx"
    res = subprocess.run(cli_args("matrix", "--experiments", f"{a},{b}", "--seeds", "1,2", "--jobs", "2",
                                  "--policies", "robinhood,static", "--cache-modes", "partitioned", "--out", str(out)),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = (out / "matrix.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 2, "experiment × seed × arm"
    md = (out / "matrix.md").read_text()
    assert "## paper-spikes" in md and "## other" in md and "| robinhood |" in md
    assert re.search(r"the runs' wall times sum to \d+\.\d minutes\.", md), md[:400]
    assert "The paper reports: RobinHood, 150 ms P99 SLO violations" in md
    assert (out / "paper-spikes-curves.png").read_bytes()[:4] == b"\x89PNG"
    run = out / "paper-spikes" / "seed-2" / "robinhood"
    sim = json.loads((run / "sim.json").read_text())
    assert sim["engine"] == "miniature" and sim["apps_simulated"] == 1 and sim["sample"] == 0.25
    assert not list(out.rglob("trace.jsonl")), "a generated trace is never written"
    assert "--synth" in (run / "sim.log").read_text()
    # The two seeds are two runs, not one run twice.
    one = json.loads((out / "paper-spikes" / "seed-1" / "robinhood" / "sim.json").read_text())
    assert one["requests"] != sim["requests"]
    # Bad input is named and runs nothing.
    for args, msg in ((["--seeds", "x"], "--seeds: 'x' is not a list of integers"),
                      (["--jobs", "0"], "--jobs: 0 must be at least 1"),
                      (["--policies", "lru"], "'lru' is not one of")):
        res = subprocess.run(cli_args("matrix", "--experiments", str(a), "--out", str(tmp_path / "bad"), *args),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and msg in res.stderr, (args, res.stderr)
        assert not (tmp_path / "bad").exists()
    res = subprocess.run(cli_args("run", "--engine", "sim", "--experiment", str(a), "--policy", "robinhood",
                                  "--full", "--sample", "0.5", "--out", str(tmp_path / "f")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--full simulates every key" in res.stderr
    # --full makes the matrix exact, whatever the experiments' sim blocks say.
    res = subprocess.run(cli_args("matrix", "--experiments", str(a), "--seeds", "1", "--policies", "robinhood",
                                  "--cache-modes", "partitioned", "--full", "--out", str(tmp_path / "fx")),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    exact = json.loads((tmp_path / "fx" / "paper-spikes" / "seed-1" / "robinhood" / "sim.json").read_text())
    assert exact["engine"] == "exact" and exact["sample"] == 1
    # The exact engine runs the shadow models and the generator beside the run; on one
    # goroutine (--serial) it writes the very same files.
    arm = tmp_path / "fx" / "paper-spikes" / "seed-1" / "robinhood"
    cmd = shlex.split((arm / "sim.log").read_text().splitlines()[0][2:])
    serial = tmp_path / "serial"
    cmd[cmd.index("--out") + 1] = str(serial)
    res = subprocess.run([*cmd, "--serial"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    for name in ("replay/summary.json", "rbc.jsonl", "controller-app0.jsonl", "controller-app1.jsonl"):
        assert (serial / name).read_bytes() == (arm / name).read_bytes(), name
    cmd[cmd.index("--out") + 1] = str(tmp_path / "neg")
    res = subprocess.run([*cmd, "--progress", "-1s"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "--progress: -1s must not be negative" in res.stderr
    assert not (tmp_path / "neg").exists()
