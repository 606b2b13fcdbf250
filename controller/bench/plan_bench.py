"""Plan benchmark (docs/benchmarks.md, Controller): time of one planning step — the
RobinHood policy plus the whole-MB rounding — for 20 partitions.

    .venv/bin/python controller/bench/plan_bench.py [--partitions 20] [--iterations 20000]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from robinhood_controller.plan import MIB, round_limits
from robinhood_controller.policies import PlanInput, PolicyContext, build


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    names = [f"backend{i:02d}" for i in range(a.partitions)]
    budget_mb = 1638 * a.partitions  # 32 GB over 20 partitions, as in the paper
    targets = {n: budget_mb * MIB // a.partitions for n in names}
    targets[names[0]] += budget_mb * MIB - sum(targets.values())
    policy = build("robinhood", {}, PolicyContext(budget_bytes=budget_mb * MIB, configured=targets,
                                                  floor_bytes=48 * MIB))
    times = []
    for _ in range(a.iterations):
        used = {n: int(t * rnd.uniform(0.7, 1.0)) for n, t in targets.items()}
        rbc = {n: rnd.choice([0, 0, 0, rnd.randint(1, 500)]) for n in names}
        inp = PlanInput(targets=targets, used=used, rbc=rbc)
        t0 = time.perf_counter_ns()
        d = policy.plan(inp)
        round_limits(d.targets, budget_mb)
        times.append(time.perf_counter_ns() - t0)
        targets = d.targets
    times.sort()
    us = [t / 1000 for t in times]
    print(json.dumps({
        "partitions": a.partitions, "iterations": a.iterations,
        "us": {"mean": round(statistics.mean(us), 1), "p50": round(us[len(us) // 2], 1),
               "p99": round(us[int(len(us) * 0.99)], 1), "max": round(us[-1], 1)},
    }, indent=1))


if __name__ == "__main__":
    main()
