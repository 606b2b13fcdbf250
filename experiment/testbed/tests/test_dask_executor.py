"""`matrix --executor dask`: the simulator's runs on a Dask distributed cluster give the
very files a local run gives (docs/testbed.md, "Executors"), a run whose worker is
killed is run again elsewhere, and a bad --scheduler is named before anything runs.

Every run goes to the same --out (then the folder is moved aside): the files name
their results folder (the topology's controller.run block, the summary's trace and
scenario), so two runs are compared at one path."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import Procs, free_addr, wait_tcp
from test_testbed_e2e import TINY, cli_args

REPO = Path(__file__).resolve().parents[3]
DASK = Path(sys.executable).parent / "dask"

#: The matrix: the tiny experiment, two seeds, three arms (robinhood, static, shared).
MATRIX = ("--seeds", "1,2", "--policies", "robinhood,static")

#: The only differences between two runs of one matrix: wall-clock fields, masked.
WALL_CLOCK = {
    "sim.json": [rb'"wall_s": [0-9.e+-]+', rb'"queries_per_wall_s": [0-9.e+-]+'],
    "sim.log": [rb"in [0-9.]+ s: ", rb"\([0-9]+ queries/s\)"],
    "tracegen-synth.log": [rb"time=\S+", rb"seconds=\S+", rb"requests_per_s=\S+"],
    "matrix.csv": [rb",[0-9.]+\r\n"],  # wall_s, the last column
    "matrix.md": [rb"wall times sum to [0-9.]+ minutes"],
}


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def masked(name: str, data: bytes) -> bytes:
    for pat in WALL_CLOCK.get(Path(name).name, []):
        data = re.sub(pat, b"<wall>", data)
    return data


def assert_same_results(a: Path, b: Path) -> None:
    """Every file of a and b byte for byte, but for the WALL_CLOCK fields."""
    fa, fb = files(a), files(b)
    assert sorted(fa) == sorted(fb)
    for name in fa:
        if Path(name).name not in WALL_CLOCK:
            assert fa[name] == fb[name], name
        else:
            assert masked(name, fa[name]) == masked(name, fb[name]), name


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("dask")
    (d / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    return d


def matrix(base: Path, name: str, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The matrix into base/out, then moved to base/NAME."""
    res = subprocess.run(cli_args("matrix", "--experiments", str(base / "tiny.yaml"), *MATRIX, "--out",
                                  str(base / "out"), *extra), capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (base / "out").rename(base / name)
    return res


@pytest.fixture(scope="module")
def local(base: Path, gobin_module: None) -> Path:
    """The matrix run locally, one run at a time."""
    matrix(base, "local", "--jobs", "1")
    return base / "local"


@pytest.fixture(scope="module")
def gobin_module() -> None:
    from conftest import go_binary
    for name in ("sim", "tracegen", "appserver"):
        go_binary(name)


def test_local_cluster_gives_the_local_files(base: Path, local: Path) -> None:
    t0 = time.monotonic()
    res = matrix(base, "dask", "--executor", "dask", "--jobs", "2")
    took = time.monotonic() - t0
    assert "on a local Dask cluster (tcp://127.0.0.1:" in res.stdout and "2 workers, 2 at a time" in res.stdout
    progress = [line for line in res.stdout.splitlines() if re.match(r"\[\d/6 \d+s\] tiny seed \d", line)]
    assert len(progress) == 6 and all(" on tcp://127.0.0.1:" in line for line in progress), res.stdout
    assert_same_results(local, base / "dask")
    # The wall-clock fields are all that differ: sim.json says how long the run took.
    assert b'"wall_s": ' in (base / "dask" / "tiny" / "seed-1" / "robinhood" / "sim.json").read_bytes()
    print(f"matrix on a local Dask cluster of 2 worker processes: {took:.1f} s")


#: A worker in a process that cannot import robinhood_testbed: the task as Dask pickles
#: it (its function by value), run on the inputs it carries.
WORKER = """
import pickle, sys
sys.modules["robinhood_testbed"] = None  # not installed here
fn, task, shared = pickle.load(open(sys.argv[1], "rb"))
pickle.dump(fn(task, shared), open(sys.argv[2], "wb"))
"""


def test_worker_without_the_clients_files(tmp_path: Path, gobin_module: None) -> None:
    """A worker that has neither the client's folder (moved away here) nor this package
    writes the same files, paths inside them included: the oracle reads the schedule
    file the topology's controller.run names."""
    import pickle

    from robinhood_testbed.executor import _ByValue, carry, run_arm_task
    from robinhood_testbed.experiment import arms, load
    from robinhood_testbed.run import execute_arm_sim, prepare_arm_sim, prepare_inputs

    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    exp = load(str(tmp_path / "tiny.yaml"))
    arm = arms(exp, ["partitioned"], [{"name": "oracle"}], None)[0]
    point = tmp_path / "client" / "seed-3"
    trace, scenario = prepare_inputs(exp, point, "sim")
    p = prepare_arm_sim(exp, arm, point, trace, scenario)
    task, shared = carry(p, os.getcwd())
    # The oracle's schedule, computed once per comparison folder, travels with the trace
    # and the scenario.
    assert sorted({Path(v).name for v in shared.values()}) == ["oracle.json", "scenario.yaml", "trace.jsonl"]
    data = {form: path.read_bytes() for form, path in shared.items()}
    (tmp_path / "task.pickle").write_bytes(pickle.dumps((_ByValue(run_arm_task), task, data)))
    (tmp_path / "client").rename(tmp_path / "away")
    res = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path / "task.pickle"), str(tmp_path / "out.pickle")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "ROBINHOOD_BIN": str(REPO / "bin")})
    (tmp_path / "away").rename(tmp_path / "client")
    assert res.returncode == 0, res.stderr[-3000:]
    out = pickle.loads((tmp_path / "out.pickle").read_bytes())
    assert out["returncode"] == 0, out["files"].get("sim.log", b"")[-2000:]
    assert sorted(out["files"]) == ["controller-app0.jsonl", "rbc.jsonl", "replay/summary.json", "sim.json",
                                    "sim.log"]
    before = files(p.run_dir)
    execute_arm_sim(p)  # the same arm locally
    local = files(p.run_dir)
    assert sorted(local) == sorted([*before, *out["files"]])
    for name, got in out["files"].items():
        assert masked(name, got) == masked(name, local[name]), name
    assert str(trace).encode() in out["files"]["replay/summary.json"]


