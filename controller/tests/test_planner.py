"""The planner policy (docs/algorithms.md, "planner"): its estimates from the statistics
window, its capacity rules, the trend, the moves (relieve, toward), and whole ticks against
the real planner process (bin/planner: lib/model), including what it does without it."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from robinhood.v1 import planner_pb2 as pb
from robinhood_common.topology import SLO, Limits

from robinhood_controller.planner_process import PlannerProcess, PlannerUnavailable, find_binary
from robinhood_controller.plan import MIB
from robinhood_controller.policies import PlanInput, PolicyContext, QueryStats, build
from robinhood_controller.policies.planner import (
    LATENCY_RHO,
    MEMORY_S,
    Candidate,
    Capacity,
    Estimate,
    Learned,
    PlannerParams,
    backlogged,
    capacity,
    choose,
    observe,
    relieve,
    toward,
    trend,
)

NEVER = 469  # lib/loghist's last bucket: the queries that never hit


def bucket(mb: float) -> int:
    """The lib/loghist bucket of a distance of mb MiB (in KiB)."""
    return int(math.log(mb * 1024) / math.log(1.04))


def qs(hits: int = 700, misses: int = 300, uncacheable: int = 0, p50: int = 3000, p90: int = 4000,
       hit_at_mb: float = 20.0) -> QueryStats:
    """A window's statistics: every hit at hit_at_mb MiB, every miss never."""
    return QueryStats(hits=hits, misses=misses, queries=hits + misses + uncacheable, shadow_bytes=4 * MIB,
                      p50_backend_latency_us=p50, p90_backend_latency_us=p90,
                      distance_bucket=(bucket(hit_at_mb), NEVER), distance_count=(hits, misses))


def est(sent: float = 100.0, answered: float = 100.0, spread: float = 1000.0) -> Estimate:
    return Estimate(cacheable=sent, uncacheable=0.0, sent=sent, answered=answered, spread_us=spread,
                    distance_bucket=(), distance_count=())


def test_observe_turns_the_window_into_rates() -> None:
    got = observe({"a": qs(hits=700, misses=300, uncacheable=50), "b": QueryStats(hits=1, misses=1, queries=2)}, 5.0)
    assert set(got) == {"a"}, "a backend without a distance histogram has no estimate"
    a = got["a"]
    assert a.cacheable == 200 and a.uncacheable == 10 and a.sent == 70 and a.answered == 70
    assert a.spread_us == 1000 and a.distance_count == (700, 300)
    assert observe({"a": qs()}, 0.0) == {}, "no window, no rates"


def test_backlogged_beyond_what_is_in_flight() -> None:
    assert not backlogged(est(sent=102, answered=100))
    assert backlogged(est(sent=110, answered=100))
    assert not backlogged(est(sent=10, answered=0))


def test_capacity_rules() -> None:
    # Nothing queues: the declared capacity, vouched for up to sent / LATENCY_RHO.
    c, learned = capacity(est(sent=100), 1000.0, 1000.0, None, 0.0)
    assert c == Capacity(1000.0, 100 / LATENCY_RHO, "declared") and learned is None
    # Backlogged: what it answers, learned.
    c, learned = capacity(est(sent=150, answered=100), 1000.0, 1000.0, None, 10.0)
    assert c == Capacity(100.0, 100.0, "backlog") and learned == Learned(100.0, 10.0)
    # A spread four times the baseline, and the requests show it: ρ = 0.75, capacity = sent / ρ.
    c, _ = capacity(est(sent=90, spread=4000.0), 1000.0, 1000.0, None, 0.0)
    assert c.source == "latency" and c.estimate == pytest.approx(120.0) and c.safe == c.estimate
    # ... the same spread where no request waits for it says nothing of the capacity, but
    # the backend is vouched for only up to sent / ρ.
    c, _ = capacity(est(sent=90, spread=4000.0), 1000.0, 1000.0, None, 0.0, symptomatic=False)
    assert c.source == "declared" and c.estimate == 1000.0 and c.safe == pytest.approx(120.0)
    # A learned capacity holds for MEMORY_S without evidence, raised to what is answered.
    c, learned = capacity(est(sent=110, answered=110), 1000.0, 1000.0, Learned(100.0, 10.0), 10.0 + MEMORY_S)
    assert c == Capacity(110.0, 110.0, "remembered") and learned == Learned(110.0, 10.0)
    c, learned = capacity(est(sent=90), 1000.0, 1000.0, Learned(100.0, 10.0), 11.0 + MEMORY_S)
    assert c.source == "declared" and learned is None
    # Nothing bounds it.
    assert capacity(est(sent=90), math.inf, 1000.0, None, 0.0)[0].source == "unknown"


