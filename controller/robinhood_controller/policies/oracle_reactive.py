"""The reactive oracle (beyond the paper): the oracle's schedule that learns each phase of
the scenario — its capacities, request rate, miss ratios and length — the instant it starts,
and nothing after it (``tracegen oracle``'s ``reactive`` schedule; docs/algorithms.md, "The
oracle"). It is the bound of a policy that reacts perfectly but cannot foresee: an online
policy's distance to the oracle splits into its distance to this one (reaction) and this
one's to the oracle (foresight).
"""
from __future__ import annotations

from .base import Params
from .oracle import Oracle
from .registry import register


@register
class OracleReactive(Oracle):
    name = "oracle-reactive"
    summary = ("the oracle's schedule without foresight: each phase of the scenario learnt when it starts "
               "(tracegen oracle's reactive schedule); the reference that splits an arm's gap to the oracle into "
               "reaction and foresight, not a bound (beyond the paper)")
    Params = Params
    color = "#777777"

    def variant(self) -> str:
        return "reactive"
