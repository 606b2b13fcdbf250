"""RobinHood that does not tax a partition whose backend has started to queue (beyond
the paper; docs/algorithms.md, "robinhood-queue").

At the paper's scale the paper's algorithm loses in a sawtooth: once a backend whose
shortage RobinHood has absorbed stops blocking the tail, the blocking counts go back to
the backend whose queries are slowest by nature, and the absorbed partition is taxed 1%
a tick until its backend is short again and blocks the tail for a minute. Two signals
tried before could not tell the two situations apart: the request P99 (healthy both
times) and a backend's P99 query latency against a fraction of the SLO (by the time a
backend's queries take 75 ms it is already blocking the tail, whose healthy P99 is
36–48 ms there); those variants were removed (docs/notebook/).

The backend's P99 query latency *against its own usual level* can: a backend whose
queries are slow by nature has a high but steady latency, while one whose miss load
approaches its capacity starts to queue, and its query latency rises above what it is
when idle before the requests that fan out to it are late. This policy is RobinHood's
step except that a partition whose backend's P99 query latency over the window is at
least ``ratio`` times its baseline pays no tax this tick, and the others pay its share
of RobinHood's pool (:func:`plan_untaxed` with ``keep_pool``; a shrinking pool was
measured to cost the slow ramps). The baseline is the running mean of
the backend's P99 query latency, with weight ``weight`` a tick (1% by default, the
paper's tax: the memory of the allocation itself), so a lasting change (the backend is slower for good)
becomes the new baseline, and a shortage that lasts is left to the RBC, as in the paper.
(A low envelope — follow a falling latency at once, a rising one by at most 1% a tick —
was tried first and failed at the testbed's scale: the floor of a P99 estimated from a
few hundred queries is its noise, and every backend crossed twice it.)

The split of the pool by RBC is RobinHood's, so the partition that blocks still gets the
space. The step is pure (:func:`queueing`, :func:`update_baseline`, :func:`plan_untaxed`);
the baselines are the policy's only state, and controllers that see the same statistics
keep the same baselines. ``robinhood`` itself stays the paper's algorithm.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field
from robinhood_common.split import split_weighted

from .base import AllocationPolicy, Decision, Params, PlanInput, PolicyContext
from .registry import register
from .robinhood import RobinHoodParams, RobinHoodSettings, check_inputs, is_eligible, robinhood_tax


@dataclass(frozen=True)
class UntaxedResult:
    """The outcome of one step, with the intermediate values for logs and tests."""

    targets: dict[str, int]
    """New allocation per partition, bytes; sums to the input's sum."""
    tax: dict[str, int]
    """Bytes taken from each partition (0 for the untaxed ones)."""
    untaxed: list[str]
    """Partitions not taxed this tick (sorted)."""
    eligible: dict[str, bool]
    """Whether each partition could receive space (RobinHood's unused-space rule)."""
    pool: int
    """Total tax pooled, bytes."""
    redistributed: bool
    """False when no eligible partition had RBC > 0 (every tax given back)."""


