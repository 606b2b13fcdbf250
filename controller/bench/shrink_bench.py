"""Shrink benchmark (docs/benchmarks.md, Controller): time to shrink a filled memcached
partition by 1% while it serves a look-aside load of ≥ 10,000 gets/s.

    make build   # bin/mcload
    .venv/bin/python controller/bench/shrink_bench.py --size-mb 1024 --trials 25 --rate 12000

Each trial raises the limit back to the full size, waits until the load has filled the
cache again (total_malloced within 1 MB of the limit), then runs the controller's
resize mechanism (resize.reconcile) to the limit minus 1% and records the time until
total_malloced is at or below the new limit. Prints the distribution and the get rate
mcload reported during the trials.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from robinhood_controller.memcached import MemcachedPartition
from robinhood_controller.plan import MIB
from robinhood_controller.resize import Target, reconcile

from benchutil import free_port, wait_port  # noqa: E402 (sibling module)

REPO = Path(__file__).resolve().parents[2]


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


class Rates:
    """Collects mcload's progress lines."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, int]] = []  # (monotonic time, cumulative gets)
        self.filled = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("filled"):
                self.filled.set()
            elif line.startswith("t="):
                gets = int(line.split("gets=")[1].split()[0])
                self.lines.append((time.monotonic(), gets))

    def rate_between(self, t0: float, t1: float) -> float:
        pts = [(t, g) for t, g in self.lines if t0 <= t <= t1]
        if len(pts) < 2:
            return float("nan")
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--trials", type=int, default=25)
    ap.add_argument("--rate", type=float, default=12000, help="gets/s of the look-aside load")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--value-size", type=int, default=4096)
    ap.add_argument("--shrink-pct", type=float, default=1.0)
    ap.add_argument("--mcload", default=str(REPO / "bin" / "mcload"))
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    a = ap.parse_args()

    port = free_port()
    args = [shutil.which("memcached") or "memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
            "-m", str(a.size_mb), "-c", "4096"]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    mc = subprocess.Popen(args)
    load: subprocess.Popen[str] | None = None
    try:
        wait_port(port)
        addr = f"127.0.0.1:{port}"
        d = MemcachedPartition("bench", addr, timeout=5)
        d.attach()
        keys = int(a.size_mb * MIB * 1.5 / a.value_size)
        load = subprocess.Popen(
            [a.mcload, "--addr", addr, "--fill", "--keys", str(keys), "--value-size", str(a.value_size),
             "--rate", str(a.rate), "--workers", str(a.workers), "--report", "500ms"],
            stdout=subprocess.PIPE, text=True)
        rates = Rates(load)
        if not rates.filled.wait(600):
            raise RuntimeError("mcload did not finish filling")
        print(f"filled {keys} keys of {a.value_size} bytes into a {a.size_mb} MB memcached", file=sys.stderr)
        shrink_mb = max(1, round(a.size_mb * a.shrink_pct / 100))
        results = []
        t_start = time.monotonic()
        for i in range(a.trials):
            d.set_limit(a.size_mb)
            deadline = time.monotonic() + 60
            while d.read().malloced_bytes < (a.size_mb - 1) * MIB:
                if time.monotonic() > deadline:
                    raise RuntimeError("the cache did not fill up again within 60 s")
                time.sleep(0.05)
            st = d.read()
            t0 = time.monotonic()
            out = reconcile([Target("bench", d, st, a.size_mb - shrink_mb)], a.size_mb, shrink_budget=30)
            secs = time.monotonic() - t0
            after = d.read().malloced_bytes
            results.append({"trial": i, "seconds": secs, "pages_moved": out.pages_moved.get("bench", 0),
                            "busy": out.busy.get("bench", 0), "done": after <= (a.size_mb - shrink_mb) * MIB,
                            "malloced_before_mb": st.malloced_bytes / MIB, "malloced_after_mb": after / MIB})
            print(f"trial {i}: {secs * 1000:.1f} ms, {results[-1]['pages_moved']} pages, "
                  f"{results[-1]['busy']} BUSY, done={results[-1]['done']}", file=sys.stderr)
        rate = rates.rate_between(t_start, time.monotonic())
        secs = [r["seconds"] for r in results]
        summary = {
            "size_mb": a.size_mb, "shrink_mb": shrink_mb, "trials": len(secs),
            "get_rate_per_s": None if math.isnan(rate) else round(rate),
            "all_done": all(r["done"] for r in results),
            "ms": {"min": min(secs) * 1e3, "p50": percentile(secs, 50) * 1e3, "p90": percentile(secs, 90) * 1e3,
                   "p95": percentile(secs, 95) * 1e3, "max": max(secs) * 1e3, "mean": statistics.mean(secs) * 1e3},
            "sorted_ms": [round(x * 1e3, 1) for x in sorted(secs)],
            "pages_moved_mean": statistics.mean(r["pages_moved"] for r in results),
            "busy_mean": statistics.mean(r["busy"] for r in results),
        }
        print(json.dumps(summary, indent=1))
        if a.json:
            Path(a.json).write_text(json.dumps({"summary": summary, "trials": results}, indent=1))
        return 0
    finally:
        if load is not None:
            load.terminate()
            load.wait(10)
        mc.terminate()
        mc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
