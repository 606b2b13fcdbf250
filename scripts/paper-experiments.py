#!/usr/bin/env python3
"""Write the paper-scale experiment files, examples/paper/*.yaml (docs/results.md,
"The paper's experiments at the paper's scale"): one topology and workload, the scenarios
of the paper's §5.2–5.4, and capacities derived from one measured miss load per backend
(MISS_LOAD, HEADROOM, DEPTH below).

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

#: Miss load per backend, queries/s over the whole system (16 app servers): the larger
#: of the even split's (the static policy's) and the one shared cache's, each measured
#: in the simulator with unlimited backends over 40 minutes of examples/paper/steady.yaml
#: (2026-11-23; docs/results.md). Sized on both, every backend can carry either
#: configuration twice over.
EVEN_SPLIT_LOAD = {'b1': 51099, 'b2': 72810, 'b3': 71163, 'b4': 66673, 'b5': 27354, 'b6': 18824, 'b7': 9043, 'b8': 1648, 'b9': 3293, 'b10': 923, 'b11': 628, 'b12': 479, 'b13': 342, 'b14': 234, 'b15': 140, 'b16': 99, 'b17': 98, 'b18': 53, 'b19': 57, 'b20': 61}
SHARED_LOAD = {'b1': 28796, 'b2': 53713, 'b3': 51637, 'b4': 48354, 'b5': 22075, 'b6': 15103, 'b7': 10086, 'b8': 3474, 'b9': 3806, 'b10': 1235, 'b11': 871, 'b12': 673, 'b13': 497, 'b14': 368, 'b15': 231, 'b16': 150, 'b17': 155, 'b18': 77, 'b19': 79, 'b20': 80}
MISS_LOAD = {b: max(EVEN_SPLIT_LOAD[b], SHARED_LOAD[b]) for b in EVEN_SPLIT_LOAD}

HEADROOM = 2.0   # normal capacity: twice the miss load
DEPTH = 0.6      # a spike or a ramp takes capacity down to 0.6 × that load

HOUR = 3600


def base(name: str, description: str) -> dict:
    backends = []
    for i, b in enumerate(BACKENDS):
        lim = {"workers": 4096, "rate": cap(b, HEADROOM), "extra_latency_ms": EXTRA_MS[i], "hiccup_prob": 0.01,
               "hiccup_ms": 20}
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
            # Paper §4.3: hit ratios from 10% to 98%; backends 1, 5, 6, 8 at about
            # 84%, 56%, 53%, 88% under the even split.
            "keys": "500000,b1=100000,b5=120000,b6=60000,b7=200000,b8=20000",
            "zipf": "0.9,b1=1.1,b5=0.9,b6=0.8,b8=1.0"}}},
        "sim": {"generate": True, "sample": 0.01, "request_sample": 0.005, "apps": 1},
        "compare": {"cache_modes": ["partitioned", "shared"], "policies": ["robinhood", "static"]},
        "request_timeout": "2s",
        "backend_timeout": "1s",
    }


def cap(b: str, f: float) -> int:
    """f times backend b's miss load, queries/s."""
    return max(1, round(f * MISS_LOAD[b]))


def ramp(b: str, start_s: int, minutes: float, to: float, start: float = HEADROOM) -> dict:
    """Backend b's capacity from `start` (normal) to `to` × its miss load over `minutes`."""
    return {"kind": "ramp", "backend": b, "field": "rate", "from": cap(b, start), "to": cap(b, to),
            "start": f"{start_s}s", "end": f"{start_s + round(minutes * 60)}s", "step": "10s"}


def spike(b: str, start_s: int) -> list[dict]:
    """A capacity spike (paper Fig. 7): down over 10 minutes, held 20, back over 5."""
    return [ramp(b, start_s, 10, DEPTH), ramp(b, start_s + 1800, 5, HEADROOM, start=DEPTH)]


def walk(b: str) -> dict:
    """Paper §5.4: every 20 s the capacity moves one step up or down with
    probability 1/2, between DEPTH and HEADROOM times the miss load."""
    lo, hi = cap(b, DEPTH), cap(b, HEADROOM)
    return {"kind": "random_walk", "backend": b, "field": "rate", "period": "20s", "step": round((hi - lo) / 8),
            "min": lo, "max": hi, "initial": hi, "start": f"{HOUR}s"}


