"""Process supervision: every process the testbed starts is stopped on exit, on error
and on Ctrl-C, and its output goes to a log file in the run folder."""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from robinhood_common import ports

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1

#: Every supervised process carries this variable (its value: the log folder), so a
#: test can find any process a run left behind.
MARKER_ENV = "ROBINHOOD_TESTBED_RUN"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


class StartError(RuntimeError):
    """A component did not start; the message names it and points at its log."""


class PortAllocator:
    """Hands out loopback ports that were free when asked, never twice per process,
    and below the kernel's ephemeral range (robinhood_common.ports): a port from
    that range can be taken by an outgoing connection of a component that is
    already running before the next component binds it."""

    def addr(self) -> str:
        return ports.free_addr()


@dataclass
class Proc:
    name: str
    args: list[str]
    popen: subprocess.Popen
    log_path: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def exited(self, when: str = "") -> StartError:
        """The error of a process that ended ``when``: its status and the end of its log."""
        return StartError(f"{self.name} exited with status {self.popen.returncode}{when}; "
                          f"last lines of {self.log_path}:\n{self.tail()}")


@dataclass
class Supervisor:
    """Starts processes with their logs in `log_dir`; stop_all() ends them in reverse order."""

    log_dir: Path
    procs: list[Proc] = field(default_factory=list)

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(self, name: str, args: Sequence[str | os.PathLike[str]],
              env: dict[str, str] | None = None) -> Proc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        argv = [str(a) for a in args]
        with open(log_path, "ab") as fh:
            fh.write(("$ " + " ".join(argv) + "\n").encode())
            fh.flush()
            try:
                p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, MARKER_ENV: str(self.log_dir), **(env or {})},
                                     preexec_fn=_die_with_parent)
            except OSError as e:
                raise StartError(f"{name}: cannot run {argv[0]}: {e.strerror}") from None
        proc = Proc(name, argv, p, log_path)
        self.procs.append(proc)
        log.debug("started %s pid=%d", name, p.pid)
        return proc

    def stop_all(self) -> None:
        # Send SIGTERM to everyone first so they wind down in parallel, then wait.
        for proc in reversed(self.procs):
            if proc.alive():
                try:
                    proc.popen.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
        self.procs.clear()

    def check_alive(self, but: Proc | None = None, when: str = "") -> None:
        """Raise StartError when a supervised process (but ``but``) has exited."""
        for proc in self.procs:
            if proc is not but and not proc.alive():
                raise proc.exited(when)


def wait_tcp(proc: Proc, addr: str, timeout: float = 60.0) -> None:
    """Wait until addr accepts connections (or the process dies)."""
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise proc.exited(f" before listening on {addr}")
        try:
            with socket.create_connection((host, int(port)), timeout=0.25):
                return
        except OSError:
            time.sleep(0.05)
    raise StartError(f"{proc.name} does not listen on {addr} after {timeout:.0f}s; see {proc.log_path}")


def wait_http(proc: Proc, url: str, timeout: float = 60.0, context: ssl.SSLContext | None = None) -> None:
    """Wait until GET url answers 200 (or the process dies); ``context`` verifies an
    https:// server (the topology's CA, and its certificate under mutual TLS)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not proc.alive():
            raise proc.exited(f" before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1, context=context) as r:
                if r.status == 200:
                    return
                last = f"HTTP {r.status}"
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.1)
    raise StartError(f"{proc.name}: {url} did not answer 200 within {timeout:.0f}s ({last}); see {proc.log_path}")
