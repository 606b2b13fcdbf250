"""A fork server for tests that run the Python commands many times
(tests/test_hostile_inputs.py): it imports the commands once, then runs each case it
reads on standard input — a JSON line {"entry", "argv", "stderr", "timeout"} — in a
child forked for it, as the console script would run (stdin and stdout /dev/null, stderr
into the file named), and answers a JSON line {"code", "maxrss_kib", "killed"}: the exit
status, the child's peak resident memory (the imports it shares included), and whether
it was killed for running past its timeout. Forking saves the imports' seconds a case."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback

from robinhood_controller.cli import main as controller_main
from robinhood_report.cli import main as report_main

ENTRIES = {"robinhood-controller": controller_main, "robinhood-report": report_main}


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
                os.kill(pid, signal.SIGKILL)
                killed = True
                _, status, ru = os.wait4(pid, 0)
                break
            time.sleep(0.005)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status), "maxrss_kib": ru.ru_maxrss, "killed": killed}),
              flush=True)


if __name__ == "__main__":
    main()
