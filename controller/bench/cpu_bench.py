"""Controller CPU benchmark (docs/benchmarks.md, Controller): CPU time of the controller
process at Δ = 5 s with 20 filled memcached partitions and a live RBC server that
blames one backend (whose partition a look-aside load keeps filling, so space keeps
flowing to it), measured from /proc/<pid>/stat (utime + stime) over a minute.

    make build   # bin/rbcserver, bin/mcload
    .venv/bin/python controller/bench/cpu_bench.py [--partitions 20] [--mb 64] [--seconds 60]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

from benchutil import free_port, wait_port  # noqa: E402 (sibling module)

REPO = Path(__file__).resolve().parents[2]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def feed(addr: str, blamed: int, n_backends: int, stop: threading.Event) -> None:
    """Stream 2,000 requests/s to the RBC server; the slowest 5% blame `blamed`."""
    rnd = random.Random(3)

    def batches():  # type: ignore[no-untyped-def]
        while not stop.is_set():
            lat, blk = [], []
            for _ in range(200):
                slow = rnd.random() < 0.05
                lat.append(rnd.randint(200_000, 400_000) if slow else rnd.randint(5_000, 50_000))
                blk.append(blamed if slow else rnd.randrange(n_backends))
            yield rbc_pb2.ReportRequest(app_server_id="app0", latency_us=lat, blocking_backend=blk)
            stop.wait(0.1)

    with grpc.insecure_channel(addr) as ch:
        try:
            rbc_pb2_grpc.RBCServiceStub(ch).Report(batches())
        except grpc.RpcError:
            pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--mb", type=int, default=64, help="initial limit of each partition")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=12)
    ap.add_argument("--interval", default="5s")
    ap.add_argument("--load-rate", type=float, default=5000, help="gets/s on the blamed partition (look-aside)")
    a = ap.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    stop = threading.Event()
    tmp = Path(tempfile.mkdtemp(prefix="cpu_bench"))
    try:
        addrs = []
        for i in range(a.partitions):
            port = free_port()
            args = [shutil.which("memcached") or "memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                    "-m", str(a.mb)]
            if os.geteuid() == 0:
                args += ["-u", "root"]
            procs.append(subprocess.Popen(args))
            wait_port(port)
            addrs.append(f"127.0.0.1:{port}")
        keys = int(a.mb * (1 << 20) * 1.2 / 4096)
        for addr in addrs:
            subprocess.run([str(REPO / "bin" / "mcload"), "--addr", addr, "--fill", "--keys", str(keys),
                            "--duration", "1ms", "--rate", "1"], check=True, capture_output=True)
        rbc_port, http_port = free_port(), free_port()
        procs.append(subprocess.Popen([str(REPO / "bin" / "rbcserver"), "--grpc-addr", f"127.0.0.1:{rbc_port}",
                                       "--http-addr", f"127.0.0.1:{http_port}"], stderr=subprocess.DEVNULL))
        wait_port(rbc_port)
        feeder = threading.Thread(target=feed, args=(f"127.0.0.1:{rbc_port}", 3, a.partitions, stop), daemon=True)
        feeder.start()
        big = int(a.mb * a.partitions * (1 << 20) / 4096)  # working set of the whole budget
        procs.append(subprocess.Popen([str(REPO / "bin" / "mcload"), "--addr", addrs[3], "--keys", str(big),
                                       "--rate", str(a.load_rate), "--report", "1h"], stdout=subprocess.DEVNULL))
        names = [f"b{i:02d}" for i in range(a.partitions)]
        backends = "\n".join(f"  - {{id: {i}, name: {n}, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}"
                             for i, n in enumerate(names))
        parts = ", ".join(f"{n}: {addr}" for n, addr in zip(names, addrs))
        topo = tmp / "topology.yaml"
        topo.write_text(f"""
rbc_server: {{grpc: 127.0.0.1:{rbc_port}}}
backends:
{backends}
app_servers:
  - id: app0
    http: 127.0.0.1:1
    cache_mode: partitioned
    cache_budget_mb: {a.mb * a.partitions}
    partitions: {{{parts}}}
    controller: {{interval: {a.interval}, min_partition_mb: 16, metrics: "127.0.0.1:{free_port()}"}}
""")
        log = open(tmp / "controller.log", "wb")
        ctl = subprocess.Popen([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", str(topo),
                                "--app-server", "app0", "--timeline", str(tmp / "timeline.jsonl")],
                               stderr=log, stdout=log)
        procs.append(ctl)
        time.sleep(a.warmup)
        c0, t0 = cpu_seconds(ctl.pid), time.monotonic()
        time.sleep(a.seconds)
        c1, t1 = cpu_seconds(ctl.pid), time.monotonic()
        ticks = sum(1 for line in (tmp / "timeline.jsonl").read_text().splitlines() if line)
        pages = sum(json.loads(line)["pages_moved"] for line in (tmp / "timeline.jsonl").read_text().splitlines())
        print(json.dumps({
            "partitions": a.partitions, "interval": a.interval, "measured_s": round(t1 - t0, 1),
            "cpu_s": round(c1 - c0, 3), "cpu_pct_of_core": round(100 * (c1 - c0) / (t1 - t0), 2),
            "rss_mb": round(rss_mb(ctl.pid), 1), "ticks_total": ticks, "pages_moved_total": pages,
        }, indent=1))
        return 0
    finally:
        stop.set()
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
