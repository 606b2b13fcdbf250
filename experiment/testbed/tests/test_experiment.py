from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from robinhood_testbed.deploy import build_topology
from robinhood_testbed.experiment import Arm, ExperimentError, arms, dispatch_policies, load
from robinhood_testbed.procs import PortAllocator
from robinhood_testbed.run import check_scenario, prepare_inputs, rate_schedule, stream_args, synth_args

REPO = Path(__file__).resolve().parents[3]

BASE = {
    "name": "t",
    "duration": "60s",
    "backends": [{"name": "a", "type": "kv"}, {"name": "b", "type": "sql", "replicas": 2,
                                                "limits": {"workers": 4, "rate": 300}}],
    "cache": {"budget_mb": 40},
    "controller": {"min_partition_mb": 16},
    "trace": {"synth": {"rate": 100}},
    "slo": {"latency": "150ms", "step": "5s", "window": "20s", "warmup": "10s"},
}


def write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_valid_experiment_and_allocation(tmp_path: Path) -> None:
    exp = load(write(tmp_path, BASE))
    assert exp.duration == 60 and exp.slo.latency == pytest.approx(0.15)
    assert exp.initial_allocation() == {"a": 20, "b": 20}
    data = {**BASE, "cache": {"budget_mb": 41, "initial_mb": {"b": 10}}}
    assert load(write(tmp_path, data)).initial_allocation() == {"a": 31, "b": 10}


@pytest.mark.parametrize("patch, message", [
    ({"duration": "soon"}, 'duration: "soon" is not a duration'),
    ({"backends": [{"name": "a", "type": "mysql"}]}, 'backends[0].type: "mysql" is not one of kv, sql, compute'),
    ({"backends": [{"name": "a", "type": "kv"}, {"name": "a", "type": "kv"}]}, 'backends[1].name: "a" is used twice'),
    ({"cache": {"budget_mb": 40, "initial_mb": {"zz": 10}}}, 'cache.initial_mb.zz: no backend of this experiment is named "zz"'),
    ({"trace": {}}, "trace: give exactly one of trace.synth and trace.file"),
    ({"colour": "red"}, "colour: unknown field"),
    ({"slo": {"warmup": "90s"}}, "slo.warmup: 1m30s is not shorter than duration 1m0s"),
    ({"scenario": "missing.yaml"}, "scenario.file: cannot read"),
    ({"trace": {"synth": {"rate": 100, "streams": {"zz": "keys.txt"}}}},
     'trace.synth.streams.zz: no backend of this experiment is named "zz"'),
    ({"trace": {"synth": {"rate": 100, "streams": {"a": "missing.txt"}}}}, "trace.synth.streams.a.file: "),
    ({"trace": {"synth": {"rate": 100, "streams": {"a": {"file": "k.txt", "format": "csv"}}}}},
     'trace.synth.streams.a.format: "csv" is not one of arc, fetchers, keysize'),
])
def test_invalid_experiments(tmp_path: Path, patch: dict, message: str) -> None:
    with pytest.raises(ExperimentError, match=None) as ei:
        load(write(tmp_path, {**BASE, **patch}))
    assert message in str(ei.value)


def test_topology_per_arm(tmp_path: Path) -> None:
    exp = load(write(tmp_path, BASE))
    topo = build_topology(exp, Arm("robinhood", "partitioned", {"name": "robinhood", "tax": 0.02}), PortAllocator())
    app = topo["app_servers"][0]
    assert app["cache_mode"] == "partitioned"
    assert {n: p["initial_mb"] for n, p in app["partitions"].items()} == {"a": 20, "b": 20}
    assert app["controller"]["policy"] == {"name": "robinhood", "tax": 0.02}
    assert app["dispatch"] == {"policy": "random"}
    assert len(topo["backends"][1]["replicas"]) == 2 and topo["backends"][1]["limits"]["rate"] == 300
    addrs = [topo["rbc_server"]["grpc"], topo["rbc_server"]["http"], app["http"],
             *[p["addr"] for p in app["partitions"].values()],
             *[a for b in topo["backends"] for r in b["replicas"] for a in r.values()]]
    assert len(addrs) == len(set(addrs)), "every address is distinct"
    topo = build_topology(exp, Arm("shared", "shared", None), PortAllocator())
    app = topo["app_servers"][0]
    assert app["cache_mode"] == "shared" and app["shared_cache"] and "partitions" not in app


def test_arms_are_the_cross_product_of_three_axes(tmp_path: Path) -> None:
    exp = load(write(tmp_path, {**BASE, "compare": {"cache_modes": ["partitioned", "shared", "none"],
                                                    "policies": ["robinhood", {"name": "static"}]}}))
    got = arms(exp)
    assert [a.name for a in got] == ["robinhood", "static", "shared", "none"]
    assert got[0].policy == {"name": "robinhood"} and got[2].policy is None
    two = arms(exp, dispatch=[{"policy": "random"}, {"policy": "other"}], known_dispatch=["random", "other"])
    assert [a.name for a in two] == ["robinhood+random", "static+random", "robinhood+other", "static+other",
                                     "shared+random", "shared+other", "none+random", "none+other"]
    assert {a.dispatch["policy"] for a in two if a.name.endswith("+other")} == {"other"}


