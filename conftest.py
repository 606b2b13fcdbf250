"""Fixtures shared by every Python test in the repository (controller/tests, tests/).

They start real parts on loopback and free ports: our Go binaries (built into
bin/ by `make build`, or built here once when missing), memcached and Redis.
Every process is stopped when its test ends.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from robinhood_common import ports

REPO = Path(__file__).resolve().parent
BIN = REPO / "bin"
_build_lock = threading.Lock()
_built = False


def free_addr() -> str:
    """A loopback address whose port was free a moment ago (below the kernel's
    ephemeral range, so no outgoing connection takes it before the server binds)."""
    return ports.free_addr()


def wait_tcp(addr: str, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until addr accepts TCP connections."""
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode} before listening on {addr}")
        try:
            with socket.create_connection((host, int(port)), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on {addr} after {timeout}s")


def wait_until(pred: Callable[[], object], what: str, timeout: float = 60.0, interval: float = 0.05) -> None:
    """Wait until pred() is true; fail naming ``what`` when ``timeout`` seconds pass first.
    The deadline is generous on purpose: a test waits for the event it needs, and on a
    busy machine that event can take many times longer than on a quiet one."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(interval)


def wait_ready_file(p: subprocess.Popen, ready: Path, what: str, timeout: float = 90.0,
                    log: Path | None = None) -> None:
    """Wait until a process (e.g. `robinhood-testbed up --ready-file`) writes ready;
    fail with its output (its pipe, or the file ``log`` it writes to) when it exits
    first or the time is up."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        out = log.read_text(errors="replace") if log is not None and log.exists() else ""
        assert p.poll() is None, f"{what} exited: " + (p.stdout.read() if p.stdout else out)
        assert time.monotonic() < deadline, f"{what} did not get ready within {timeout:g}s"
        time.sleep(0.2)


def sigint_default() -> None:
    """Popen preexec_fn: SIGINT at its default in the child. A test runner started as a
    background job ignores SIGINT, children inherit that, and Python then installs no
    KeyboardInterrupt handler: interrupt() would not work like Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(p: subprocess.Popen, timeout: float = 30.0) -> int | None:
    """Ctrl-C a process and wait for it (killed when it does not stop in time)."""
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode


def go_binary(name: str) -> Path:
    """Path of bin/<name>, building every Go binary once if it is missing."""
    global _built
    path = BIN / name
    with _build_lock:
        if not path.exists() and not _built:
            subprocess.run(["go", "build", "-o", "bin/", "./..."], cwd=REPO, check=True)
            _built = True
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist after 'go build -o bin/ ./...'")
    return path


class Procs:
    """Starts processes for one test and stops them all at its end."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, args: list[str | os.PathLike[str]], name: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        name = name or Path(str(args[0])).name
        log = self.logdir / f"{name}-{len(self.procs)}.log"
        fh = open(log, "wb")
        p = subprocess.Popen([str(a) for a in args], stdout=fh, stderr=subprocess.STDOUT,
                             env={**os.environ, **(env or {})}, start_new_session=True)
        fh.close()
        self.procs.append((p, log))
        return p

    def log(self, p: subprocess.Popen) -> str:
        for q, log in self.procs:
            if q is p:
                return log.read_text(errors="replace")
        return ""

    def wait_log(self, p: subprocess.Popen, text: str, timeout: float = 60.0) -> str:
        """Wait until the process's output holds ``text`` and return the output; fail with
        the output when the process exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.log(p)
            if text in out:
                return out
            if p.poll() is not None:
                raise AssertionError(f"{p.args[0]} exited with {p.returncode} before logging {text!r}:\n{out}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"{p.args[0]} did not log {text!r} within {timeout:g}s:\n{out}")
            time.sleep(0.05)

    @staticmethod
    def stop(p: subprocess.Popen, timeout: float = 5.0) -> int | None:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def stop_all(self) -> None:
        for p, _ in reversed(self.procs):
            self.stop(p)

    def memcached(self, mb: int = 64, extra: list[str] | None = None) -> tuple[subprocess.Popen, str]:
        exe = shutil.which("memcached")
        if exe is None:
            pytest.fail("memcached is not installed: run 'make deps' (as root it installs Debian's memcached)")
        addr = free_addr()
        port = addr.rsplit(":", 1)[1]
        args = [exe, "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", str(mb)]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        p = self.start(args + (extra or []), name="memcached")
        wait_tcp(addr, proc=p)
        return p, addr

    def redis(self, mb: int = 64, extra: list[str] | None = None, addr: str | None = None,
              policy: str = "allkeys-lru") -> tuple[subprocess.Popen, str]:
        """A redis-server without persistence, with maxmemory mb MB (as the testbed
        starts a Redis partition), on a free port or on addr."""
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed: run 'make deps' (as root it installs Debian's redis-server)")
        addr = addr or free_addr()
        port = addr.rsplit(":", 1)[1]
        args = [exe, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
                "--maxmemory", f"{mb}mb", "--maxmemory-policy", policy]
        p = self.start(args + (extra or []), name="redis")
        wait_tcp(addr, proc=p)
        return p, addr


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    """Process manager for one test; dumps the logs of its processes on failure."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    pm = Procs(logdir)
    yield pm
    pm.stop_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        pm = item.funcargs.get("procs") if hasattr(item, "funcargs") else None
        if isinstance(pm, Procs):
            for p, log in pm.procs:
                text = log.read_text(errors="replace")[-4000:]
                rep.sections.append((f"log of {' '.join(map(str, p.args))[:120]}", text))


@pytest.fixture
def gobin() -> Callable[[str], Path]:
    """gobin("rbcserver") -> path of bin/rbcserver (built when missing)."""
    return go_binary


@pytest.fixture
def free_address() -> Callable[[], str]:
    """free_address() -> "127.0.0.1:<free port>"."""
    return free_addr


@dataclass(frozen=True)
class Probe:
    """One hostile input of tests/vectors/probes.json, made at ``path``."""

    name: str
    kind: str  # "file": the wrong kind of file, every reader refuses it; "content": hostile text
    refused: str  # for a "file" probe: not_regular, too_large or missing
    path: Path
    size: int  # bytes of a "content" probe


def make_probes(folder: Path) -> list[Probe]:
    """The shared hostile-input probes (a FIFO, /dev/zero, a sparse 2 GB file, bombs),
    each made in ``folder`` (nothing large is written: the sparse file is truncated)."""
    doc = json.loads((REPO / "tests" / "vectors" / "probes.json").read_text())
    assert doc["schema"] == "robinhood-probes/v1" and len(doc["probes"]) >= 8
    out = []
    for p in doc["probes"]:
        path, size = folder / p["name"], 0
        make = p["make"]
        if make == "fifo":
            os.mkfifo(path, 0o600)
        elif make == "path":
            path = Path(p["path"])
        elif make == "folder":
            path.mkdir()
        elif make == "sparse":
            with open(path, "wb") as f:
                f.truncate(p["bytes"])
            path.chmod(0o600)
        elif make in ("text", "repeat"):
            data = p["text"].encode() * (p["count"] if make == "repeat" else 1)
            path.write_bytes(data)
            path.chmod(0o600)
            size = len(data)
        else:
            assert make == "missing", f"probe {p['name']}: unknown make {make!r}"
        out.append(Probe(p["name"], p["kind"], p.get("refused", ""), path, size))
    return out


@pytest.fixture
def probes(tmp_path: Path) -> list[Probe]:
    """make_probes in a folder of the test's."""
    folder = tmp_path / "probes"
    folder.mkdir()
    return make_probes(folder)
