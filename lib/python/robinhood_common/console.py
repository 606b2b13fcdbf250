"""What every console script shares: leaving quietly when its reader goes away.

``robinhood-controller policies | head`` closes the pipe after ten lines; the next write
raises BrokenPipeError, and Python would print a traceback for it (and another one when
it flushes standard output at exit). :func:`run` treats a closed standard output as the
end of the job: it points the descriptor at /dev/null so the flush at exit cannot fail
again, and exits with status 141 (128 + SIGPIPE), the status a shell reports for a
pipeline member killed by SIGPIPE.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

#: The exit status of a command whose standard output was closed by its reader.
EXIT_PIPE = 128 + 13


def run(main: Callable[[], int]) -> int:
    """Call ``main`` and return its status; a closed standard output ends it with
    :data:`EXIT_PIPE` and no traceback."""
    try:
        try:
            rc = main()
        except SystemExit as e:  # argparse's --help and errors: flush what they wrote first
            sys.stdout.flush()
            raise e
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE
