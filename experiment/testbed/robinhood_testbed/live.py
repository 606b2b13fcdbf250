"""The live view while a run is going: time left, requests/s, current P99 against the
SLO, hit ratio and allocation per partition, RBC shares. On a terminal it is a
rich table redrawn in place; otherwise one plain line every 10 s."""
from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .analysis import fmt
from .run import LiveState


def render(st: LiveState, names: list[str]) -> Group:
    elapsed = max(0.0, time.time() - st.started) if st.started else 0.0
    left = max(0.0, st.duration - elapsed)
    p99 = fmt(st.p99_ms, "{:.0f} ms")
    over = st.p99_ms is not None and st.p99_ms > st.slo_ms
    head = Text.assemble(
        (f"policy {st.policy}", "bold"), f"   {elapsed:5.0f}s elapsed, {left:4.0f}s left   ",
        f"{st.sent_rate:6.0f} req/s   errors {st.errors:.0f}   P99 ",
        (p99, "bold red" if over else "bold green"), f" (SLO {st.slo_ms:.0f} ms)")
    t = Table(expand=False)
    t.add_column("backend")
    for heading in ("hit ratio", "allocation (MB)", "RBC share"):
        t.add_column(heading, justify="right")
    for n in names:
        share = st.rbc_share.get(n)
        t.add_row(n, fmt(st.hit_ratio.get(n), "{:.3f}"), fmt(st.alloc_mb.get(n), "{:.1f}"),
                  fmt(None if share is None else 100 * share, "{:.0f}%"))
    return Group(head, t)


class LiveView:
    """Call with the current state as often as you like; it throttles itself."""

    def __init__(self, names: list[str], console: Console | None = None) -> None:
        self.names = names
        self.console = console or Console(stderr=True)
        self.tty = self.console.is_terminal
        self.live: Live | None = None
        self._last_line = 0.0

    def __call__(self, st: LiveState) -> None:
        if self.tty:
            if self.live is None:
                self.live = Live(render(st, self.names), console=self.console, refresh_per_second=2, transient=False)
                self.live.start()
            else:
                self.live.update(render(st, self.names))
            return
        now = time.time()
        if now - self._last_line >= 10:
            self._last_line = now
            p99 = fmt(st.p99_ms, "{:.0f}ms")
            alloc = " ".join(f"{n}={st.alloc_mb[n]:.0f}MB" for n in self.names if n in st.alloc_mb)
            print(f"[{st.policy}] t={now - st.started:.0f}s sent/s={st.sent_rate:.0f} errors={st.errors:.0f} "
                  f"p99={p99} {alloc}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def __enter__(self) -> "LiveView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