def plan_untaxed(
    allocations: Mapping[str, int],
    used: Mapping[str, int],
    rbc: Mapping[str, int],
    untaxed: set[str],
    params: RobinHoodParams,
    applied: Mapping[str, int] | None = None,
    keep_pool: bool = False,
) -> UntaxedResult:
    """RobinHood's step with some partitions paying no tax.

    1. t_i = 0 for i in untaxed, else RobinHood's tax (:func:`robinhood_tax`:
       floor(tax · a_i), capped so a_i − t_i ≥ floor). P = Σ t_i.
       With keep_pool, the untaxed partitions' share of RobinHood's pool is taken from
       the others instead: RobinHood's whole pool split over the taxed partitions in
       proportion to their RobinHood tax (:func:`split_weighted`), each still capped so
       a_i − t_i ≥ floor.
    2. RobinHood's eligibility (:func:`is_eligible`, on the applied allocation).
    3. P goes to eligible partitions in proportion to RBC (:func:`split_weighted`). When
       no eligible partition has RBC > 0, or P = 0, nothing changes.
    """
    check_inputs(allocations, used, rbc)
    spared = sorted(n for n in allocations if n in untaxed)
    tax = robinhood_tax(allocations, params)
    full = sum(tax.values())
    for n in spared:
        tax[n] = 0
    if keep_pool and full > 0:
        payers = {n: t for n, t in tax.items() if t > 0}
        if payers:
            for n, t in split_weighted(full, payers).items():
                tax[n] = min(t, max(allocations[n] - params.floor_bytes, 0))
    pool = sum(tax.values())
    applied = applied or {}
    eligible = {n: is_eligible(applied.get(n, a), used.get(n, 0), params.unused_gap)
                for n, a in allocations.items()}
    weights = {n: rbc.get(n, 0) for n in allocations if eligible[n] and rbc.get(n, 0) > 0}
    if pool == 0 or not weights:
        return UntaxedResult(dict(allocations), tax, spared, eligible, pool, False)
    given = split_weighted(pool, weights)
    targets = {n: a - tax[n] + given.get(n, 0) for n, a in allocations.items()}
    return UntaxedResult(targets, tax, spared, eligible, pool, True)


def update_baseline(baseline: Mapping[str, float], p99_us: Mapping[str, int], weight: float) -> dict[str, float]:
    """The baselines after one tick: (1 − weight) · baseline + weight · p99 per partition
    with a known latency (p99 > 0); the first known latency sets it; a partition without
    one keeps its baseline."""
    out = dict(baseline)
    for n, v in p99_us.items():
        if v <= 0:
            continue
        b = baseline.get(n)
        out[n] = float(v) if b is None else (1.0 - weight) * b + weight * float(v)
    return out


def queueing(baseline: Mapping[str, float], p99_us: Mapping[str, int], ratio: float) -> set[str]:
    """The partitions whose backend's P99 query latency this tick is at least ratio × the
    baseline (as it stood before this tick); none without a baseline or a latency."""
    return {n for n, v in p99_us.items() if v > 0 and baseline.get(n, 0.0) > 0 and v >= ratio * baseline[n]}


class RobinHoodQueueSettings(RobinHoodSettings):
    """RobinHood's parameters, and when a backend counts as queueing."""

    ratio: float = Field(2.0, gt=1, le=100, description=(
        "a partition whose backend's P99 query latency is at least ratio × its baseline pays no tax"))
    weight: float = Field(0.01, gt=0, le=1, description=(
        "the weight of this tick's P99 query latency in the baseline, a running mean"))


@register
class RobinHoodQueue(AllocationPolicy):
    """RobinHood, without taxing the partitions of backends that have started to queue."""

    name = "robinhood-queue"
    summary = ("candidate (beyond the paper): RobinHood's step, but a partition whose backend's P99 query "
               "latency is ≥ ratio × its own baseline pays no tax, the others paying its share")
    Params = RobinHoodQueueSettings
    needs_rbc = True
    color = "#17becf"

    def __init__(self, params: Params, ctx: PolicyContext) -> None:
        super().__init__(params, ctx)
        self.baseline: dict[str, float] = {}

    def plan(self, inp: PlanInput) -> Decision:
        p: RobinHoodQueueSettings = self.params  # type: ignore[assignment]
        p99 = {n: st.p99_query_latency_us for n, st in inp.stats.items() if n in inp.targets}
        untaxed = queueing(self.baseline, p99, p.ratio)
        self.baseline = update_baseline(self.baseline, p99, p.weight)
        r = plan_untaxed(inp.targets, inp.used, inp.rbc, untaxed, p.step(self.ctx.floor_bytes),
                         applied=inp.applied(), keep_pool=True)
        note = f"robinhood-queue: untaxed {','.join(r.untaxed)}" if r.untaxed else ""
        return Decision(targets=r.targets, moved=r.redistributed, eligible=r.eligible, note=note)
