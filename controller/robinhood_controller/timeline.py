"""The allocation timeline: one JSON line per tick (`--timeline FILE`), from which the
testbed plots allocations over time (paper Fig. 13). Schema in docs/controller.md."""
from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any


class TimelineWriter:
    """Appends one JSON object per tick and flushes it, so a reader sees whole lines."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: IO[str] = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        """Write one record as a line."""
        self._fh.write(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def read_timeline(path: str | Path) -> list[dict[str, Any]]:
    """All records of a timeline file."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
