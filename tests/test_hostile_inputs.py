"""Every reader of an operator's file, on the shared probes (tests/vectors/probes.json: a
FIFO no one writes, /dev/zero, a folder, a sparse 2 GB file, a missing file, an empty
one, a million '[', deep objects, an alias bomb, NUL bytes, a 4 MB line, a million
lines; docs/security.md, "Files"). Each command below is run on each probe, as the
operator would run it, and

- ends within a generous deadline (it fails only on a hang: a FIFO used to hang
  rbcserver and the controller),
- peaks at 100 MB of resident memory at most (/dev/zero used to cost gigabytes),
- never prints a Python traceback, and
- given the wrong kind of file (fifo, /dev/zero, folder, sparse 2 GB, missing), exits
  non-zero with one line naming it; a "strict" reader, for which no probe is valid
  input, does so for every probe.

The commands run from tests/forkserver.py: the Python ones in children forked from a
process that imported them once (the entry points the console scripts call), the Go
binaries started by a small one of their own, so that their peak memory is theirs (Linux
counts a process's memory before it executes a program in the program's peak)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import Probe, go_binary, wait_until

REPO = Path(__file__).resolve().parents[1]
MAX_RSS_KIB = 100_000_000 // 1024  # 100 MB
DEADLINE_S = 90.0  # per run; generous: only a hang reaches it

TOPOLOGY = """\
rbc_server: {{grpc: "127.0.0.1:1", window: 1s}}
backends: [{{id: 0, name: a, type: kv, replicas: [{{grpc: "127.0.0.1:1"}}]}}]
app_servers:
  - id: app0
    http: "127.0.0.1:1"
    cache_mode: partitioned
    cache_budget_mb: 16
    partitions: {{a: "127.0.0.1:1"}}
    controller: {{interval: 500ms, min_partition_mb: 8, rbc_timeout: 1s, policy: {policy}{run}}}
{extra}"""


@dataclass(frozen=True)
class Reader:
    name: str
    argv: Callable[[Path, Path], list[str]]  # (probe path, a folder of the case's) -> command line
    python: str = ""  # the console script's entry (tests/forkserver.py), "" for a Go binary
    strict: bool = True  # no probe is valid input: each must be refused naming it
    env: dict[str, str] | None = None
    absent_ok: bool = False  # a file that is not there is not checked (topocheck: the secrets live elsewhere)


def topology(folder: Path, *, policy: str = "static", run: str = "", extra: str = "") -> str:
    """A topology in folder whose files are the base's secrets, with blocks added."""
    path = folder / "topology.yaml"
    path.write_text(TOPOLOGY.format(policy=policy, run=f", run: {{{run}}}" if run else "", extra=extra))
    return str(path)


_secrets: list[Path] = []


def secrets() -> Path:
    """The folder of devcerts' files (made by the servers fixture)."""
    return _secrets[0]


def tls_block(ca: str | None = None) -> str:
    s = secrets()
    return f"tls: {{ca: \"{ca or s / 'ca.pem'}\", cert: \"{s / 'cert.pem'}\", key: \"{s / 'key.pem'}\", client_auth: true}}\n"


def go(name: str) -> str:
    return str(go_binary(name))


SHARED = {"ROBINHOOD_ALLOW_SHARED_SECRETS": "1"}  # /dev/zero is 0666: reach the reader, not the mode check
CTL = "robinhood-controller"