SPIKES = [*spike("b6", HOUR + 600), *spike("b1", HOUR + 3000), *spike("b5", HOUR + 5400), *spike("b8", HOUR + 7800)]

EXPERIMENTS = {
    "steady": ("No capacity change after the warm-up: the workload and capacities the others "
               "start from.", {"events": []}),
    "spikes": ("Paper §5.2, Fig. 7: capacity spikes on backends 6, 1, 5 and 8, one after another, "
               "each down to 0.6 × its miss load (0.3 × its normal capacity) for 20 minutes.", {"events": SPIKES}),
    "quick-ramp": ("Paper §5.3, Fig. 10b: backend 7's capacity (latency uncorrelated with query rate: "
                   "a backend of 2% of the queries) down to 0.5 × its miss load over 50 minutes.",
                   {"events": [ramp("b7", HOUR, 50, 0.5)]}),
    "slow-ramp": ("Paper §5.3, Fig. 10a: as quick-ramp at a third of the speed (150 minutes).",
                  {"events": [ramp("b7", HOUR, 150, 0.5)]}),
    "quick-ramp-correlated": ("Paper §5.3, Fig. 11b: the most queried backend's (1, 38% of the queries: "
                              "latency correlated with query rate) capacity down to 0.5 × its miss load "
                              "over 50 minutes.", {"events": [ramp("b1", HOUR, 50, 0.5)]}),
    "slow-ramp-correlated": ("Paper §5.3, Fig. 11a: as quick-ramp-correlated over 150 minutes.",
                             {"events": [ramp("b1", HOUR, 150, 0.5)]}),
    "random-walk": ("Paper §5.4, Fig. 12: the capacities of backends 1, 5, 6 and 8 each move one step "
                    "up or down every 20 s with probability 1/2, between 0.6 and 2 × their miss loads.",
                    {"seed": 12, "events": [walk(b) for b in ("b1", "b5", "b6", "b8")]}),
}

#: The exact engine's window (docs/simulator.md, "The miniature's error"): the paper's
#: topology and workload, every app server, key, request and backend queue, over a
#: window short enough to simulate exactly on one core in about an hour and a half:
#: a five-minute warm-up, then the first spike of `spikes` (backend 6 down to DEPTH
#: times its miss load over 10 minutes), held for the last 7 minutes.
WINDOW = {"duration": "22m", "warmup": "5m", "events": [ramp("b6", 300, 10, DEPTH)],
          "description": ("A window of paper-spikes for the exact engine: a 5-minute warm-up, then backend "
                          "6's capacity down to 0.6 × its miss load over 10 minutes, held for 7.")}

HEADER = """# Generated by scripts/paper-experiments.py: edit that, not this file.
# The paper's experiments at the paper's scale (docs/results.md): 16 app servers of
# 1,000 requests/s, 20 backends, 50 queries per request, four simulated hours with
# a one-hour warm-up, delta = 5 s. The simulator runs it as a miniature (sim:
# 1% of the keys, 0.5% of the requests, one app server standing for all 16; see
# docs/simulator.md). Capacities: 2 x each backend's miss load (the larger of the
# even split's and the shared cache's).
"""


def documents() -> dict[str, str]:
    out = {}
    for name, (desc, scenario) in EXPERIMENTS.items():
        d = base(f"paper-{name}", desc)
        d["scenario"] = scenario
        d["compare"]["policies"] = ["robinhood", "static", "relief", "tao++", "cliffhanger++", "fair++",
                                    "lama++"]
        out[name] = HEADER + yaml.safe_dump(d, sort_keys=False, width=110)
    d = base("paper-spike-window", WINDOW["description"])
    d["duration"] = WINDOW["duration"]
    d["slo"]["warmup"] = WINDOW["warmup"]
    d["scenario"] = {"events": WINDOW["events"]}
    out["spike-window"] = HEADER.replace("four simulated hours with\n# a one-hour warm-up", "a 22-minute window\n# with a 5-minute warm-up") + yaml.safe_dump(d, sort_keys=False, width=110)
    return out


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for name, text in documents().items():
        p = OUT / f"{name}.yaml"
        if check:
            if not p.exists() or p.read_text() != text:
                stale.append(str(p))
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        print(f"wrote {p.relative_to(REPO)}")
    if stale:
        print("stale (run scripts/paper-experiments.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
