"""The chaos run's pure parts: the fault schedule, the attribution of failed requests to
faults, and the reconcile times (docs/reliability.md)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robinhood_testbed.chaos import (Fault, FaultResult, attribute, component, reconcile_times, schedule)

TARGETS = ["backend-ratings-0", "backend-ratings-1", "controller-app0", "memcached-app0-a", "memcached-app0-b",
           "rbcserver"]


@given(seed=st.integers(0, 2**32), duration=st.floats(60, 3600))
@settings(max_examples=60, deadline=None)
def test_schedule_is_sequential_bounded_and_deterministic(seed: int, duration: float) -> None:
    faults = schedule(seed, duration, TARGETS)
    assert faults == schedule(seed, duration, TARGETS)
    for a, b in zip(faults, faults[1:]):
        assert b.start >= a.end + 30 - 1e-6, "faults overlap or leave no time to recover"
    for f in faults:
        assert f.start >= 30 and f.end + 30 <= duration
        assert f.kind in ("kill", "hang") and f.target in TARGETS and 3 <= f.length <= 15


def test_schedule_visits_every_class() -> None:
    faults = schedule(1, 1200, TARGETS)
    assert len(faults) >= 12
    first4 = {component(f.target) for f in faults[:4]}
    assert first4 == {"backend", "controller", "memcached", "rbcserver"}
    assert {f.kind for f in faults} == {"kill", "hang"}
    assert schedule(2, 1200, TARGETS) != faults


def test_schedule_needs_targets() -> None:
    with pytest.raises(ValueError, match="nothing to inject"):
        schedule(1, 600, [])


def test_attribute() -> None:
    faults = [Fault(10, "kill", "rbcserver", 5), Fault(40, "hang", "backend-r-0", 5)]
    reqs = [(5, True), (12, True), (12, False), (19, True), (21, True), (41, False), (46, True)]
    res, outside = attribute(faults, reqs, grace=5)
    assert [(r.requests, r.failed) for r in res] == [(3, 2), (2, 1)]
    assert outside == 2  # t=5 and t=21
    assert res[0].fault.plane == "control" and res[1].fault.plane == "data"


def test_reconcile_times() -> None:
    faults = [Fault(10, "kill", "rbcserver", 5), Fault(30, "kill", "controller-app0", 5),
              Fault(50, "kill", "memcached-app0-a", 5), Fault(70, "hang", "backend-r-1", 5),
              Fault(90, "kill", "memcached-app0-b", 5)]
    res = [FaultResult(f) for f in faults]
    ticks = [(t, not (10 <= t < 16.5)) for t in range(0, 100)] + [(16.5, True)]
    ticks = [(t, ok) for t, ok in ticks if not (30 <= t < 38)] + [(37.2, True)]
    limits = [(56.0, "memcached-app0-a", 64 << 20), (57.5, "memcached-app0-a", 80 << 20),
              (96.0, "memcached-app0-b", None)]
    planned = {"memcached-app0-a": [(50.0, 80 << 20), (57.0, 80 << 20)]}
    rotation = [(76.0, False), (77.25, True)]
    reconcile_times(res, ticks, limits, planned, rotation)
    assert [r.reconcile_s for r in res] == pytest.approx([1.5, 2.2, 2.5, 2.25, None])