READERS = [
    Reader("rbcserver --auth-token-file", lambda p, d: [go("rbcserver"), "--auth-token-file", str(p)], env=SHARED),
    Reader("rbcserver --tls-cert", lambda p, d: [go("rbcserver"), "--tls-cert", str(p), "--tls-key",
                                                 str(secrets() / "key.pem")]),
    Reader("rbcserver --tls-key", lambda p, d: [go("rbcserver"), "--tls-cert", str(secrets() / "cert.pem"),
                                                "--tls-key", str(p)], env=SHARED),
    Reader("rbcserver --tls-client-ca", lambda p, d: [go("rbcserver"), "--tls-cert", str(secrets() / "cert.pem"),
                                                      "--tls-key", str(secrets() / "key.pem"), "--tls-client-ca",
                                                      str(p)]),
    Reader("rbcserver --topology", lambda p, d: [go("rbcserver"), "--topology", str(p)]),
    Reader("appserver --topology", lambda p, d: [go("appserver"), "--topology", str(p), "--id", "app0", "--check"]),
    Reader("backend --topology", lambda p, d: [go("backend"), "--topology", str(p), "--id", "a"]),
    Reader("topocheck", lambda p, d: [go("topocheck"), str(p)]),
    Reader("topocheck --experiment", lambda p, d: [go("topocheck"), "--experiment", str(p)]),
    Reader("topocheck, tls.ca", lambda p, d: [go("topocheck"), topology(d, extra=tls_block(str(p)))], absent_ok=True),
    Reader("tracegen stats", lambda p, d: [go("tracegen"), "stats", str(p)], strict=False),
    Reader("tracegen mrc", lambda p, d: [go("tracegen"), "mrc", str(p)], strict=False),
    Reader("tracegen import --stream", lambda p, d: [go("tracegen"), "import", "--requests", "50", "--backend-names",
                                                     "a,b", "--stream", f"a={p}", "--out", str(d / "t.jsonl")]),
    Reader("tracegen scenario check", lambda p, d: [go("tracegen"), "scenario", "check", str(p), "--topology",
                                                    topology(d)]),
    Reader("controller --topology", lambda p, d: ["status", "--topology", str(p), "--id", "app0"], python=CTL),
    Reader("controller, tls.ca", lambda p, d: ["run", "--topology", topology(d, extra=tls_block(str(p))), "--id",
                                               "app0", "--max-ticks", "1"], python=CTL),
    Reader("controller, auth.tokens", lambda p, d: [
        "run", "--topology", topology(d, extra=f"auth: {{tokens: \"{p}\", token: \"{secrets()}/{{id}}.token\"}}\n"),
        "--id", "app0", "--max-ticks", "1", "--metrics", "127.0.0.1:0"], python=CTL, env=SHARED),
    Reader("controller, auth.token", lambda p, d: [
        "run", "--topology", topology(d, extra=f"auth: {{tokens: \"{secrets() / 'tokens'}\", token: \"{p}\"}}\n"),
        "--id", "app0", "--max-ticks", "1"], python=CTL, env=SHARED),
    Reader("controller, run.oracle", lambda p, d: [
        "run", "--topology", topology(d, policy="oracle", run=f"seconds: 60s, oracle: \"{p}\""), "--id", "app0",
        "--max-ticks", "1"], python=CTL),
    # An empty start file is one the testbed has not written yet: not an error.
    Reader("controller, run.start_file", lambda p, d: [
        "run", "--topology", topology(d, run=f"seconds: 60s, start_file: \"{p}\""), "--id", "app0", "--max-ticks",
        "1"], python=CTL, strict=False, absent_ok=True),
    Reader("robinhood-report --token-file", lambda p, d: ["--rbc", "127.0.0.1:1", "--app-server", "app0",
                                                          "--token-file", str(p)], python="robinhood-report",
           env=SHARED),
    Reader("robinhood-report --tls-ca", lambda p, d: ["--rbc", "127.0.0.1:1", "--app-server", "app0", "--tls-ca",
                                                      str(p)], python="robinhood-report"),
]


@dataclass
class Outcome:
    code: int
    stderr: str
    maxrss_kib: int
    killed: bool


Runner = Callable[[str, list[str], "dict[str, str] | None", Path], Outcome]


