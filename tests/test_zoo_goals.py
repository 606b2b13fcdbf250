"""scripts/zoo_goals.py, the maintainer's check of a candidate policy against the goals
the recommended policy is held to (docs/zoo.md, "Judging a candidate"), on known rows."""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("zoo_goals", REPO / "scripts" / "zoo_goals.py")
assert _spec is not None and _spec.loader is not None
zoo_goals = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo_goals)


def test_goals_on_known_rows(tmp_path: Path) -> None:
    table = {  # seed: arm -> violation %
        1: {"oracle": 0.0, "oracle-reactive": 20.0, "robinhood": 30.0, "static": 40.0, "cand": 10.0},
        2: {"oracle": 10.0, "oracle-reactive": 12.0, "robinhood": 11.0, "static": 40.0, "cand": 14.0},
        3: {"oracle": 0.0, "oracle-reactive": 0.0, "robinhood": 0.0, "static": 0.0, "cand": 9.0},
        4: {"oracle": 5.0, "oracle-reactive": 30.0, "robinhood": 50.0, "static": 60.0, "cand": 35.0},
    }
    with open(tmp_path / "zoo.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["experiment", "seed", "family", "class", "arm", "violation_pct"])
        w.writeheader()
        for seed, arms in table.items():
            for arm, v in arms.items():
                w.writerow({"experiment": "", "seed": seed, "family": "drop", "class": "margin", "arm": arm,
                            "violation_pct": v})
        w.writerow({"experiment": "", "seed": 5, "family": "drop", "class": "infeasible", "arm": "cand",
                    "violation_pct": 99})
    per, _ = zoo_goals.load(tmp_path, [])
    assert sorted(per) == [("", 1), ("", 2), ("", 3), ("", 4)]  # the infeasible scenario is left out
    g = zoo_goals.goals(per, "cand", ["robinhood", "static"])
    assert "on 2 of 4" in g[0] and "**not met**" in g[0]       # seeds 1, 2 within 3 of the reactive oracle
    assert "on 1 of the 2" in g[1] and ": met" in g[1]         # seeds 1 and 4 need foresight; seed 1 is beaten
    assert "median 12.0%" in g[2] and "= 7.5" in g[2] and "**not met**" in g[2]  # oracle median 2.5
    assert "worse than robinhood on 2 of 4" in g[3] and "by up to 9.0" in g[3]   # seeds 2 (3 points) and 3 (9)
    assert "worse than static on 1 of 4" in g[4]                                 # seed 3
