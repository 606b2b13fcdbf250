"""The RobinHood allocation plan (SPEC §5, paper §3.1–3.2, §4.2): pure functions, no I/O.

Units. Allocations are integers in **bytes** and the arithmetic is exact integer
arithmetic, so the targets always sum to the budget with no floating-point drift. The
memcached limits derived from them are whole MB (MiB, as `cache_memlimit` counts).

Small partitions. 1% of a 64 MB partition is 0.64 MB, less than the 1 MB granularity of
memcached limits; a plan that rounded its own output to whole MB every tick would give
every partition its tax back and never move anything. So the controller keeps the
*targets* (bytes) as its state and plans on them: sub-MB moves accumulate from tick to
tick. Only the applied limits are whole MB, computed afresh each tick from the targets
with a largest-remainder rule (`round_limits`) that sums exactly to the budget, so each
limit is its target rounded down or up and space flows at the paper's rate on average.

Level-triggered. The targets are soft state: a controller that starts (or restarts)
derives them from memcached's actual limits with `adopt` and continues from there (the
sub-MB residue lost on restart is below 1 MB per partition); a memcached that restarts
with its command-line limit is simply driven back to its target by the next tick.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MIB = 1 << 20
"""Bytes per MB of a memcached limit."""


@dataclass(frozen=True)
class RobinHoodParams:
    """Parameters of one plan step."""

    tax: float = 0.01
    """Fraction of each allocation pooled every tick (paper: 1%)."""
    unused_gap: float = 0.30
    """Ineligible when allocation − used > unused_gap · used (paper: 30%)."""
    floor_bytes: int = 48 * MIB
    """No partition is taxed below this."""


@dataclass(frozen=True)
class PlanResult:
    """The outcome of one plan step, with the intermediate values for logs and tests."""

    targets: dict[str, int]
    """New allocation per partition, bytes; sums to the input's sum."""
    tax: dict[str, int]
    """Bytes taken from each partition."""
    eligible: dict[str, bool]
    """Whether each partition could receive loot (unused-space rule)."""
    pool: int
    """Total tax pooled, bytes."""
    redistributed: bool
    """False when no eligible partition had RBC > 0 (every tax given back)."""


def _largest_remainder(quotas: Mapping[str, tuple[int, int]], extra: int) -> dict[str, int]:
    """Add `extra` single units to the names with the largest remainders.

    quotas maps name → (whole part, remainder key). Ties go to the name that sorts
    first, so the result is deterministic.
    """
    order = sorted(quotas, key=lambda n: (-quotas[n][1], n))
    out = {n: quotas[n][0] for n in quotas}
    for n in order[:extra]:
        out[n] += 1
    return out


def is_eligible(alloc: int, used: int, unused_gap: float) -> bool:
    """SPEC §5 step 3: False when the unused allocation exceeds unused_gap of the used
    space (a − u > gap · u), i.e. the partition cannot make use of more space yet."""
    return not (alloc - used > unused_gap * used)


