"""Oracle (beyond the paper): per scenario phase, the allocation with the lowest
predicted request P99, computed in advance from the run's trace and scenario — the
bound every online policy is measured against.

``tracegen scenario check --trace --json`` (docs/algorithms.md, "Feasibility and the
oracle") computes, for every phase of the scenario (an interval with constant backend
capacities), the allocation of this app server's budget that minimizes the request P99
predicted by a latency model of each backend built from the capacity model (its gate —
token bucket or workers — as a batch queue, its service times, the phase's miss-ratio
curve read at what memcached holds), starting from the allocation that minimizes the
worst load/capacity. With ``lookahead`` (the default: the oracle is the offline bound,
it may use the future) it passes ``--lookahead``: a calm phase takes the next phase's
allocation when its own predicted P99 stays within 10% of its best (and the SLO), so
space moves a phase early and caches are full when a stressed phase begins.

The policy reads the run's trace, scenario and topology from ``controller.run`` (the
testbed sets them), runs that analysis once, and at every tick applies the allocation
of the phase the run is in (time since the run's start file; since the first tick
without one). It moves the whole way at once: the mechanism still frees memory at
memcached's pace.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from pydantic import Field

from ..plan import MIB
from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyError
from .registry import register


class OracleParams(Params):
    tracegen: str = Field("", description="path of bin/tracegen (default: $ROBINHOOD_BIN/tracegen, then PATH)")
    lookahead: bool = Field(True, description="move space a phase early (scenario check --lookahead): a calm phase "
                                              "takes the next phase's allocation when its own predicted P99 stays "
                                              "within 10% of its best and the SLO, so caches fill before they are "
                                              "needed")


@register
class Oracle(AllocationPolicy):
    name = "oracle"
    summary = ("per scenario phase, the allocation minimizing the request P99 a latency model of the backends "
               "predicts (from the capacity model), computed in advance; with lookahead, space moves a phase early "
               "(beyond the paper)")
    Params = OracleParams
    needs_run = True
    color = "#000000"

    def __init__(self, params: Params, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, ctx)
        self.phases: list[tuple[float, float, dict[str, int]]] | None = None
        self.start: float | None = None
        self.schedule()  # fail at start (PolicyError), not at the first tick

    def _tracegen(self) -> str:
        given = self.params.tracegen  # type: ignore[attr-defined]
        if given:
            return given
        bin_dir = os.environ.get("ROBINHOOD_BIN")
        if bin_dir and (Path(bin_dir) / "tracegen").exists():
            return str(Path(bin_dir) / "tracegen")
        found = shutil.which("tracegen")
        if found is None:
            raise PolicyError("oracle: bin/tracegen not found (set ROBINHOOD_BIN or the tracegen parameter)")
        return found

    def schedule(self) -> list[tuple[float, float, dict[str, int]]]:
        """The phases (start s, end s, allocation MB), computed once."""
        if self.phases is not None:
            return self.phases
        run = self.ctx.run
        if run is None or not (run.trace and run.scenario and run.topology and run.seconds):
            raise PolicyError("oracle: controller.run must name the run's trace, scenario, topology and seconds "
                              "(the testbed sets them)")
        args = [self._tracegen(), "scenario", "check", run.scenario, "--topology", run.topology,
                "--duration", f"{run.seconds:g}s", "--trace", run.trace, "--app-server", self.ctx.app_server, "--json"]
        if self.params.lookahead:  # type: ignore[attr-defined]
            args.append("--lookahead")
        res = subprocess.run(args, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise PolicyError(f"oracle: {' '.join(args)} failed: {res.stderr.strip()}")
        doc = json.loads(res.stdout[res.stdout.index("{"):])
        self.phases = [(p["start_s"], p["end_s"], p["oracle_mb"]) for p in doc["phases"]]
        return self.phases

    def plan(self, inp: PlanInput) -> Decision:
        if self.start is None:
            self.start = self.ctx.run_start() or inp.now
        elif (s := self.ctx.run_start()) is not None:
            self.start = s
        t = inp.now - self.start
        phases = self.schedule()
        mb = phases[0][2]
        for start, _, alloc in phases:
            if t >= start:
                mb = alloc
        targets = {n: mb.get(n, 0) * MIB for n in inp.targets}
        if sum(targets.values()) != sum(inp.targets.values()) or any(v < self.ctx.floor_bytes for v in targets.values()):
            return Decision(targets=dict(inp.targets), moved=False)
        return Decision(targets=targets, moved=targets != dict(inp.targets))
