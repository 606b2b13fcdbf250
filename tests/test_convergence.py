"""Several app servers, one RBC server (paper §3.2): every controller reads the same,
global RBC, so allocations that start apart converge. Two app servers with three real,
filled memcached partitions each start from mirrored allocations; the RBC blames
backends a and c equally; each tick takes the same tax from every partition and hands
the same pool out in the same proportions, so the gap between the two app servers'
allocations of a partition shrinks by (1 - tax) per tick."""
from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

from conftest import wait_tcp
from controller_harness import MIB, Writer, _stat

BUDGET_MB, FLOOR_MB, TAX = 96, 8, 0.1
START = {"app0": {"a": 16, "b": 16, "c": 64}, "app1": {"a": 64, "b": 16, "c": 16}}
IDS = {"a": 0, "b": 1, "c": 2}


class TwoWayFeeder:
    """Records from both app servers: the slowest 5 % blocked by a or c (equally), the
    rest by b."""

    def __init__(self, addr: str) -> None:
        self.stop = threading.Event()
        self.channel = grpc.insecure_channel(addr)
        self.stub = rbc_pb2_grpc.RBCServiceStub(self.channel)
        self.threads = [threading.Thread(target=self._run, args=(app,), daemon=True) for app in START]

    def _batches(self, app: str) -> Iterator[rbc_pb2.ReportRequest]:
        rnd = random.Random(app)
        while not self.stop.is_set():
            lat, blk = [], []
            for _ in range(400):
                if rnd.random() < 0.05:
                    lat.append(int(rnd.uniform(200, 400) * 1000))
                    blk.append(IDS[rnd.choice("ac")])
                else:
                    lat.append(int(rnd.uniform(5, 50) * 1000))
                    blk.append(IDS["b"])
            yield rbc_pb2.ReportRequest(app_server_id=app, latency_us=lat, blocking_backend=blk)
            self.stop.wait(0.1)

    def _run(self, app: str) -> None:
        try:
            self.stub.Report(self._batches(app))
        except grpc.RpcError:
            pass

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)
        self.channel.close()


def test_allocations_started_apart_converge(procs, gobin, free_address, tmp_path: Path) -> None:
    addrs = {app: {n: procs.memcached(mb)[1] for n, mb in start.items()} for app, start in START.items()}
    rbc_grpc, rbc_http = free_address(), free_address()
    apps = "".join(f"""
  - id: {app}
    http: 127.0.0.1:1
    cache_mode: partitioned
    cache_budget_mb: {BUDGET_MB}
    partitions: {{{", ".join(f"{n}: {{addr: {addrs[app][n]}, initial_mb: {mb}}}" for n, mb in START[app].items())}}}
    controller: {{interval: 500ms, policy: {{name: robinhood, tax: {TAX}}}, min_partition_mb: {FLOOR_MB},
                  shrink_budget: 400ms, rbc_timeout: 300ms}}""" for app in START)
    topo = tmp_path / "topology.yaml"
    topo.write_text(f"""
rbc_server: {{grpc: {rbc_grpc}, http: {rbc_http}, window: 2s}}
backends:
  - {{id: 0, name: a, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}
  - {{id: 1, name: b, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}
  - {{id: 2, name: c, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}
app_servers:{apps}
""")
    rbc = procs.start([gobin("rbcserver"), "--topology", topo], name="rbcserver")
    wait_tcp(rbc_grpc, proc=rbc)
    writers = [Writer(addrs[app]) for app in START]
    for app, w in zip(START, writers):
        w.fill(max(START[app].values()) + 8)
        w.thread.start()
    feeder = TwoWayFeeder(rbc_grpc)
    for t in feeder.threads:
        t.start()
    ctls = {app: procs.start([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo, "--id", app,
                              "--timeline", tmp_path / f"{app}.jsonl"], name=f"controller-{app}") for app in START}

    def limits() -> dict[str, dict[str, int]]:
        return {app: {n: _stat(a, "limit_maxbytes") // MIB for n, a in addrs[app].items()} for app in START}

    def gap(lim: dict[str, dict[str, int]]) -> int:
        return max(abs(lim["app0"][n] - lim["app1"][n]) for n in IDS)

    try:
        first = gap(limits())
        assert first == 48
        trace = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lim = limits()
            trace.append(gap(lim))
            if trace[-1] <= 4:
                break
            time.sleep(0.5)
        logs = {app: procs.log(p)[-2000:] for app, p in ctls.items()}
        assert trace[-1] <= 4, f"gap over time {trace}; limits {lim}; logs {json.dumps(logs)[:3000]}"
        # The gap only shrinks (within a MB of rounding per partition).
        assert all(b <= a + 1 for a, b in zip(trace, trace[1:])), trace
        # Both converge to the same place: b at the floor, a and c splitting the rest.
        for app in START:
            assert lim[app]["b"] <= FLOOR_MB + 4, lim
        recs = [json.loads(x) for x in (tmp_path / "app0.jsonl").read_text().splitlines()]
        assert all(r["rbc_ok"] for r in recs[1:]), "ticks without the RBC"
    finally:
        feeder.close()
        for w in writers:
            w.stop.set()