def plan_robinhood(
    allocations: Mapping[str, int],
    used: Mapping[str, int],
    rbc: Mapping[str, int],
    params: RobinHoodParams,
    applied: Mapping[str, int] | None = None,
) -> PlanResult:
    """One RobinHood step (SPEC §5): tax, exclusion, redistribution by RBC.

    allocations: current target per partition (bytes, each ≥ the floor).
    used: used bytes per partition (missing = 0).
    rbc: request blocking count per partition (missing = 0).
    applied: the allocation memcached actually has (its limit, bytes) where it differs
      from the target — a grow still waiting for memory that other partitions have not
      freed yet. The unused-space rule compares used space with what was really
      allocated: a partition is not "unable to use more space" because it was never
      given its target. Missing partitions (or None) use their target.

    1. t_i = floor(tax · a_i), capped so a_i − t_i ≥ floor; P = Σ t_i.
    2. eligible_i unless a_i − u_i > unused_gap · u_i (a_i: the applied allocation).
    3. P goes to eligible partitions in proportion to RBC: floor(P · r_i / R) each, the
       leftover bytes by largest remainder (ties to the name sorting first). When no
       eligible partition has RBC > 0, nothing changes.
    The sum of the targets is preserved exactly.
    """
    if not allocations:
        raise ValueError("allocations: no partitions")
    for name, a in allocations.items():
        if a < 0:
            raise ValueError(f"allocations.{name}: {a} is negative")
        if used.get(name, 0) < 0:
            raise ValueError(f"used.{name}: {used[name]} is negative")
        if rbc.get(name, 0) < 0:
            raise ValueError(f"rbc.{name}: {rbc[name]} is negative")
    tax: dict[str, int] = {}
    for name, a in allocations.items():
        t = int(a * params.tax)
        tax[name] = max(0, min(t, a - params.floor_bytes))
    pool = sum(tax.values())
    applied = applied or {}
    eligible = {n: is_eligible(applied.get(n, a), used.get(n, 0), params.unused_gap)
                for n, a in allocations.items()}
    weights = {n: rbc.get(n, 0) for n in allocations if eligible[n] and rbc.get(n, 0) > 0}
    total_w = sum(weights.values())
    if pool == 0 or total_w == 0:
        return PlanResult(dict(allocations), tax, eligible, pool, False)
    quotas = {n: divmod(pool * w, total_w) for n, w in weights.items()}
    given = _largest_remainder(quotas, pool - sum(whole for whole, _ in quotas.values()))
    targets = {n: a - tax[n] + given.get(n, 0) for n, a in allocations.items()}
    return PlanResult(targets, tax, eligible, pool, True)


def round_limits(targets: Mapping[str, int], budget_mb: int) -> dict[str, int]:
    """Whole-MB limits from byte targets by largest remainder (SPEC §5 step 5).

    Each limit is its target rounded down or up, and the limits sum to budget_mb
    exactly. The targets must sum to budget_mb MiB.
    """
    total = sum(targets.values())
    if total != budget_mb * MIB:
        raise ValueError(f"targets sum to {total} bytes, not the budget {budget_mb} MB ({budget_mb * MIB} bytes)")
    quotas = {n: divmod(t, MIB) for n, t in targets.items()}
    return _largest_remainder(quotas, budget_mb - sum(w for w, _ in quotas.values()))


def split_even(budget_bytes: int, names: list[str]) -> dict[str, int]:
    """budget_bytes split as evenly as possible (largest remainder, ties by name)."""
    base, extra = divmod(budget_bytes, len(names))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(sorted(names))}


def adopt(limits_mb: Mapping[str, int], budget_mb: int, floor_mb: int) -> dict[str, int]:
    """Targets (bytes) for a controller that starts against running memcached instances.

    When the actual limits are each ≥ the floor and sum to the budget, they are the
    targets (a restarted controller continues where it left off). Otherwise the
    limits are scaled to the budget in proportion to their size, no partition below
    the floor: the operator's split is kept as far as the budget allows.
    """
    names = sorted(limits_mb)
    if not names:
        raise ValueError("limits: no partitions")
    if floor_mb * len(names) > budget_mb:
        raise ValueError(f"budget {budget_mb} MB is below {len(names)} × floor {floor_mb} MB")
    budget = budget_mb * MIB
    floor = floor_mb * MIB
    if sum(limits_mb.values()) == budget_mb and all(limits_mb[n] >= floor_mb for n in names):
        return {n: limits_mb[n] * MIB for n in names}
    # Water-fill: pin the partitions the proportional share would put under the floor,
    # share the rest in proportion to the remaining limits.
    pinned: set[str] = set()
    while True:
        free = [n for n in names if n not in pinned]
        rest = budget - floor * len(pinned)
        weights = {n: max(limits_mb[n], 0) for n in free}
        wsum = sum(weights.values())
        if wsum == 0:
            shares = split_even(rest, free)
        else:
            quotas = {n: divmod(rest * w, wsum) for n, w in weights.items()}
            shares = _largest_remainder(quotas, rest - sum(q for q, _ in quotas.values()))
        low = [n for n in free if shares[n] < floor]
        if not low:
            break
        pinned.update(low)
    out = {n: floor for n in pinned}
    out.update(shares)
    return out
