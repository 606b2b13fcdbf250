"""The scenario zoo (docs/zoo.md): seeds, the summary and the goals on known rows, and
one small zoo end to end in the simulator (drawn scenarios, their classes, every arm)."""
from __future__ import annotations

import csv
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from robinhood_testbed import zoo
from robinhood_testbed.experiment import ExperimentError
from test_testbed_e2e import cli_args


def test_seeds() -> None:
    assert zoo.parse_seeds("eval") == list(range(1000, 1100))
    assert zoo.parse_seeds("dev") == list(range(1, 41))
    assert zoo.parse_seeds("3-5,9,4") == [3, 4, 5, 9]
    assert zoo.seed_range([1, 999]) == "development"
    assert zoo.seed_range([1000, 1999]) == "evaluation"
    assert zoo.seed_range([5, 1005]) == "mixed"
    for bad, msg in (("x", "not an integer"), ("5-3", "ends before"), ("0", "outside"), ("1990-2001", "outside"),
                     ("a-b", "range"), ("", "at least one")):
        with pytest.raises(ExperimentError, match=msg):
            zoo.parse_seeds(bad)


def test_family_of_reads_the_generators_header() -> None:
    assert zoo.family_of("# Scenario zoo\n# family: drop-recover-drop\n# seed: 4\nevents: []\n") == "drop-recover-drop"
    assert zoo.family_of("events: []\n") == "?"


def rows(table: dict[int, dict[str, float]], cls: str = "margin") -> list[dict[str, Any]]:
    return [{"seed": s, "family": "drop", "class": cls, "arm": a, "violation_pct": v}
            for s, arms in table.items() for a, v in arms.items()]


def test_summary_on_known_rows() -> None:
    table = {
        1: {"oracle": 0.0, "robinhood": 20.0, "lama++": 30.0, "static": 40.0, "cand": 4.0},
        2: {"oracle": 10.0, "robinhood": 12.0, "lama++": 11.0, "static": 40.0, "cand": 10.0},
        3: {"oracle": 10.0, "robinhood": 40.0, "lama++": 50.0, "static": 30.0, "cand": 38.0},
        4: {"oracle": 0.0, "robinhood": 0.0, "lama++": 0.0, "static": 0.0, "cand": 9.0},
    }
    rs = rows(table) + rows({5: {"oracle": 90.0, "robinhood": 95.0, "lama++": 99.0, "static": 99.0, "cand": 99.0}},
                            "infeasible")
    s = {x["arm"]: x for x in zoo.summary(rs)}
    assert s["cand"]["scenarios"] == 4  # the infeasible scenario is left out
    assert s["cand"]["median"] == 9.5 and s["robinhood"]["median"] == 16.0
    assert s["cand"]["p90"] == 38.0  # nearest rank
    assert s["cand"]["best_share"] == 0.5 and s["oracle"]["best_share"] is None  # static is online too (seed 3)
    assert (s["cand"]["worst"], s["cand"]["worst_pct"]) == (("", 3), 38.0)  # 28 points above the oracle
    assert s["cand"]["reaction"] is None  # no reactive oracle in these rows


def test_the_distance_to_the_oracle_splits_into_reaction_and_foresight() -> None:
    table = {
        1: {"oracle": 0.0, "oracle-reactive": 10.0, "a": 12.0, "b": 10.0},
        2: {"oracle": 5.0, "oracle-reactive": 5.0, "a": 5.0, "b": 1.0},   # b beats both oracles by 4 points
        3: {"oracle": 10.0, "oracle-reactive": 30.0, "a": 50.0, "b": 25.0},
    }
    rs = [dict(r, experiment=e) for e in ("zipf", "real") for r in rows(table)]
    s = {x["arm"]: x for x in zoo.summary(rs)}
    assert s["a"]["scenarios"] == 6  # (experiment, seed) is one scenario
    assert s["a"]["reaction"] == (2.0, 20.0) and s["a"]["foresight"] == (10.0, 20.0)
    assert s["a"]["to_oracle"] == (12.0, 40.0)
    assert s["b"]["reaction"] == (-4.0, 0.0) and s["b"]["to_oracle"] == (10.0, 15.0)
    assert sorted(s["b"]["beats_oracle"]) == [("real", 2), ("zipf", 2)] and s["a"]["beats_oracle"] == []
    assert s["oracle"]["reaction"] is None and s["oracle-reactive"]["reaction"] is None
    check = zoo._oracle_check(rs)
    assert "b on real 2 (drop): 1.0 against the oracle's 5.0" in "\n".join(check)
    assert zoo._oracle_check(rows({1: table[1]})) == [
        "No online arm beats the oracle by more than 3 points on any feasible scenario."]


