"""A fork server for tests that run commands many times and measure each
(tests/test_hostile_inputs.py). It runs each case it reads on standard input — a JSON
line {"entry", "argv", "stderr", "timeout"} — in a child forked for it (stdin and stdout
/dev/null, stderr into the file named), and answers a JSON line {"code", "maxrss_kib",
"killed"}: the exit status, the child's peak resident memory, and whether it was killed
for running past its timeout.

An "entry" is a Python console script's, run in the child as the script would run it:
the commands are imported once, which saves their seconds of imports a case (the peak
counts the imports the child shares). With --exec the server imports nothing and
"entry" is "exec": the child executes argv. Linux counts a process's memory before it
executes another program in the new program's peak, so a test's own process, grown
large by the tests before it, would inflate every measurement of a command it started;
this small process starts them instead."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback

from typing import Any, Callable

ENTRIES: dict[str, Callable[[Any], Any]] = {}


def child(case: dict) -> None:
    """Runs in the forked child; never returns."""
    code = 70
    try:
        err = os.open(case["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if case["entry"] == "exec":
            os.setsid()
            os.execvpe(case["argv"][0], case["argv"], {**os.environ, **(case.get("env") or {})})
        os.environ.update(case.get("env") or {})
        code = ENTRIES[case["entry"]](case["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - a traceback is what the test looks for
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


def main() -> None:
    if "--exec" not in sys.argv[1:]:
        from robinhood_controller.cli import main as controller_main
        from robinhood_report.cli import main as report_main
        ENTRIES.update({"robinhood-controller": controller_main, "robinhood-report": report_main})
    for line in sys.stdin:
        case = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(case)
        deadline, killed = time.monotonic() + case["timeout"], False
        while True:
            wpid, status, ru = os.wait4(pid, os.WNOHANG)
            if wpid:
                break
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL) if case["entry"] == "exec" else os.kill(pid, signal.SIGKILL)
                killed = True
                _, status, ru = os.wait4(pid, 0)
                break
            time.sleep(0.005)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status), "maxrss_kib": ru.ru_maxrss, "killed": killed}),
              flush=True)


if __name__ == "__main__":
    main()