def test_trend_follows_a_slope_not_a_step() -> None:
    assert trend(tuple((float(t), 100.0 - 5 * t) for t in range(5))) == pytest.approx(-5.0)
    assert trend(((0.0, 10.0), (1.0, 10.0), (2.0, 10.0), (3.0, 10.0), (4.0, 90.0))) == 0.0, "one step"
    assert trend(((0.0, 5.0), (1.0, 6.0))) == 0.0, "two points are not a trend"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=2, max_size=5), st.integers(0, 10**9), st.randoms())
def test_toward_keeps_the_sum_and_moves_at_most(vals: list[int], most: int, rnd) -> None:  # type: ignore[no-untyped-def]
    names = [f"p{i}" for i in range(len(vals))]
    targets = dict(zip(names, vals))
    shuffled = vals[:]
    rnd.shuffle(shuffled)
    goal = dict(zip(names, shuffled))
    out = toward(targets, goal, most)
    assert sum(out.values()) == sum(vals)
    moved = sum(max(out[n] - targets[n], 0) for n in names)
    assert moved <= most + len(names)
    way = sum(max(goal[n] - targets[n], 0) for n in names)
    if way <= most:
        assert out == goal
    for n in names:  # every partition moves in its goal's direction, never past it
        lo, hi = sorted((targets[n], goal[n]))
        assert lo <= out[n] <= hi + len(names)


def test_relieve_takes_only_what_is_needed_from_the_most_surplus() -> None:
    t = {"a": 40 * MIB, "b": 60 * MIB, "c": 60 * MIB}
    need = {"a": 70 * MIB, "b": 20 * MIB, "c": 50 * MIB}
    out = relieve(t, need, ["a"], 16 * MIB)
    assert out == {"a": 70 * MIB, "b": 30 * MIB, "c": 60 * MIB}
    # More than the surplus: all of it goes, the donors at their needs.
    out = relieve(t, {"a": 150 * MIB, "b": 20 * MIB, "c": 50 * MIB}, ["a"], 16 * MIB)
    assert out == {"a": 90 * MIB, "b": 20 * MIB, "c": 50 * MIB}
    # Nobody lacks anything: nothing moves; the floor holds.
    assert relieve(t, {"a": 10, "b": 10, "c": 10}, ["a"], 16 * MIB) == t
    out = relieve(t, {"a": 160 * MIB, "b": 0, "c": 0}, ["a"], 16 * MIB)
    assert out == {"a": 128 * MIB, "b": 16 * MIB, "c": 16 * MIB}


def test_choose_keeps_unless_a_move_projects_better() -> None:
    p = PlannerParams()
    keep = Candidate("keep", {}, overload=5.0, pressure=3.0, final=0.9)
    assert choose([keep, Candidate("relieve", {}, overload=4.7, pressure=0.0, final=0.5)], p).name == "relieve"
    # Within the overload margin, less pressure beyond the target decides...
    assert choose([keep, Candidate("relieve", {}, overload=5.2, pressure=0.0, final=0.9)], p).name == "relieve"
    # ... within its margin too, the final worst utilization.
    same = Candidate("step", {}, overload=5.0, pressure=3.0 + p.hysteresis * p.horizon / 2, final=0.8)
    assert choose([keep, same], p).name == "step"
    assert choose([keep, Candidate("step", {}, overload=5.0, pressure=3.0, final=0.88)], p).name == "keep"
    assert choose([keep, Candidate("relieve", {}, overload=9.0, pressure=0.0, final=0.1)], p).name == "keep"


needs_planner = pytest.mark.skipif(find_binary() is None, reason="bin/planner is not built (make build)")


