"""The reactive oracle (beyond the paper): the oracle's schedule that learns each phase of
the scenario — its capacities, request rate, miss ratios and length — the instant it starts,
and nothing after it (``tracegen oracle``'s ``reactive`` schedule; docs/algorithms.md, "The
oracle"). It is what the model has a policy that reacts perfectly but cannot foresee
apply: a reference, not a bound (the static split beats it where reacting costs). An
online policy's distance to the oracle splits into its distance to this one (reaction)
and this one's to the oracle (foresight). It is the one name of the reactive schedule:
the ``oracle`` policy applies the schedule with foresight only.
"""
from __future__ import annotations

from .oracle import Oracle
from .registry import register


@register
class OracleReactive(Oracle):
    name = "oracle-reactive"
    summary = ("the oracle's schedule without foresight: each phase of the scenario learnt when it starts "
               "(tracegen oracle's reactive schedule); the reference that splits an arm's gap to the oracle into "
               "reaction and foresight, not a bound (beyond the paper)")
    color = "#777777"

    def variant(self) -> str:
        return "reactive"