def test_app_servers_cycle_by_seed() -> None:
    assert [zoo.app_servers_of(s, [1, 2, 4]) for s in (1000, 1001, 1002, 1003)] == [2, 4, 1, 2]
    assert zoo.app_servers_of(7, None) is None


@pytest.fixture
def built(gobin: Callable[[str], Path]) -> None:
    for name in ("sim", "tracegen"):
        gobin(name)


SMALL = {
    "name": "small-zoo",
    "seed": 1,
    "duration": "90s",
    "backends": [{"name": n, "type": "kv", "limits": {"workers": 4, "extra_latency_ms": 3}} for n in ("a", "b", "c")],
    "cache": {"budget_mb": 60},
    "controller": {"interval": "1s", "min_partition_mb": 8},
    "rbc_server": {"window": "4s"},
    "slo": {"latency": "100ms", "step": "2s", "window": "6s", "warmup": "10s"},
    "trace": {"synth": {"rate": 60, "params": {"queries-per-request": 6, "keys": 3000, "mean-size": 8192}}},
}


def test_a_small_zoo_in_the_simulator(tmp_path: Path, built: None) -> None:
    exp = tmp_path / "small.yaml"
    exp.write_text(yaml.safe_dump(SMALL))
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(dict(SMALL, name="other-keys", trace={"synth": {"rate": 60, "params": {
        "queries-per-request": 6, "keys": 2000, "zipf": 0.7, "mean-size": 8192}}})))
    out = tmp_path / "z"
    res = subprocess.run(cli_args("zoo", "--experiment", f"{exp},{other}", "--seeds", "1-2", "--app-servers", "1,2",
                                  "--policies", "static,oracle,oracle-reactive", "--cache-modes", "partitioned,shared",
                                  "--jobs", "2", "--out", str(out)), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    with open(out / "zoo.csv") as f:
        got = list(csv.DictReader(f))
    assert len(got) == 2 * 2 * 4 and {r["arm"] for r in got} == {"static", "oracle", "oracle-reactive", "shared"}
    judged_points = 0
    for name in ("small-zoo", "other-keys"):
        for seed in (1, 2):
            point = out / name / f"seed-{seed}"
            family = zoo.family_of((point / "generated.yaml").read_text())
            check = json.loads((point / "oracle.json").read_text())
            assert check["class"] in ("margin", "tight", "infeasible")
            apps = zoo.app_servers_of(seed, [1, 2])
            assert check["app_servers"] == apps and len(check["app_server_schedules"]) == apps
            for r in got:
                if (r["experiment"], int(r["seed"])) == (name, seed):
                    assert (r["family"], r["class"], int(r["app_servers"])) == (family, check["class"], apps)
            # The scenario each arm ran is the drawn one; both oracle arms read the one analysis.
            assert yaml.safe_load((point / "scenario.yaml").read_text()) == yaml.safe_load((point / "generated.yaml").read_text())
            for arm in ("oracle", "oracle-reactive"):
                topo = yaml.safe_load((point / arm / "topology.yaml").read_text())
                read = Path(topo["app_servers"][0]["controller"]["run"]["oracle"])
                if (point / arm).is_symlink():
                    # the judge's run of the same schedule, linked: not simulated again
                    assert (point / arm).resolve().parent.parent == (point / "oracle-judge").resolve()
                    assert read.parent == (point / arm).resolve().parent
                    variant = "reactive" if arm == "oracle-reactive" else "foresight"
                    ran, final = json.loads(read.read_text()), json.loads((point / "oracle.json").read_text())
                    for app, sch in final["app_server_schedules"].items():
                        assert ran["app_server_schedules"][app]["foresight"]["steps"] == sch[variant]["steps"]
                else:
                    assert read == (point / "oracle.json").resolve()
            # A feasible point's oracle is the best of its candidates in the simulator: the
            # arm measures what the judge measured for the chosen one, which is the least,
            # and the reactive schedule is a candidate.
            pct = {r["arm"]: float(r["violation_pct"]) for r in got
                   if (r["experiment"], int(r["seed"])) == (name, seed) and r["violation_pct"]}
            if check["class"] == "infeasible":
                assert "judged" not in check
                continue
            judged = check["judged"]
            measured = {n: m["violation_pct"] for n, m in judged["candidates"].items()}
            cands = check["app_server_candidates"]
            names = [c["name"] for c in cands["app0"]]
            assert all([c["name"] for c in cs] == names for cs in cands.values())
            # a combination of the app servers' schedules is simulated once
            distinct, seen = [], set()
            for n in names:
                key = json.dumps({a: next(c["steps"] for c in cs if c["name"] == n) for a, cs in sorted(cands.items())},
                                 sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    distinct.append(n)
            # in order, the model's pick first; all of them unless one had no violation
            assert list(measured) == distinct[:len(measured)] and names[0] == "model-pick" and len(names) >= 2
            assert len(measured) == len(distinct) or list(measured.values())[-1] == 0
            assert measured[judged["chosen"]] == min(measured.values()) == pytest.approx(pct["oracle"])
            assert pct["oracle"] <= pct["oracle-reactive"] + 1e-9
            assert (point / "oracle").is_symlink()
            assert (point / "oracle-reactive").is_symlink() == ("reactive" in measured)
            judged_points += 1
    assert judged_points >= 1  # the draws are deterministic: these seeds have feasible points
    md = (out / "zoo.md").read_text()
    assert "development seeds 1–2" in md and "| static |" in md and "## experiment other-keys" in md
    two = [r for r in got if r["app_servers"] == "2" and r["class"] in ("margin", "tight")]
    assert ("## 2 app servers" in md) == bool(two) and "reaction" in md
    assert (out / "zoo.png").read_bytes()[:4] == b"\x89PNG"
    # Drawing is deterministic: the same seed, the same scenario, byte for byte.
    again = tmp_path / "again"
    p = zoo.draw(zoo_experiment(exp), 2, again, app_servers=zoo.app_servers_of(2, [1, 2]))
    assert p.scenario.parent == again / "seed-2"
    assert (again / "seed-2" / "generated.yaml").read_bytes() == (out / "small-zoo" / "seed-2" / "generated.yaml").read_bytes()
    # The experiment's compare block holds on every drawn point: one parameterized arm is one arm.
    one = tmp_path / "one-arm.yaml"
    one.write_text(yaml.safe_dump(dict(SMALL, compare={"policies": [{"name": "relief", "alarm": 0.5}]})))
    p = zoo.draw(zoo_experiment(one), 1, tmp_path / "one")
    assert [pol.model_dump() for pol in p.exp.compare.policies] == [{"name": "relief", "alarm": 0.5}]
    # Bad input: named, nothing run.
    for args, msg in ((["--seeds", "0"], "outside"), (["--policies", "nope"], "nope"),
                      (["--app-servers", "1,0"], "--app-servers"),
                      (["--out", "/dev/full/x"], "--out: cannot create /dev/full/x")):
        res = subprocess.run(cli_args("zoo", "--experiment", str(exp), "--out", str(tmp_path / "bad"), *args),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and msg in res.stderr, (args, res.stderr)
        assert not (tmp_path / "bad").exists()


def test_infeasible_check_runs_only_the_recommended_policy_there(tmp_path: Path, built: None) -> None:
    """--infeasible check: on a scenario the analysis calls infeasible, no oracle schedule is
    computed and only the recommended policy runs, its violations checking the class; with
    --noise-seeds 2, twice, the experiment seed moved for the noise, the scenario the same."""
    exp = tmp_path / "small.yaml"
    exp.write_text(yaml.safe_dump(SMALL))
    from robinhood_controller import policies as allocation
    rec = allocation.registry.recommended()
    # Without the recommended policy among the arms, refused before anything is drawn.
    bad = tmp_path / "bad"
    res = subprocess.run(cli_args("zoo", "--experiment", str(exp), "--seeds", "3", "--policies", "static",
                                  "--cache-modes", "partitioned", "--infeasible", "check", "--out", str(bad)),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and f"the recommended policy ({rec})" in res.stderr, res.stderr
    assert not list(bad.glob("seed-*"))
    # With two noise runs (--noise-seeds): the same scenario, the experiment seed moved.
    out = tmp_path / "z"
    res = subprocess.run(cli_args("zoo", "--experiment", str(exp), "--seeds", "3", "--policies", f"static,oracle,{rec}",
                                  "--cache-modes", "partitioned", "--infeasible", "check", "--noise-seeds", "2",
                                  "--out", str(out)), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    point = out / "seed-3"
    check = json.loads((point / "oracle.json").read_text())
    assert check["class"] == "infeasible"  # seed 3 draws flapping capacity the budget cannot cover
    assert "schedules_skipped" in check and not any(check["app_server_schedules"].values())
    with open(out / "zoo.csv") as f:
        got = list(csv.DictReader(f))
    assert [r["arm"] for r in got] == [rec] and float(got[0]["violation_pct"]) > 0
    assert not (point / "static").exists() and not (point / "oracle").exists()
    md = (out / "zoo.md").read_text()
    assert "The infeasible class holds: on the 1 infeasible scenarios" in md
    # The row is the median of the two runs, with their least and most.
    r = got[0]
    lo, mid, hi = float(r["violation_min"]), float(r["violation_pct"]), float(r["violation_max"])
    assert r["noise_runs"] == "2" and lo <= mid <= hi and mid == pytest.approx((lo + hi) / 2)
    assert "the median of 2 runs of the arm" in md
    first = yaml.safe_load((point / rec / "topology.yaml").read_text())
    again = yaml.safe_load((point / "noise-1" / rec / "topology.yaml").read_text())
    assert [b["seed"] for b in again["backends"]] == [b["seed"] + zoo.NOISE_STRIDE for b in first["backends"]]
    for key in ("trace", "scenario"):  # only the noise moved
        assert again["app_servers"][0]["controller"]["run"][key] == first["app_servers"][0]["controller"]["run"][key]
    # an oracle arm's noise run would apply the point's schedules
    assert (point / "noise-1" / "oracle.json").resolve() == (point / "oracle.json").resolve()
    # Bad input: named, nothing drawn.
    res = subprocess.run(cli_args("zoo", "--experiment", str(exp), "--seeds", "3", "--noise-seeds", "0",
                                  "--out", str(bad)), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--noise-seeds: 0 must be at least 1" in res.stderr, res.stderr
    assert not list(bad.glob("seed-*"))


def zoo_experiment(path: Path):  # type: ignore[no-untyped-def]
    from robinhood_testbed.experiment import load
    return load(str(path))


def test_an_oracle_arm_is_the_judges_run_only_when_it_is_the_same_run(tmp_path: Path) -> None:
    from robinhood_testbed.experiment import Arm
    from robinhood_testbed.oracle import JUDGE_DIR, ORACLE_FILE, judged_run

    steps = {"model-pick": [{"at_s": 0, "mb": {"a": 10}}], "reactive": [{"at_s": 5, "mb": {"a": 20}}]}
    doc = {"app_server_schedules": {"app0": {"foresight": {"steps": steps["model-pick"]},
                                             "reactive": {"steps": steps["reactive"]}}},
           "app_server_candidates": {"app0": [{"name": n, "steps": s} for n, s in steps.items()]},
           "judged": {"chosen": "model-pick", "dispatch": {"policy": "random"},
                      "candidates": {"model-pick": {"violation_pct": 1.0}, "reactive": {"violation_pct": 2.0}}}}
    (tmp_path / ORACLE_FILE).write_text(json.dumps(doc))
    for n in steps:
        (tmp_path / JUDGE_DIR / n / "oracle" / "replay").mkdir(parents=True)
        (tmp_path / JUDGE_DIR / n / "oracle" / "replay" / "summary.json").write_text("{}")

    def arm(policy: dict[str, Any] | None, mode: str = "partitioned", dispatch: str = "random") -> Path | None:
        return judged_run(tmp_path, Arm("x", mode, policy, {"policy": dispatch}))

    chosen, reactive = (tmp_path / JUDGE_DIR / n / "oracle" for n in ("model-pick", "reactive"))
    assert arm({"name": "oracle"}) == chosen
    assert arm({"name": "oracle-reactive"}) == reactive
    # another dispatch, another setting, another policy or cache: another run
    assert arm({"name": "oracle"}, dispatch="hedge") is None and arm({"name": "oracle", "lookahead": False}) is None
    assert arm({"name": "oracle-reactive", "x": 1}) is None and arm({"name": "static"}) is None
    assert arm(None, mode="shared") is None
    # a "reactive" candidate that is not the reactive schedule is not the reactive arm's run
    doc["app_server_candidates"]["app0"][1]["steps"] = steps["model-pick"]
    (tmp_path / ORACLE_FILE).write_text(json.dumps(doc))
    assert arm({"name": "oracle-reactive"}) is None and arm({"name": "oracle"}) == chosen
    # a run that did not finish, or a judge that did not measure it, is run again
    (chosen / "replay" / "summary.json").unlink()
    assert arm({"name": "oracle"}) is None
    del doc["judged"]
    (tmp_path / ORACLE_FILE).write_text(json.dumps(doc))
    assert arm({"name": "oracle"}) is None
    # a file that is not tracegen oracle's is refused, naming the file and the field
    doc["judged"] = {"chosen": 5, "candidates": {}, "dispatch": {}}
    (tmp_path / ORACLE_FILE).write_text(json.dumps(doc))
    with pytest.raises(ExperimentError, match=f"the schedule {tmp_path / ORACLE_FILE} is not tracegen oracle's: "
                                              "judged.chosen: 5 is not a string"):
        arm({"name": "oracle"})


def test_the_class_check_reads_every_noise_run() -> None:
    """An arm that met the SLO on one noise run of an infeasible scenario proves the class
    wrong, whatever its median."""
    row = {"experiment": "", "seed": 1, "family": "flapping", "class": "infeasible", "arm": "relief"}
    assert "holds" in zoo._class_check([dict(row, violation_pct=7.0)])[0]
    assert "holds" in zoo._class_check([dict(row, violation_pct=7.0, violation_min="", violation_max="")])[0]
    assert "wrong" in zoo._class_check([dict(row, violation_pct=5.0, violation_min=0.0, violation_max=9.0)])[0]


def _tick(app: str, t: float, mb: dict[str, int]) -> str:
    return json.dumps({"app_server": app, "time": t, "tick": 1,
                       "partitions": {n: {"planned_limit_bytes": v << 20} for n, v in mb.items()}})


def test_an_arms_recorded_allocation_is_oracle_steps(tmp_path: Path) -> None:
    from robinhood_testbed.oracle import recorded_schedule
    from robinhood_testbed.run import RUN_START

    (tmp_path / RUN_START).write_text("1000000000.000000\n")
    (tmp_path / "controller-app0.jsonl").write_text("\n".join([
        _tick("app0", 1e9 + 1, {"a": 20, "b": 20}), _tick("app0", 1e9 + 2, {"a": 20, "b": 20}),
        _tick("app0", 1e9 + 3.5, {"a": 19, "b": 21}), ""]))
    (tmp_path / "controller-app1.jsonl").write_text(_tick("app1", 1e9 + 1, {"a": 10, "b": 30}) + "\n")
    # a step where the allocation changes, from the run's start; the first at 0
    assert recorded_schedule(tmp_path) == {
        "app0": [{"at_s": 0, "mb": {"a": 20, "b": 20}}, {"at_s": 3.5, "mb": {"a": 19, "b": 21}}],
        "app1": [{"at_s": 0, "mb": {"a": 10, "b": 30}}]}
    # bad input is named: the file and the line
    (tmp_path / "controller-app1.jsonl").write_text(_tick("app1", 1e9 + 1, {"a": 10}) + "\n{\"time\": 3}\n")
    with pytest.raises(ExperimentError, match=r"controller-app1.jsonl:2: not a controller tick"):
        recorded_schedule(tmp_path)
    (tmp_path / RUN_START).unlink()
    with pytest.raises(ExperimentError, match="no run start"):
        recorded_schedule(tmp_path)


def test_the_oracle_takes_an_online_arms_allocation_that_measured_better(tmp_path: Path, built: None) -> None:
    """hindsight_rerun on a real comparison folder (two app servers, the simulator): the
    judge's candidates are made to look worse than RobinHood's run, so RobinHood's recorded
    allocation is simulated as a candidate, measures what RobinHood's own run measured, and
    becomes the oracle's schedule with foresight, and the oracle arm runs again on it; an arm
    that measured worse changes nothing."""
    from robinhood_testbed import oracle
    from robinhood_testbed.executor import ArmJob, LocalExecutor
    from robinhood_testbed.experiment import Arm
    from robinhood_testbed.oracle import HINDSIGHT, JUDGE_DIR, ORACLE_FILE, judged_run, recorded_schedule

    exp_path = tmp_path / "small.yaml"
    exp_path.write_text(yaml.safe_dump(dict(SMALL, cache={"budget_mb": 60, "app_servers": 2})))
    out = tmp_path / "c"
    res = subprocess.run(cli_args("compare", "--engine", "sim", "--experiment", str(exp_path), "--policies",
                                  "robinhood,oracle", "--cache-modes", "partitioned", "--out", str(out)),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads((out / ORACLE_FILE).read_text())
    if "judged" not in doc:
        pytest.skip("the drawn run is infeasible: no judged oracle")  # pragma: no cover - deterministic
    own = json.loads((out / "robinhood" / "replay" / "summary.json").read_text())["slo"]["violation_pct"]
    before = dict(doc["judged"])
    for m in doc["judged"]["candidates"].values():
        m["violation_pct"] = 100.0
    (out / ORACLE_FILE).write_text(json.dumps(doc))
    exp = zoo_experiment(exp_path)
    arms = {n: Arm(n, "partitioned", {"name": n}, before["dispatch"]) for n in ("robinhood", "oracle")}
    trace, scenario = out / "trace.jsonl", out / "scenario.yaml"
    compared = [oracle.Comparison(exp, out, trace, scenario if scenario.exists() else None, [
        (n, ArmJob(exp, a, out, trace, scenario if scenario.exists() else None), out / n) for n, a in arms.items()])]
    said: list[str] = []
    again = list(oracle.hindsight_rerun(compared, LocalExecutor(1), said.append))
    assert [n for n, _ in again] == ["oracle"] and "the oracle replays an online arm's allocation" in said[0], said
    after = oracle.read(out / ORACLE_FILE)
    assert after["judged"]["chosen"] == HINDSIGHT + "robinhood"
    assert after["judged"]["candidates"][HINDSIGHT + "robinhood"]["violation_pct"] == pytest.approx(own)
    rec = recorded_schedule(out / "robinhood")
    assert set(rec) == {"app0", "app1"}
    for app, sch in after["app_server_schedules"].items():
        assert sch["foresight"]["steps"] == rec[app]
    assert judged_run(out, arms["oracle"]) == out / JUDGE_DIR / (HINDSIGHT + "robinhood") / "oracle"
    # the oracle arm ran again on the new schedule: the judge's run of it, to the byte
    ran = out / JUDGE_DIR / (HINDSIGHT + "robinhood") / "oracle" / "replay" / "summary.json"
    assert (out / "oracle" / "replay" / "summary.json").read_text() == ran.read_text()
    # the arm measured no fewer violations than the chosen one now: nothing is simulated again,
    # nothing changes
    stamp = ran.stat().st_mtime_ns
    assert list(oracle.hindsight_rerun(compared, LocalExecutor(1))) == []
    assert ran.stat().st_mtime_ns == stamp
    assert json.loads((out / ORACLE_FILE).read_text())["judged"]["chosen"] == HINDSIGHT + "robinhood"