@pytest.mark.parametrize("kw, message", [
    ({"policies": [{"name": "lru"}]}, 'allocation policy lru: name: "lru" is not one of'),
    ({"policies": [{"name": "robinhood", "tax": 3}]}, "allocation policy robinhood: tax: 3 is above the maximum of 0.5"),
    ({"dispatch": [{"policy": "jsq"}], "known_dispatch": ["random"]}, "dispatch policy 'jsq' is not one of random"),
    ({"cache_modes": ["lru"]}, "cache mode 'lru' is not one of"),
])
def test_bad_arms_are_rejected_before_anything_starts(tmp_path: Path, kw: dict, message: str) -> None:
    exp = load(write(tmp_path, BASE))
    with pytest.raises(ExperimentError) as ei:
        arms(exp, **kw)
    assert message in str(ei.value)


def test_an_arm_whose_topology_is_invalid_says_which(tmp_path: Path) -> None:
    exp = load(write(tmp_path, {**BASE, "controller": {"min_partition_mb": 48}}))
    with pytest.raises(ExperimentError, match=r"arm robinhood: the topology it makes is invalid: "
                                              r"app_servers\[0\].cache_budget_mb: 40 is too small"):
        build_topology(exp, Arm("robinhood", "partitioned", {"name": "robinhood"}))


EXPERIMENTS = [p for p in sorted((REPO / "examples").glob("*.yaml"))
               if {"backends", "trace"} <= set(yaml.safe_load(p.read_text()))]


def test_an_experiment_per_scenario_kind() -> None:
    names = {p.stem for p in EXPERIMENTS}
    assert {"demo", "spikes", "quick-ramp", "slow-ramp", "random-walk"} <= names


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_shipped_experiments_are_valid(path: Path, tmp_path: Path, gobin) -> None:
    gobin("tracegen")
    exp = load(path)
    topo = build_topology(exp, arms(exp)[0], PortAllocator())
    topo_path = tmp_path / "topology.yaml"
    topo_path.write_text(yaml.safe_dump(topo))
    if exp.scenario_data() is None:  # the chaos run: faults, no capacity scenario
        return
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(exp.scenario_data()))
    check_scenario(scenario, topo_path, exp.duration)  # raises ExperimentError naming the problem


def test_dispatch_policies_list_says_which_to_run(gobin) -> None:
    """The app server lists one policy a line on stdout, what the testbed reads, and
    says on stderr where the pick comes from (bin/sim advise)."""
    exe = str(gobin("appserver"))
    res = subprocess.run([exe, "--list-dispatch-policies"], capture_output=True, text=True, timeout=60, check=True)
    assert res.stderr.startswith("# which to run") and "bin/sim advise --measured" in res.stderr
    names = dispatch_policies(exe)
    assert len(names) == len(res.stdout.splitlines()) and {"random", "psq", "laedge-cc", "singler"} <= set(names)
    assert not any(n.startswith("#") for n in names)


RATE_EVENTS = [{"kind": "request_rate", "at": "40s", "factor": 1},
               {"kind": "set", "at": "5s", "backend": "b", "set": {"rate": 100}},
               {"kind": "request_rate", "at": "20s", "factor": 2.5}]


def test_request_rate_events_become_the_synth_rate_schedule(tmp_path: Path, gobin) -> None:
    """request_rate events are the trace's: synth_args passes them as --rate-schedule (in
    time order), the generated trace carries them, and the scenario checks."""
    gobin("tracegen")
    exp = load(write(tmp_path, {**BASE, "scenario": {"events": RATE_EVENTS}}))
    assert rate_schedule(exp) == "20s:2.5,40s:1"
    args = synth_args(exp)
    assert args[args.index("--rate-schedule") + 1] == "20s:2.5,40s:1"
    assert "--rate-schedule" not in synth_args(load(write(tmp_path, BASE)))
    sim = load(write(tmp_path, {**BASE, "scenario": {"events": RATE_EVENTS}, "sim": {"generate": True}}))
    generated, _ = prepare_inputs(sim, tmp_path / "sim", "sim")
    assert isinstance(generated, list) and "--rate-schedule" in generated
    trace, scenario = prepare_inputs(exp, tmp_path / "tb")
    assert isinstance(trace, Path) and scenario is not None
    per_segment = [0, 0, 0]
    for line in trace.read_text().splitlines():
        ts = float(line.split('"ts_ms": ')[1].split(",")[0]) / 1000
        if ts < 60:
            per_segment[0 if ts < 20 else 1 if ts < 40 else 2] += 1
    # 100 requests/s, then 250, then 100 again (Poisson: within 5 sigma).
    for n, want in zip(per_segment, (2000, 5000, 2000)):
        assert abs(n - want) < 5 * want ** 0.5, per_segment
    topo = tmp_path / "topology.yaml"
    topo.write_text(yaml.safe_dump(build_topology(exp, arms(exp)[0], PortAllocator())))
    check_scenario(scenario, topo, exp.duration)


