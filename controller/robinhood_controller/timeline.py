"""The allocation timeline: one JSON line per tick (`--timeline FILE`), from which the
testbed plots allocations over time (paper Fig. 13). Schema in docs/controller.md.

:func:`tick_record` builds the line; the controller loop and the simulator's policy
server both use it, so their timelines have one schema."""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .plan import MIB

if TYPE_CHECKING:
    from .rbc import RBCSnapshot

log = logging.getLogger("robinhood_controller")


@dataclass(frozen=True)
class PartitionAfter:
    """What memcached reports of a partition after a tick (None in a record's
    ``partitions`` for one that did not answer)."""

    limit_bytes: int
    """limit_maxbytes after the tick (the limit set, or the one read)."""
    malloced_bytes: int
    """total_malloced after the tick."""
    item_bytes: int
    """bytes: the size of the stored items."""
    hit_ratio: float | None
    """get_hits / gets since memcached started; None before the first get."""
    pages_moved: int = 0
    """Pages given back this tick."""


def tick_record(
    *,
    time: float,
    tick: int,
    app_server: str,
    policy: str,
    dry_run: bool,
    budget_bytes: int,
    names: Sequence[str],
    after: Mapping[str, PartitionAfter | None],
    targets: Mapping[str, int] | None,
    limits_mb: Mapping[str, int] | None,
    used: Mapping[str, int],
    rbc: RBCSnapshot | None,
    eligible: Mapping[str, bool],
    notes: Sequence[str] = (),
    explain: Mapping[str, Mapping[str, float | str]] | None = None,
) -> dict[str, Any]:
    """The timeline line of a tick (schema in docs/controller.md).

    names: every partition, in order; after: per partition, memcached after the tick
    (None or missing: it did not answer); targets and limits_mb: the tick's targets
    (bytes) and planned whole-MB limits (None before adoption); used: u_i of the
    reachable partitions; rbc: the snapshot read (None: not read); eligible: per
    planned partition; notes: what the tick did beyond the numbers (adoption, the
    policy's own note), written only when there are any; explain: per partition, the
    policy's view (Decision.explain), under the partition's "policy" key when it has one.
    """
    parts: dict[str, Any] = {}
    for n in names:
        a = after.get(n)
        parts[n] = {
            "up": a is not None,
            "target_bytes": targets[n] if targets is not None else None,
            "planned_limit_bytes": limits_mb[n] * MIB if limits_mb is not None else None,
            "limit_bytes": a.limit_bytes if a is not None else None,
            "malloced_bytes": a.malloced_bytes if a is not None else None,
            "used_bytes": used.get(n),
            "item_bytes": a.item_bytes if a is not None else None,
            "rbc": rbc.counts.get(n, 0) if rbc is not None else None,
            "eligible": eligible.get(n),
            "pages_moved": a.pages_moved if a is not None else 0,
            "hit_ratio": a.hit_ratio if a is not None else None,
        }
        if explain and explain.get(n):
            parts[n]["policy"] = dict(explain[n])
    record: dict[str, Any] = {
        "time": round(time, 3),
        "tick": tick,
        "app_server": app_server,
        "policy": policy,
        "dry_run": dry_run,
        "budget_bytes": budget_bytes,
        "rbc_ok": rbc is not None,
        "window_requests": rbc.window_requests if rbc is not None else None,
        "pages_moved": sum(a.pages_moved for a in after.values() if a is not None),
        "partitions": parts,
    }
    if notes:
        record["notes"] = list(notes)
    return record


class TimelineWriter:
    """Appends one JSON object per tick and flushes it, so a reader sees whole lines. A
    line that cannot be written (a full disk) is counted in ``lost`` and logged (once
    when it starts, once when writing works again), never raised: the timeline is a
    record of the control loop, which goes on without it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: IO[str] = open(self.path, "a", encoding="utf-8")
        self.lost = 0
        self._failing = False

    def write(self, record: dict[str, Any]) -> None:
        """Write one record as a line."""
        try:
            self._fh.write(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
            self._fh.flush()
        except OSError as e:
            self.lost += 1
            if not self._failing:
                self._failing = True
                log.error("event=error kind=timeline path=%s msg=%r (the control loop goes on; lines are lost "
                          "until writing works again)", self.path, e.strerror or str(e))
            return
        if self._failing:
            self._failing = False
            log.warning("event=timeline_resumed path=%s lost=%d", self.path, self.lost)

    def close(self) -> None:
        """Close the file; what could not be written is logged, not raised."""
        try:
            self._fh.close()
        except OSError as e:
            self.lost += 1
            log.error("event=error kind=timeline path=%s msg=%r (closing it)", self.path, e.strerror or str(e))


def read_timeline(path: str | Path) -> list[dict[str, Any]]:
    """All records of a timeline file."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
