#!/usr/bin/env python3
"""Time and peak memory of the two topology readers (docs/benchmarks.md, "Reading
topologies"): the Go reader (bin/topocheck) and the Python reader
(robinhood_common.topology.load), on generated valid topologies of 20, 200 and 1,000
backends (one app server partitioned over all of them) and of 16, 100 and 1,000 app
servers (20 backends each). Each reader runs in a process of its own; the figure is that
process's wall time and maximum resident set.

  .venv/bin/python scripts/readerbench.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def topology(backends: int, apps: int) -> str:
    lines = ["rbc_server: {grpc: 127.0.0.1:7070}", "backends:"]
    lines += [f"  - {{id: {i}, name: b{i}, type: kv, replicas: [{{grpc: 127.0.0.1:{10000 + i}}}]}}"
              for i in range(backends)]
    lines.append("app_servers:")
    for a in range(apps):
        lines += [f"  - id: app{a}", f"    http: 127.0.0.1:{20000 + a}", f"    cache_budget_mb: {64 * backends}",
                  "    partitions:"]
        lines += [f"      b{i}: 127.0.{a // 250}.{a % 250 + 1}:{30000 + i}" for i in range(backends)]
    return "\n".join(lines) + "\n"


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one run of cmd, which must succeed."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {p.stderr.read().decode()[-500:] if p.stderr else ''}")
    return wall, ru.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs per reader and size; the median is shown")
    ns = ap.parse_args()
    topocheck = REPO / "bin" / "topocheck"
    if not topocheck.exists():
        raise SystemExit("bin/topocheck is missing: run make build")
    sizes = [(20, 1), (200, 1), (1000, 1), (20, 16), (20, 100), (20, 1000)]
    print("| topology | bytes | Go: wall | Go: peak RSS | Python: wall | Python: peak RSS |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for backends, apps in sizes:
            path = Path(d) / f"b{backends}-a{apps}.yaml"
            path.write_text(topology(backends, apps))
            runs = {"go": [measure([str(topocheck), str(path)]) for _ in range(ns.repeat)],
                    "py": [measure([sys.executable, "-c", "import sys; from robinhood_common.topology import load; "
                                    "load(sys.argv[1])", str(path)]) for _ in range(ns.repeat)]}
            cells = []
            for k in ("go", "py"):
                cells += [f"{statistics.median(w for w, _ in runs[k]):.2f} s",
                          f"{statistics.median(m for _, m in runs[k]):.0f} MiB"]
            print(f"| {backends} backends, {apps} app server{'s' if apps > 1 else ''} | {path.stat().st_size:,} | "
                  + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