def context(**kw: object) -> PolicyContext:
    base = dict(budget_bytes=160 * MIB, configured={"a": 80 * MIB, "b": 80 * MIB}, floor_bytes=16 * MIB,
                slo=SLO(latency=0.15, step=2.0, window=10.0, warmup=30.0), window_s=5.0, app_servers=1,
                declared={"a": Limits(workers=8, rate=0, extra_latency_ms=4, hiccup_prob=0, hiccup_ms=0, cost_ms=0,
                                      stall_prob=0, stall_ms=0, queue_limit=0, purge_delay_ms=0, purge_cost_ms=0),
                          "b": Limits(workers=8, rate=0, extra_latency_ms=4, hiccup_prob=0, hiccup_ms=0, cost_ms=0,
                                      stall_prob=0, stall_ms=0, queue_limit=0, purge_delay_ms=0, purge_cost_ms=0)})
    base.update(kw)
    return PolicyContext(**base)  # type: ignore[arg-type]


@needs_planner
def test_a_backlogged_backend_is_given_its_need_at_once() -> None:
    pol = build("planner", {}, context())
    t = {"a": 80 * MIB, "b": 80 * MIB}
    # b backlogged: sent 600/s (3,000 in 5 s), answered 400/s; its hits are within 120 MiB.
    stats = {"a": qs(hits=4000, misses=1000, hit_at_mb=20), "b": qs(hits=2000, misses=3000, hit_at_mb=120)}
    stats["b"] = QueryStats(**{**stats["b"].__dict__, "queries": 4000})
    d = pol.plan(PlanInput(targets=t, used=t, rbc={"b": 10}, stats=stats, now=100.0))
    assert "saturated (b)" in d.note, d.note
    assert d.targets["b"] > t["b"] and sum(d.targets.values()) == 160 * MIB
    assert d.reasons == {"a": "saturated", "b": "saturated"}
    assert d.estimates is not None and d.estimates["b"]["capacity_source"] == "backlog"
    assert d.estimates["b"]["capacity"] == pytest.approx(400.0)
    assert d.predicted is not None and set(d.predicted) == {"a", "b"}


@needs_planner
def test_without_estimates_or_the_model_it_is_robinhood(monkeypatch: pytest.MonkeyPatch) -> None:
    t = {"a": 80 * MIB, "b": 80 * MIB}
    pol = build("planner", {}, context())
    d = pol.plan(PlanInput(targets=t, used=t, rbc={"b": 10}, stats={"a": QueryStats(hits=1, queries=1)}, now=1.0))
    assert d.note.startswith("planner: robinhood (no statistics or distance histogram for")
    assert d.targets["b"] > t["b"], "RobinHood's step: b blocks the tail"
    monkeypatch.setenv("ROBINHOOD_PLANNER", "/nonexistent/planner")
    pol = build("planner", {}, context())
    d = pol.plan(PlanInput(targets=t, used=t, rbc={"b": 10}, stats={"a": qs(), "b": qs()}, now=1.0))
    assert "cannot start /nonexistent/planner" in d.note and d.targets["b"] > t["b"]
    monkeypatch.delenv("ROBINHOOD_PLANNER")
    undeclared = context(declared={})
    pol = build("planner", {}, undeclared)
    d = pol.plan(PlanInput(targets=t, used=t, rbc={"b": 10}, stats={"a": qs(), "b": qs()}, now=1.0))
    assert "no capacity known for a, b" in d.note


@needs_planner
def test_the_planner_process_fails_cleanly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    p = PlannerProcess(binary=str(hang), timeout=0.5)
    with pytest.raises(PlannerUnavailable, match="no answer within 0.5s"):
        p.capacity([pb.PlannerLimits(workers=1)])
    crash = tmp_path / "crash"
    crash.write_text("#!/bin/sh\nread line\nexit 3\n")
    crash.chmod(0o755)
    with pytest.raises(PlannerUnavailable, match=r"exited \(status 3\) without an answer"):
        PlannerProcess(binary=str(crash)).capacity([pb.PlannerLimits(workers=1)])
    real = PlannerProcess()
    with pytest.raises(PlannerUnavailable, match="backends: none"):
        real.plan(pb.PlanRequest(budget_mb=1))
    assert real.capacity([pb.PlannerLimits(workers=8, rate=150)]) == [150.0], "an error answer keeps the child"
    real.close()
