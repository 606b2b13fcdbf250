"""What several policies share: tax every partition and give the pool out by weight,
in exact integer bytes (the targets keep their sum)."""
from __future__ import annotations

from collections.abc import Mapping

from robinhood_common.split import split_weighted

#: Float weights are scaled to integers with this resolution before the split.
WEIGHT_SCALE = 1_000_000


def tax_and_share(targets: Mapping[str, int], weights: Mapping[str, float], tax: float,
                  floor: int) -> tuple[dict[str, int], bool]:
    """Take ⌊tax·a_i⌋ from every partition (never below floor) and give the pool to the
    partitions with positive weight, in proportion to it (largest remainder). Without
    a positive weight, or a pool, nothing changes. Returns the new targets and whether
    anything moved."""
    positive = {n: w for n, w in weights.items() if n in targets and w > 0}
    taxes = {n: max(0, min(int(a * tax), a - floor)) for n, a in targets.items()}
    pool = sum(taxes.values())
    if pool == 0 or not positive:
        return dict(targets), False
    top = max(positive.values())
    ints = {n: max(1, round(w / top * WEIGHT_SCALE)) for n, w in positive.items()}
    given = split_weighted(pool, ints)
    out = {n: a - taxes[n] + given.get(n, 0) for n, a in targets.items()}
    return out, out != dict(targets)


def excess_over_mean(values: Mapping[str, float]) -> dict[str, float]:
    """Each value's excess over the mean of all (0 at or below it)."""
    if not values:
        return {}
    mean = sum(values.values()) / len(values)
    return {n: max(0.0, v - mean) for n, v in values.items()}
