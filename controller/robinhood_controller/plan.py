"""From a policy's byte targets to memcached limits, and back: pure functions, no I/O.

Units. Allocations (targets) are integers in **bytes**, so every policy's targets sum to
the budget exactly. The memcached limits derived from them are whole MB (MiB, as
`cache_memlimit` counts).

Small partitions. 1% of a 64 MB partition is 0.64 MB, less than the 1 MB granularity of
memcached limits; a plan that rounded its own output to whole MB every tick would give
every partition its tax back and never move anything. So the controller keeps the
*targets* (bytes) as its state and lets the policy plan on them: sub-MB moves
accumulate from tick to tick. Only the applied limits are whole MB, computed afresh each
tick from the targets with a largest-remainder rule (`round_limits`) that sums exactly
to the budget, so each limit is its target rounded down or up.

Level-triggered. The targets are soft state: a controller that starts (or restarts)
derives them from memcached's actual limits with `adopt` and continues from there (the
sub-MB residue lost on restart is below 1 MB per partition); a memcached that restarts
with its command-line limit is simply driven back to its target by the next tick. Started
at the floor (`-m min_partition_mb`), instances get the configured allocation on the
controller's first tick, and one that restarts comes back below its target, so the
limits never sum to more than the budget.
"""
from __future__ import annotations

from collections.abc import Mapping

from robinhood_common.split import largest_remainder, split_weighted

MIB = 1 << 20
"""Bytes per MB of a memcached limit."""


def round_limits(targets: Mapping[str, int], budget_mb: int) -> dict[str, int]:
    """Whole-MB limits from byte targets by largest remainder.

    Each limit is its target rounded down or up, and the limits sum to budget_mb
    exactly. The targets must sum to budget_mb MiB.
    """
    total = sum(targets.values())
    if total != budget_mb * MIB:
        raise ValueError(f"targets sum to {total} bytes, not the budget {budget_mb} MB ({budget_mb * MIB} bytes)")
    quotas = {n: divmod(t, MIB) for n, t in targets.items()}
    return largest_remainder(quotas, budget_mb - sum(w for w, _ in quotas.values()))


def adopt(limits_mb: Mapping[str, int], budget_mb: int, floor_mb: int,
          configured: Mapping[str, int] | None = None) -> dict[str, int]:
    """Targets (bytes) for a controller that starts against running memcached instances.

    When the actual limits are each ≥ the floor and sum to the budget, they are the
    targets (a restarted controller continues where it left off). When every limit is
    at the floor or below and a configured allocation is given (bytes per partition,
    each ≥ the floor, summing to the budget: initial_mb / the even share), it is the
    targets: instances started at the floor, as the testbed starts them, so that one
    that restarts never pushes the limits over the budget (docs/reliability.md).
    Otherwise the limits are scaled to the budget in proportion to their size, no
    partition below the floor: the operator's split is kept as far as the budget allows.
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
    if (configured is not None and all(limits_mb[n] <= floor_mb for n in names)
            and sorted(configured) == names and sum(configured.values()) == budget
            and all(configured[n] >= floor for n in names)):
        return {n: configured[n] for n in names}
    # Water-fill: pin the partitions the proportional share would put under the floor,
    # share the rest in proportion to the remaining limits.
    pinned: set[str] = set()
    while True:
        free = [n for n in names if n not in pinned]
        rest = budget - floor * len(pinned)
        shares = split_weighted(rest, {n: max(limits_mb[n], 0) for n in free})
        low = [n for n in free if shares[n] < floor]
        if not low:
            break
        pinned.update(low)
    out = {n: floor for n in pinned}
    out.update(shares)
    return out
