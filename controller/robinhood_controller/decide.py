"""One tick's decision: from what the partitions and the RBC server said to new targets
and the whole-MB limits to apply. Pure: no I/O, no clock, no state of its own.

It is the one implementation of the plan step, shared by the controller loop
(:meth:`Controller.tick`, which reads memcached and the RBC server and reconciles
memcached afterwards) and the simulator's policy server (:mod:`.policy_server`, which
is told the same readings in JSON and returns the limits to the simulator):

  1. no targets yet and every partition reachable: adopt targets from the actual
     limits (:func:`plan.adopt`), then ``policy.initial_targets``;
  2. a policy that needs the RBC and has no snapshot keeps its targets;
  3. otherwise the policy plans the reachable partitions (:class:`PlanInput`); a
     decision that fails :func:`check_decision`, or a policy that raises, keeps the
     targets;
  4. the targets are rounded to whole-MB limits summing to the budget
     (:func:`plan.round_limits`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .plan import MIB, adopt, round_limits
from .policies import MOVE_REASONS, AllocationPolicy, PartitionSample, PlanInput
from .rbc import RBCSnapshot


def check_decision(before: dict[str, int], after: dict[str, int], floor: int) -> str:
    """Why a policy's targets cannot be applied ("" when they can): the same
    partitions, the same sum, none below the floor."""
    if set(after) != set(before):
        return f"targets for {sorted(after)}, not {sorted(before)}"
    if sum(after.values()) != sum(before.values()):
        return f"targets sum to {sum(after.values())} bytes, not {sum(before.values())}"
    low = [n for n, v in after.items() if v < min(floor, before[n])]
    if low:
        return f"targets below the floor for {low}"
    return ""


def used_bytes(sample: PartitionSample, used_source: str) -> int:
    """u_i of a partition: total_malloced (``malloced``) or the items' bytes (``bytes``)."""
    return sample.malloced_bytes if used_source == "malloced" else sample.item_bytes


@dataclass(frozen=True)
class TickDecision:
    """What one tick decided."""

    targets: dict[str, int] | None
    """The targets after the tick, bytes, every partition (None: not adopted yet)."""
    before: dict[str, int] | None
    """The targets the policy started from (after adoption on the first tick)."""
    limits_mb: dict[str, int] | None
    """The whole-MB limits to apply, every partition, summing to the budget (None
    while there are no targets)."""
    eligible: dict[str, bool]
    """Per planned partition, whether it could receive space (policies with such a rule)."""
    used: dict[str, int]
    """u_i per reachable partition, bytes."""
    notes: list[str] = field(default_factory=list)
    """What happened, for logs and reports ("adopted …", "rbc unavailable: targets kept")."""
    policy_error: str = ""
    """Why the policy's answer was rejected ("" unless it failed; the targets were kept)."""
    explain: dict[str, dict[str, float | str]] = field(default_factory=dict)
    """Per partition, the policy's view (Decision.explain): estimates, predicted
    utilization, why it last moved."""


def decide(
    policy: AllocationPolicy,
    names: Sequence[str],
    targets: Mapping[str, int] | None,
    samples: Mapping[str, PartitionSample],
    snap: RBCSnapshot | None,
    *,
    budget_mb: int,
    floor_mb: int,
    used_source: str,
    now: float,
) -> TickDecision:
    """One tick's decision (see the module doc).

    names: every partition of the app server, in order.
    targets: the targets kept from the previous tick (None before adoption); not modified.
    samples: the partitions that answered this tick; a name missing is unreachable:
      its target is frozen and it is not planned.
    snap: the RBC snapshot, None when it could not be read.
    floor_mb: controller.min_partition_mb. used_source: controller.used_source.
    now: the tick's time, Unix seconds (PlanInput.now).
    """
    notes: list[str] = []
    live = [n for n in names if n in samples]
    used = {n: used_bytes(samples[n], used_source) for n in live}
    current = dict(targets) if targets is not None else None

    if current is None and len(live) == len(names):
        limits = {n: samples[n].limit_bytes // MIB for n in names}
        adopted = adopt(limits, budget_mb, floor_mb, configured=policy.ctx.configured)
        current = policy.initial_targets(adopted)
        note = "adopted " + " ".join(f"{n}:{limits[n]}MB" for n in names)
        if any(adopted[n] != limits[n] * MIB for n in names):
            why = ("every instance at the floor: the configured split" if adopted == dict(policy.ctx.configured)
                   else f"scaled to the {budget_mb} MB budget")
            note += f" ({why}: " + " ".join(f"{n}:{adopted[n] / MIB:g}MB" for n in names) + ")"
        notes.append(note)
    elif current is None:
        notes.append("waiting for every partition to answer before adopting targets")

    before = dict(current) if current is not None else None
    eligible: dict[str, bool] = {}
    explain: dict[str, dict[str, float | str]] = {}
    failed = ""
    if current is None:
        return TickDecision(targets=None, before=None, limits_mb=None, eligible=eligible, used=used, notes=notes)
    if policy.needs_rbc and snap is None:
        notes.append("rbc unavailable: targets kept")
    elif live:
        counts = snap.counts if snap is not None else {}
        inp = PlanInput(
            targets={n: current[n] for n in live},
            used=used,
            rbc={n: counts.get(n, 0) for n in live},
            stats=({n: snap.stats[n] for n in live if n in snap.stats} if snap is not None else {}),
            local=({n: snap.local[n] for n in live if n in snap.local} if snap is not None else {}),
            now=now,
            samples={n: samples[n] for n in live},
            p99_latency_us=(snap.p99_latency_us if snap is not None and snap.window_requests > 0 else None),
        )
        try:
            decision = policy.plan(inp)
            problem = check_decision(dict(inp.targets), decision.targets, floor_mb * MIB)
            odd = sorted({r for r in (decision.reasons or {}).values()} - set(MOVE_REASONS))
            if odd and not problem:
                problem = f"move reasons {odd} are not among {list(MOVE_REASONS)}"
        except Exception as e:  # noqa: BLE001 - a policy's failure must not end the loop
            decision, problem = None, f"{type(e).__name__}: {e}"
        if decision is None or problem:
            failed = problem
            notes.append(f"policy failed: {problem}; targets kept")
        else:
            current.update(decision.targets)
            eligible.update(decision.eligible or {})
            explain = decision.explain()
            if decision.note:
                notes.append(decision.note)
    return TickDecision(
        targets=current, before=before, limits_mb=round_limits(current, budget_mb), eligible=eligible,
        used=used, notes=notes, policy_error=failed, explain=explain,
    )