class Server:
    """A tests/forkserver.py process: run(entry, argv, env, stderr path) -> Outcome."""

    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen([sys.executable, str(REPO / "tests" / "forkserver.py"), *args],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def run(self, entry: str, argv: list[str], env: dict[str, str] | None, err_path: Path) -> Outcome:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(json.dumps({"entry": entry, "argv": argv, "env": env, "stderr": str(err_path),
                                       "timeout": DEADLINE_S}) + "\n")
        self.p.stdin.flush()
        res = json.loads(self.p.stdout.readline())
        return Outcome(res["code"], err_path.read_text(errors="replace"), res["maxrss_kib"], res["killed"])

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(60)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """The fork server of the Python commands and the small one that starts the Go
    binaries; devcerts' files for the cases that need good ones."""
    sec = tmp_path_factory.mktemp("base") / "secrets"
    subprocess.run([go("devcerts"), "--out", str(sec), "--callers", "app0,operator"], check=True, capture_output=True)
    _secrets[:] = [sec]
    py, ex = Server(), Server("--exec")
    yield py, ex
    py.close()
    ex.close()


def test_every_reader_survives_every_probe(tmp_path: Path, servers: tuple[Server, Server], probes: list[Probe],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    py_server, exec_server = servers
    cases = [(r, pr) for r in READERS for pr in probes]

    def one(i: int, reader: Reader, probe: Probe) -> tuple[Reader, Probe, Outcome, float]:
        folder = tmp_path / f"case-{i}"
        folder.mkdir()
        argv = reader.argv(probe.path, folder)
        t0 = time.monotonic()
        if reader.python:
            out = py_server.run(reader.python, argv, reader.env, folder / "stderr")
        else:
            out = exec_server.run("exec", argv, reader.env, folder / "stderr")
        return reader, probe, out, time.monotonic() - t0

    py = [(i, r, pr) for i, (r, pr) in enumerate(cases) if r.python]
    gocases = [(i, r, pr) for i, (r, pr) in enumerate(cases) if not r.python]
    with ThreadPoolExecutor(1) as pool:  # the Go commands' cases beside the Python ones'
        go_results = pool.submit(lambda: [one(*c) for c in gocases])
        results = [one(*c) for c in py] + go_results.result()

    faults, table = [], []
    for reader, probe, out, seconds in results:
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        where = f"{reader.name} on {probe.name}"
        table.append(f"{reader.name:32} {probe.name:14} exit {out.code:3} {out.maxrss_kib / 1024:6.1f} MiB "
                     f"{seconds:5.2f} s  {(lines[-1] if lines else '')[:100]}")
        if out.killed:
            faults.append(f"{where}: still running after {DEADLINE_S:g} s (killed)")
            continue
        if out.maxrss_kib > MAX_RSS_KIB:
            faults.append(f"{where}: peaked at {out.maxrss_kib / 1024:.0f} MiB")
        if "Traceback" in out.stderr:
            faults.append(f"{where}: a traceback:\n{out.stderr[-1500:]}")
            continue
        if reader.absent_ok and probe.refused == "missing":
            continue  # not there yet (a start file) or elsewhere (topocheck): fine, as documented
        must_refuse = probe.kind == "file" or reader.strict
        if must_refuse and (out.code == 0 or len(lines) != 1 or str(probe.path) not in lines[0]):
            faults.append(f"{where}: exit {out.code}, want one line naming {probe.path}:\n{out.stderr[-1500:]}")
    with capsys.disabled():
        print("\n" + "\n".join(table))
    assert not faults, "\n".join(faults)


def test_a_start_file_that_becomes_a_fifo_stops_no_tick(procs, tmp_path: Path) -> None:
    """controller.run.start_file is read at every tick of the oracle: a named pipe put
    there mid-run (it used to stop the ticks while /metrics still answered, and SIGTERM
    could not stop the controller) is logged once and the ticks go on; SIGTERM ends it."""
    _, mc = procs.memcached(16)
    schedule = tmp_path / "oracle.json"
    schedule.write_text(json.dumps({"app_server_schedules": {"app0": {"foresight": {"steps": [
        {"at_s": 0, "mb": {"a": 16}}]}}}}))
    start, timeline = tmp_path / "run-start", tmp_path / "ticks.jsonl"
    topo = tmp_path / "topology.yaml"
    topo.write_text(TOPOLOGY.format(policy="oracle", run=f", run: {{seconds: 60s, oracle: \"{schedule}\", "
                                                         f"start_file: \"{start}\"}}", extra="")
                    .replace('partitions: {a: "127.0.0.1:1"}', f'partitions: {{a: "{mc}"}}'))
    ctl = procs.start([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo, "--id", "app0",
                       "--timeline", timeline], name="controller")

    def ticks() -> int:
        return len(timeline.read_text().splitlines()) if timeline.exists() else 0

    wait_until(lambda: ticks() >= 2 or ctl.poll() is not None, "two ticks")
    assert ctl.poll() is None, procs.log(ctl)
    os.mkfifo(start)
    seen = ticks()
    wait_until(lambda: ticks() >= seen + 3 or ctl.poll() is not None, "three ticks after the FIFO appeared")
    assert ctl.poll() is None, procs.log(ctl)
    log = procs.wait_log(ctl, "kind=run_start_file")
    assert log.count("kind=run_start_file") == 1 and "a named pipe (FIFO), not a regular file" in log, log
    assert procs.stop(ctl, timeout=30) == 0, procs.log(ctl)