def test_request_rate_needs_a_synthesized_trace(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"t": 0, "ts_ms": 1, "d": [{"a": {"S": [1], "U": ["k"], "C": [1]}}]}\n')
    exp = load(write(tmp_path, {**BASE, "trace": {"file": "t.jsonl"}, "scenario": {"events": RATE_EVENTS}}))
    with pytest.raises(ExperimentError, match="request_rate events change the trace's request rate, so they need a "
                                              "synthesized trace"):
        prepare_inputs(exp, tmp_path / "out")
    assert not (tmp_path / "out").exists(), "nothing is written"
    bad = load(write(tmp_path, {**BASE, "scenario": {"events": [{"kind": "request_rate", "at": "soon", "factor": 2}]}}))
    with pytest.raises(ExperimentError, match=r"scenario.events\[0\] \(request_rate\): at: "):
        synth_args(bad)
    bad = load(write(tmp_path, {**BASE, "scenario": {"events": [{"kind": "request_rate", "at": "5s", "factor": "x"}]}}))
    with pytest.raises(ExperimentError, match=r"factor: 'x' is not a number"):
        synth_args(bad)


def test_real_key_streams_make_the_trace_with_tracegen_import(tmp_path: Path, gobin) -> None:
    """trace.synth.streams: prepare_inputs runs tracegen import with the synth flags and
    one --stream per backend (files relative to the experiment file); the trace is synth's
    with those backends' keys from the streams, in order."""
    gobin("tracegen")
    (tmp_path / "streams").mkdir()
    keys = tmp_path / "streams" / "keys.txt"
    keys.write_text("# key size\n" + "".join(f"k{i} {100 + i % 50}\n" for i in range(20000)))
    synth = {"rate": 100, "params": {"queries-per-request": 4},
             "streams": {"a": "streams/keys.txt", "b": {"file": "streams/keys.txt", "format": "keysize", "skip": 7}}}
    exp = load(write(tmp_path, {**BASE, "duration": "5s", "slo": {"warmup": "1s"}, "trace": {"synth": synth}}))
    assert stream_args(exp) == ["--stream", f"a={keys.resolve()}", "--stream", f"b={keys.resolve()},format=keysize,skip=7"]
    trace, _ = prepare_inputs(exp, tmp_path / "out")
    assert isinstance(trace, Path)
    log = (tmp_path / "out" / "tracegen-import.log").read_text()
    assert log.startswith("$ ") and " import " in log.splitlines()[0] and "trace written" in log
    plain = load(write(tmp_path, {**BASE, "duration": "5s", "slo": {"warmup": "1s"},
                                  "trace": {"synth": {"rate": 100, "params": {"queries-per-request": 4}}}}))
    (tmp_path / "exp.yaml").rename(tmp_path / "plain.yaml")
    synthetic, _ = prepare_inputs(plain, tmp_path / "plain")
    imported, synthesized = trace.read_text().splitlines(), synthetic.read_text().splitlines()
    assert len(imported) == len(synthesized) > 1000  # 15 s (the run and its slack) at 100 requests/s
    seen: dict[str, list[str]] = {"a": [], "b": []}
    for got, want in zip(imported, synthesized):
        g, w = json.loads(got), json.loads(want)
        assert g["ts_ms"] == w["ts_ms"] and g["d"][0].keys() == w["d"][0].keys()
        for name, q in g["d"][0].items():
            assert len(q["U"]) == len(w["d"][0][name]["U"]) and q["C"] == w["d"][0][name]["C"]
            seen[name] += q["U"]
    assert seen["a"][:3] == ["k0", "k1", "k2"] and seen["b"][:3] == ["k7", "k8", "k9"]
    assert seen["a"] == [f"k{i}" for i in range(len(seen["a"]))]


def test_real_key_streams_refuse_sim_generate(tmp_path: Path) -> None:
    """The simulator generates synthetic keys only: sim.generate with streams is refused,
    naming both settings, before anything is written."""
    (tmp_path / "keys.txt").write_text("k 1\n")
    exp = load(write(tmp_path, {**BASE, "trace": {"synth": {"rate": 100, "streams": {"a": "keys.txt"}}},
                                "sim": {"generate": True}}))
    for engine in ("sim", "testbed"):
        with pytest.raises(ExperimentError, match=r"sim.generate: true and trace.synth.streams cannot go together"):
            prepare_inputs(exp, tmp_path / "out", engine)
    assert not (tmp_path / "out").exists(), "nothing is written"