def test_lost_worker_runs_again(base: Path, local: Path, procs: Procs, tmp_path: Path) -> None:
    """A worker killed (with its bin/sim) in the middle of a run: the scheduler runs it
    again on the other worker, and the results are the local run's."""
    addr = free_addr()
    host, port = addr.rsplit(":", 1)
    sched = procs.start([DASK, "scheduler", "--host", host, "--port", port, "--dashboard-address", "127.0.0.1:0"],
                        name="scheduler")
    wait_tcp(addr, timeout=60, proc=sched)
    # The doomed worker's bin/sim says it started, then waits to be killed.
    slow = tmp_path / "slowbin"
    slow.mkdir()
    marker = tmp_path / "started"
    (slow / "sim").write_text(f"#!/bin/sh\ntouch '{marker}'\nsleep 120\nexec '{REPO / 'bin' / 'sim'}' \"$@\"\n")
    (slow / "sim").chmod(0o755)
    (slow / "tracegen").symlink_to(REPO / "bin" / "tracegen")
    worker = [DASK, "worker", f"tcp://{addr}", "--nthreads", "1", "--nworkers", "1", "--host", "127.0.0.1",
              "--dashboard-address", "127.0.0.1:0", "--local-directory"]
    doomed = procs.start([*worker, tmp_path / "w1"], name="doomed", env={"ROBINHOOD_BIN": str(slow)})
    run = subprocess.Popen(cli_args("matrix", "--experiments", str(base / "tiny.yaml"), *MATRIX, "--out",
                                    str(base / "out"), "--executor", "dask", "--scheduler", f"tcp://{addr}"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert run.poll() is None, run.communicate()
            assert doomed.poll() is None, procs.log(doomed)[-3000:]
            assert time.monotonic() < deadline, "no run started on the doomed worker"
            time.sleep(0.2)
        procs.start([*worker, tmp_path / "w2"], name="healthy")
        os.killpg(doomed.pid, signal.SIGKILL)  # the nanny, the worker and its bin/sim
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert len(re.findall(r"^\[\d/6 \d+s\] tiny seed \d", stdout, re.M)) == 6, stdout
    (base / "out").rename(base / "retried")
    assert_same_results(local, base / "retried")


def test_bad_scheduler(base: Path, gobin_module: None) -> None:
    exp = str(base / "tiny.yaml")
    closed = free_addr()  # nothing listens there
    for args, msg in ((["--executor", "dask", "--scheduler", "nohost:8786"], "is not a Dask scheduler address"),
                      (["--executor", "dask", "--scheduler", f"tcp://{closed}"], f"cannot connect to tcp://{closed}"),
                      (["--scheduler", f"tcp://{closed}"], "--scheduler is for --executor dask"),
                      (["--executor", "dask", "--scheduler", f"tcp://{closed}", "--jobs", "2"],
                       "--jobs: with --scheduler the cluster's workers set how many runs go at once")):
        res = subprocess.run(cli_args("matrix", "--experiments", exp, "--seeds", "1", "--out", str(base / "bad"),
                                      *args), capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and msg in res.stderr, (args, res.stderr)
        assert not (base / "bad").exists()
    res = subprocess.run(cli_args("sweep", "--experiment", exp, "--param", "budget", "--values", "40", "--seeds", "1",
                                  "--out", str(base / "bad"), "--executor", "dask", "--scheduler", "tcp://x"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "'tcp://x' is not a Dask scheduler address" in res.stderr, res.stderr
    assert not (base / "bad").exists()


def test_sweep_on_a_local_cluster(tmp_path: Path, gobin_module: None) -> None:
    exp = tmp_path / "tiny.yaml"
    exp.write_text(yaml.safe_dump(TINY))
    for name, extra in (("local", ()), ("dask", ("--executor", "dask", "--jobs", "2"))):
        res = subprocess.run(cli_args("sweep", "--experiment", str(exp), "--param", "spike-depth", "--values", "0.5,2",
                                      "--seeds", "1", "--policies", "static", "--cache-modes", "partitioned",
                                      "--out", str(tmp_path / "out"), *extra),
                             capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert "spike-depth = 0.5, seed 1: static" in res.stdout and "spike-depth = 2, seed 1: static" in res.stdout
        (tmp_path / "out").rename(tmp_path / name)
    assert_same_results(tmp_path / "local", tmp_path / "dask")


def test_kubernetes_manifest_and_worker_image() -> None:
    """deploy/kubernetes/dask/dask.yaml runs `dask scheduler` and `dask worker` with flags
    they have, the worker at the scheduler's Service, one arm at a time; the worker image
    of docs/testbed.md installs the distributed of requirements.txt."""
    docs = list(yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "dask" / "dask.yaml").read_text()))
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    service = by["Service", "dask-scheduler"]
    assert [p["port"] for p in service["spec"]["ports"]] == [8786, 8787]
    for name, sub in (("dask-scheduler", "scheduler"), ("dask-worker", "worker")):
        dep = by["Deployment", name]
        assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "robinhood/dask-worker"
        cmd = container["command"]
        assert cmd[:2] == ["dask", sub], cmd
        usage = subprocess.run([DASK, sub, "--help"], capture_output=True, text=True, timeout=60).stdout
        for flag in (a for a in cmd[2:] if a.startswith("--")):
            assert re.search(rf"\s{re.escape(flag)}\b", usage), f"dask {sub} has no {flag}"
        if sub == "worker":
            assert cmd[2] == "tcp://dask-scheduler:8786" and cmd[cmd.index("--nthreads") + 1] == "1"
    pinned = re.search(r"^distributed==(\S+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert pinned is not None
    page = (REPO / "docs" / "testbed.md").read_text()
    assert f"RUN pip install --no-cache-dir distributed=={pinned.group(1)}" in page
    import distributed
    assert distributed.__version__ == pinned.group(1)


def test_the_local_executor_shares_one_policy_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open, the local executor runs one policy server whose socket bin/sim finds in
    ROBINHOOD_POLICY_SERVER (a matrix run through it gives the dask run's files, above);
    closed, the server is gone and the variable as it was. A variable set already (an
    outer run's server) is used as it is."""
    from robinhood_testbed.executor import POLICY_SERVER_ENV, LocalExecutor

    monkeypatch.delenv(POLICY_SERVER_ENV, raising=False)
    with LocalExecutor(2) as ex:
        ps = ex.policy_server
        assert ps is not None and os.environ[POLICY_SERVER_ENV] == ps.path and Path(ps.path).is_socket()
        proc, folder = ps.proc, ps.dir
    assert POLICY_SERVER_ENV not in os.environ and proc.returncode == 0 and not Path(folder).exists()
    monkeypatch.setenv(POLICY_SERVER_ENV, "/elsewhere.sock")
    with LocalExecutor(1) as ex:
        assert ex.policy_server is None and os.environ[POLICY_SERVER_ENV] == "/elsewhere.sock"
    assert os.environ[POLICY_SERVER_ENV] == "/elsewhere.sock"
