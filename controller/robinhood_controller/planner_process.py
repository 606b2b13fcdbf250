"""The planner process: the backend-load model (lib/model, in Go) that the ``planner``
allocation policy evaluates on its estimates, run as a child process speaking JSON lines
(proto/robinhood/v1/planner.proto; docs/protocol.md, "The planner protocol").

It is mechanism, not policy: it starts ``planner`` on first use, sends one request line
and reads one answer line with a deadline, and on any failure (no binary, a crash, a
hang, an error answer) stops the child and raises :class:`PlannerUnavailable`, so that the
policy can fall back to what it does without the model; the next call starts a new one.
The child ends when the controller does (its stdin closes).
"""
from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
import weakref
from pathlib import Path
from typing import TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from robinhood.v1 import planner_pb2 as pb

ENV = "ROBINHOOD_PLANNER"
"""The environment variable naming the planner binary (before the checkout's bin/ and PATH)."""
TIMEOUT_S = 5.0
"""The longest a plan may take before the child is taken to hang (a plan of 20 backends
takes about a millisecond)."""
MAX_ANSWER = 16 << 20
"""The longest answer line read (bytes)."""

A = TypeVar("A", bound=Message)


class PlannerUnavailable(RuntimeError):
    """The planner could not answer; the message says why, in one line."""


def find_binary() -> str | None:
    """The planner binary: $ROBINHOOD_PLANNER, else this checkout's bin/planner, else
    ``planner`` on PATH; None when there is none."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    here = Path(__file__).resolve().parents[2] / "bin" / "planner"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("planner")


class PlannerProcess:
    """One planner child, started on first use."""

    def __init__(self, binary: str | None = None, timeout: float = TIMEOUT_S) -> None:
        self.binary = binary
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._finalizer: weakref.finalize | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        binary = self.binary or find_binary()
        if binary is None:
            raise PlannerUnavailable(f"no planner binary (set {ENV}, run `make build`, or put planner on PATH)")
        try:
            self._proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, bufsize=0)
        except OSError as e:
            raise PlannerUnavailable(f"cannot start {binary}: {e.strerror}") from None
        self._buf = b""
        self._finalizer = weakref.finalize(self, _stop, self._proc)
        return self._proc

    def close(self) -> None:
        """Stop the child (if any)."""
        if self._finalizer is not None:
            self._finalizer()
        self._proc = None

    def _fail(self, why: str) -> PlannerUnavailable:
        self.close()
        return PlannerUnavailable(why)

    def call(self, request: Message, answer: type[A]) -> A:
        """Send one request, read its answer (PlannerUnavailable on any failure)."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        line = json_format.MessageToJson(request, preserving_proto_field_name=True, indent=None)
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        except OSError as e:
            raise self._fail(f"planner: writing the request: {e.strerror or e}") from None
        deadline = time.monotonic() + self.timeout
        fd = proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"planner: no answer within {self.timeout:g}s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._fail(f"planner: exited (status {proc.wait()}) without an answer")
            self._buf += chunk
            if len(self._buf) > MAX_ANSWER:
                raise self._fail(f"planner: an answer over {MAX_ANSWER >> 20} MiB")
        raw, _, self._buf = self._buf.partition(b"\n")
        out = answer()
        try:
            json_format.Parse(raw.decode(), out, ignore_unknown_fields=False)
        except (json_format.ParseError, UnicodeDecodeError) as e:
            raise self._fail(f"planner: an answer that is not {answer.DESCRIPTOR.name}: {e}") from None
        if not getattr(out, "ok"):
            raise PlannerUnavailable(f"planner: {getattr(out, 'error')}")
        return out

    def capacity(self, limits: list[pb.PlannerLimits]) -> list[float]:
        """lib/model.Capacity of each declared limits block (queries/s; inf: unbounded)."""
        ans = self.call(pb.PlannerCapacityRequest(op="capacity", limits=limits), pb.PlannerCapacityAnswer)
        return list(ans.capacity)

    def plan(self, request: pb.PlanRequest) -> pb.PlanAnswer:
        """The model's answer to a plan request."""
        request.op = "plan"
        return self.call(request, pb.PlanAnswer)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()


__all__ = ["PlannerProcess", "PlannerUnavailable", "find_binary", "ENV"]
