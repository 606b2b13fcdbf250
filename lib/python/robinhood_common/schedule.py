"""The oracle's schedule file (``tracegen oracle``'s JSON, ``oracle.json``): read bounded,
parsed as JSON and checked against ``schema/oracle.schema.yaml`` through the contract
reader. Its one reader: the testbed (robinhood_testbed.oracle) checks the whole document
with :func:`read`; an oracle policy (controller.run.oracle) checks the part it applies,
its app server's schedules, with :func:`app_server` (a long run's file takes a second to
check whole, and every controller reads it).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .contract import ConfigError, Contract
from .files import read_bounded

SCHEMA = "oracle.schema.yaml"
#: The largest schedule file read (a long run's, with every candidate, is about 1 MB).
MAX_SCHEDULE_BYTES = 4 << 20
#: The files :func:`read` has checked whole, unchanged since: (device, inode, size, mtime).
_checked: set[tuple[int, int, int, int]] = set()


class ScheduleError(ValueError):
    """A schedule file that cannot be read or is not one; the message names the file, and
    the field when the fault is in one."""


def _number(text: str) -> float:
    """A JSON number as a float; not NaN, Infinity or one beyond a float (Go's reader
    refuses them too)."""
    if not math.isfinite(v := float(text)):
        raise ValueError(f"{text} is not a JSON number")
    return v


def load(path: str | Path) -> Any:
    """The JSON at ``path``, unchecked. ScheduleError for a file that is no regular file of
    at most MAX_SCHEDULE_BYTES or is not JSON."""
    try:
        return json.loads(read_bounded(path, MAX_SCHEDULE_BYTES), parse_constant=_number, parse_float=_number)
    except OSError as e:
        raise ScheduleError(f"cannot read the schedule {path}: {e.strerror or e}") from None
    except RecursionError:
        raise ScheduleError(f"cannot read the schedule {path}: not JSON: nested too deep") from None
    except ValueError as e:
        raise ScheduleError(f"cannot read the schedule {path}: not JSON: {e}") from None


def _check(target: str, doc: Any, path: str | Path, where: str = "") -> Any:
    try:
        return Contract.packaged().read(SCHEMA + target, doc, where)
    except ConfigError as e:
        raise ScheduleError(f"the schedule {path} is not tracegen oracle's: {e}") from None


def read(path: str | Path) -> dict[str, Any]:
    """The schedule file at ``path`` as written, checked whole against the schema
    (ScheduleError: :func:`load`'s, or the field and what is wrong with it). A file this
    process has checked already, unchanged since, is not checked again."""
    try:
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    doc = load(path)
    if key not in _checked:
        _check("", doc, path)
        if key is not None:
            _checked.add(key)
    return doc


def app_server(doc: Any, app: str, path: str | Path) -> dict[str, Any]:
    """The schedules of app server ``app`` in a loaded schedule file, checked against the
    schema and normalized (whole MB as integers, seconds as floats). ScheduleError when
    the file has none for it (with the file's reason, when it gives one) or they break
    the schema."""
    apps = doc.get("app_server_schedules") if isinstance(doc, dict) else None
    part = apps.get(app) if isinstance(apps, dict) else None
    if not part:
        why = doc.get("schedules_skipped") if isinstance(doc, dict) else None
        raise ScheduleError(f"{path} has no schedule for app server {app}"
                            + (f": {why}" if why else " (tracegen oracle writes app_server_schedules.<id>)"))
    return _check("#/$defs/app_server", part, path, f"app_server_schedules.{app}")
