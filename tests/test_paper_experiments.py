"""The paper-scale experiment files are what scripts/paper-experiments.py writes, and
each is a valid experiment whose scenario names only its backends."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from robinhood_common.experiment import load

REPO = Path(__file__).resolve().parents[1]
FILES = sorted((REPO / "examples" / "paper").glob("*.yaml"))


def test_the_files_are_generated_and_current() -> None:
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "paper-experiments.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert len(FILES) == 8  # seven of the paper's experiments and the exact engine's window


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_file_is_a_paper_scale_experiment(path: Path) -> None:
    exp = load(path)
    # The window (spike-window.yaml) is the paper's system over 22 minutes with a
    # 5-minute warm-up; every other file runs four hours with a one-hour warm-up.
    duration, warmup = (22 * 60, 5 * 60) if path.stem == "spike-window" else (4 * 3600, 3600)
    assert exp.cache.app_servers == 16 and len(exp.backends) == 20 and exp.duration == duration
    assert exp.slo.warmup == warmup and exp.controller.interval == 5
    assert exp.sim.generate and exp.sim.sample == 0.01
    names = {b.name for b in exp.backends}
    for ev in (exp.scenario_data() or {}).get("events", []):
        assert ev["backend"] in names
