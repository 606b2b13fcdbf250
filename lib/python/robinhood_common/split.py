"""The largest-remainder rule and the even split: how a whole number of units (bytes,
MB) is shared out so the parts sum exactly to the total. Ties go to the name that sorts
first, so the result is deterministic."""
from __future__ import annotations

from collections.abc import Iterable, Mapping


def largest_remainder(quotas: Mapping[str, tuple[int, int]], extra: int) -> dict[str, int]:
    """Add ``extra`` single units to the names with the largest remainders.

    ``quotas`` maps name → (whole part, remainder key); the remainder keys only need to
    be comparable. Ties go to the name that sorts first.
    """
    order = sorted(quotas, key=lambda n: (-quotas[n][1], n))
    if not 0 <= extra <= len(order):
        raise ValueError(f"extra {extra} is outside [0, {len(order)}]")
    out = {n: quotas[n][0] for n in quotas}
    for n in order[:extra]:
        out[n] += 1
    return out


def split_even(total: int, names: Iterable[str]) -> dict[str, int]:
    """``total`` units split as evenly as possible over ``names``: every part is
    ⌊total/n⌋ or one more, the names sorting first get the extra units."""
    ordered = sorted(names)
    if not ordered:
        raise ValueError("split_even: no names")
    if total < 0:
        raise ValueError(f"split_even: total {total} is negative")
    base, extra = divmod(total, len(ordered))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(ordered)}


def split_weighted(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total`` units in proportion to integer ``weights`` (exact: ⌊total·w/W⌋ each,
    the rest by largest remainder). All-zero weights split evenly."""
    if not weights:
        raise ValueError("split_weighted: no names")
    wsum = sum(weights.values())
    if any(w < 0 for w in weights.values()):
        raise ValueError("split_weighted: negative weight")
    if wsum == 0:
        return split_even(total, weights)
    quotas = {n: divmod(total * w, wsum) for n, w in weights.items()}
    return largest_remainder(quotas, total - sum(q for q, _ in quotas.values()))


def fill_rest(fixed: Mapping[str, int], names: Iterable[str], total: int) -> dict[str, int]:
    """The configured allocation: ``fixed`` units where given, the names without one
    share what is left of ``total`` evenly (:func:`split_even`). Nothing is checked: the
    result may not sum to ``total`` when every name is fixed, or exceed it."""
    ordered = list(names)
    out = {n: fixed[n] for n in ordered if n in fixed}
    free = [n for n in ordered if n not in fixed]
    if free:
        out.update(split_even(max(total - sum(out.values()), 0), free))
    return {n: out[n] for n in ordered}
