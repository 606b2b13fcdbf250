"""TAO++ (paper §5.1, Table 2): the static allocation RobinHood reaches on average over
the first 20% of the run, then kept for the rest of it.

TAO (Facebook's graph cache) partitions its cache statically among its tenants; the
paper's TAO++ gives it the best static split it could know: the allocation RobinHood
converges to in the first 20% of the experiment, averaged over that time. Here the
policy runs RobinHood's own plan (``tax``, ``unused_gap``) for ``learn_fraction`` of the
run (``controller.run.seconds``, from its start file; from the first tick without one;
or for ``learn`` seconds when given), averaging the targets tick by tick, then holds the
average (rounded to whole bytes that sum to the budget). Given ``allocation_mb``, or
``from_run`` (an earlier RobinHood arm's results folder, e.g. ``runs/demo-…/robinhood``:
RobinHood's time-weighted average over the first ``learn_fraction`` of that run, read
from its controller timeline), it holds that from the start instead.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, model_validator
from robinhood_common.split import split_weighted

from ..plan import MIB
from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyError
from .registry import register
from .robinhood import TAX, RobinHoodParams, plan_robinhood


class TaoParams(Params):
    tax: float = Field(TAX, ge=0, le=0.5, description="RobinHood's tax while learning")
    unused_gap: float = Field(0.30, ge=0, le=100, description="RobinHood's unused-space gap while learning")
    learn_fraction: float = Field(0.2, gt=0, le=1, description="share of the run (controller.run.seconds) spent learning")
    learn: float | None = Field(None, gt=0, description="learning time in seconds (instead of learn_fraction)")
    allocation_mb: dict[str, int] | None = Field(None, description="a fixed allocation to hold from the start, MB per partition")
    from_run: str | None = Field(None, description="an earlier RobinHood arm's results folder: hold its average over "
                                 "learn_fraction of that run from the start")

    @model_validator(mode="after")
    def _one_source(self) -> "TaoParams":
        if self.allocation_mb is not None and self.from_run is not None:
            raise ValueError("give allocation_mb or from_run, not both")
        return self


@register
class Tao(AllocationPolicy):
    name = "tao++"
    summary = "RobinHood's average allocation over the first 20% of the run, then static (paper §5.1)"
    Params = TaoParams
    needs_rbc = True
    color = "#17becf"
    role = "baseline"

    def __init__(self, params: Params, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, ctx)
        self.start: float | None = None
        self.sums: dict[str, float] = {}
        self.weight = 0.0
        self.last: float | None = None
        self.fixed: dict[str, int] | None = None
        p: TaoParams = params  # type: ignore[assignment]
        self.from_run = (average_from_run(Path(p.from_run), ctx.app_server, p.learn_fraction)
                         if p.from_run is not None else None)  # fail at start, not at the first tick
        if self.from_run is not None:
            missing = sorted(set(ctx.configured) - set(self.from_run))
            if missing:
                raise PolicyError(f"tao++.from_run: {p.from_run} has no allocation for partition {missing[0]!r}")

    def _learn_seconds(self) -> float:
        p: TaoParams = self.params  # type: ignore[assignment]
        if p.learn is not None:
            return p.learn
        run = self.ctx.run.seconds if self.ctx.run is not None and self.ctx.run.seconds else None
        return p.learn_fraction * run if run else 60.0

    def initial_targets(self, adopted: Mapping[str, int]) -> dict[str, int]:
        p: TaoParams = self.params  # type: ignore[assignment]
        if p.allocation_mb is not None:
            self.fixed = hold({n: p.allocation_mb.get(n, 0) * MIB for n in adopted}, sum(adopted.values()))
            return dict(self.fixed)
        if self.from_run is not None:
            self.fixed = hold({n: round(self.from_run.get(n, 0.0)) for n in adopted}, sum(adopted.values()))
            return dict(self.fixed)
        return dict(adopted)

    def plan(self, inp: PlanInput) -> Decision:
        if self.fixed is not None:
            targets = {n: self.fixed.get(n, t) for n, t in inp.targets.items()}
            if sum(targets.values()) != sum(inp.targets.values()):
                targets = dict(inp.targets)
            return Decision(targets=targets, moved=targets != dict(inp.targets))
        if self.start is None:
            self.start = self.ctx.run_start() or inp.now
        p: TaoParams = self.params  # type: ignore[assignment]
        r = plan_robinhood(inp.targets, inp.used, inp.rbc,
                           RobinHoodParams(tax=p.tax, unused_gap=p.unused_gap, floor_bytes=self.ctx.floor_bytes),
                           applied=inp.applied())
        # The time-weighted average of the targets over the learning phase.
        dt = inp.now - self.last if self.last is not None else 0.0
        self.last = inp.now
        for n, t in r.targets.items():
            self.sums[n] = self.sums.get(n, 0.0) + t * dt
        self.weight += dt
        if inp.now - self.start >= self._learn_seconds() and self.weight > 0:
            self.fixed = hold({n: round(v / self.weight) for n, v in self.sums.items()}, sum(inp.targets.values()))
            targets = {n: self.fixed.get(n, t) for n, t in inp.targets.items()}
            return Decision(targets=targets, moved=targets != dict(inp.targets))
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible)


def hold(weights: Mapping[str, int], total: int) -> dict[str, int]:
    """An allocation in proportion to weights that sums exactly to total."""
    return split_weighted(total, {n: max(0, w) for n, w in weights.items()})


def average_from_run(folder: Path, app_server: str, fraction: float) -> dict[str, float]:
    """RobinHood's time-weighted average target (bytes per partition) over the first
    ``fraction`` of an earlier run, from the controller timeline in its results folder
    (``controller-<app server>.jsonl``: this app server's when there is one, else every
    app server's, averaged). The run starts at its ``run-start`` file's time (else at the
    first tick) and ends at its last tick."""
    if not folder.is_dir():
        raise PolicyError(f"tao++.from_run: {folder} is not a folder")
    own = folder / f"controller-{app_server}.jsonl"
    files = [own] if app_server and own.is_file() else sorted(folder.glob("controller-*.jsonl"))
    if not files:
        raise PolicyError(f"tao++.from_run: {folder} holds no controller timeline (controller-*.jsonl)")
    try:
        start: float | None = float((folder / "run-start").read_text().strip())
    except (OSError, ValueError):
        start = None
    sums: dict[str, float] = {}
    weight = 0.0
    for f in files:
        ticks = []
        for ln in f.read_text().splitlines():
            try:
                d = json.loads(ln)
                ticks.append((float(d["time"]), {n: float(v.get("target_bytes", v.get("limit_bytes")))
                                                 for n, v in d["partitions"].items()}))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn last line, or a tick without partitions
        if len(ticks) < 2:
            continue
        t0 = start if start is not None else ticks[0][0]
        end = t0 + fraction * (ticks[-1][0] - t0)
        for (t, targets), (t_next, _) in zip(ticks, ticks[1:]):
            dt = min(t_next, end) - max(t, t0)
            if dt <= 0:
                continue
            for n, v in targets.items():
                sums[n] = sums.get(n, 0.0) + v * dt
            weight += dt
    if weight <= 0:
        raise PolicyError(f"tao++.from_run: {folder}'s controller timeline has no ticks in the first "
                          f"{fraction:g} of the run")
    return {n: v / weight for n, v in sums.items()}
