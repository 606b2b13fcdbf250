"""Integration tests of bin/rbcserver driven from Python through the generated
gRPC stubs, the way the controller uses it (and over its HTTP JSON endpoint).

The expected values come from a plain nearest-rank reference written here,
independently of the Go code (docs/algorithms.md).
"""
from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterable, Iterator

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

from conftest import Procs, wait_tcp

Record = tuple[int, int]  # (latency_us, blocking_backend)


def rank(pct: float, n: int) -> int:
    """1-based nearest rank ceil(pct/100 * n), with pct taken as the decimal it prints as."""
    if n == 0:
        return 0
    return min(max(math.ceil(Fraction(str(pct)) * n / 100), 1), n)


def reference(records: list[Record], low: float = 98.5, high: float = 99.5) -> dict[str, object]:
    """The RBC snapshot of docs/algorithms.md, computed by sorting."""
    n = len(records)
    if n == 0:
        return {"n": 0, "lo": 0, "hi": 0, "p50": 0, "p99": 0, "band": 0, "backends": []}
    lats = sorted(lat for lat, _ in records)
    lo, hi = lats[rank(low, n) - 1], lats[rank(high, n) - 1]
    window = Counter(b for _, b in records)
    band = Counter(b for lat, b in records if lo <= lat <= hi)
    return {
        "n": n, "lo": lo, "hi": hi,
        "p50": lats[rank(50, n) - 1], "p99": lats[rank(99, n) - 1],
        "band": sum(band.values()),
        "backends": [(b, band[b], window[b]) for b in sorted(window)],
    }


def observed(resp: rbc_pb2.GetRBCResponse) -> dict[str, object]:
    return {
        "n": resp.window_requests, "lo": resp.low_latency_us, "hi": resp.high_latency_us,
        "p50": resp.p50_latency_us, "p99": resp.p99_latency_us, "band": resp.band_requests,
        "backends": [(b.backend, b.blocking_count, b.window_blocking) for b in resp.backends],
    }


class RBCServer:
    """A running bin/rbcserver with a gRPC stub and its HTTP base URL."""

    def __init__(self, procs: Procs, binary: str, grpc_addr: str, http_addr: str, extra: list[str]) -> None:
        self.proc = procs.start([binary, "--grpc-addr", grpc_addr, "--http-addr", http_addr, *extra])
        wait_tcp(grpc_addr, proc=self.proc)
        wait_tcp(http_addr, proc=self.proc)
        self.http = f"http://{http_addr}"
        self.channel = grpc.insecure_channel(grpc_addr)
        self.stub = rbc_pb2_grpc.RBCServiceStub(self.channel)

    def report(self, batches: Iterable[list[Record]], app: str = "app0") -> rbc_pb2.ReportResponse:
        def requests() -> Iterator[rbc_pb2.ReportRequest]:
            for batch in batches:
                yield rbc_pb2.ReportRequest(
                    app_server_id=app,
                    latency_us=[lat for lat, _ in batch],
                    blocking_backend=[b for _, b in batch],
                )
        return self.stub.Report(requests(), timeout=30)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.http + path, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()


@pytest.fixture
def rbcserver(gobin: Callable[[str], Path], procs: Procs,
              free_address: Callable[[], str]) -> Iterator[Callable[..., RBCServer]]:
    servers: list[RBCServer] = []

    def start(*extra: str) -> RBCServer:
        # A long window: nothing may expire while the test runs.
        s = RBCServer(procs, str(gobin("rbcserver")), free_address(), free_address(), ["--window", "1h", *extra])
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.channel.close()


def random_batches(rng: random.Random, count: int, size: int, backends: int) -> list[list[Record]]:
    return [[(int(rng.lognormvariate(7.5, 0.8)), rng.randrange(backends)) for _ in range(size)]
            for _ in range(count)]


def test_report_then_getrbc_matches_reference(rbcserver: Callable[..., RBCServer]) -> None:
    s = rbcserver()
    batches = random_batches(random.Random(7), 8, 700, 10)
    resp = s.report(batches)
    assert (resp.accepted_records, resp.accepted_batches) == (5600, 8)
    records = [r for b in batches for r in b]

    snap = s.stub.GetRBC(rbc_pb2.GetRBCRequest(), timeout=30)
    assert observed(snap) == reference(records)
    assert (snap.window_seconds, snap.low_pct, snap.high_pct) == (3600, 98.5, 99.5)
    assert sum(b.window_blocking for b in snap.backends) == snap.window_requests

    snap = s.stub.GetRBC(rbc_pb2.GetRBCRequest(low_pct=90, high_pct=99.9), timeout=30)
    assert observed(snap) == reference(records, 90, 99.9)


def test_http_snapshot_is_the_same_json(rbcserver: Callable[..., RBCServer]) -> None:
    s = rbcserver()
    records = random_batches(random.Random(8), 1, 3000, 4)[0]
    s.report([records])
    code, body = s.get("/v1/rbc?low_pct=95&high_pct=99")
    assert code == 200
    doc = json.loads(body)
    want = reference(records, 95, 99)
    # proto field names, 64-bit integers as strings (proto3 JSON mapping)
    assert doc["window_requests"] == str(want["n"])
    assert doc["low_latency_us"] == want["lo"] and doc["high_latency_us"] == want["hi"]
    assert doc["band_requests"] == str(want["band"])
    assert [(b["backend"], int(b["blocking_count"]), int(b["window_blocking"])) for b in doc["backends"]] == want["backends"]
    assert doc["low_pct"] == 95 and doc["high_pct"] == 99 and doc["window_seconds"] == 3600


def test_empty_window_is_zero_not_an_error(rbcserver: Callable[..., RBCServer]) -> None:
    s = rbcserver()
    snap = s.stub.GetRBC(rbc_pb2.GetRBCRequest(), timeout=30)
    assert observed(snap) == reference([])
    code, body = s.get("/v1/rbc")
    assert code == 200
    doc = json.loads(body)
    assert doc["backends"] == [] and doc["window_requests"] == "0" and doc["p99_latency_us"] == 0


def test_a_bad_record_costs_that_record_and_a_bad_batch_that_batch(rbcserver: Callable[..., RBCServer]) -> None:
    s = rbcserver("--max-backends", "8")
    # An out-of-range backend: that record is refused, the rest of the stream stored.
    resp = s.report([[(100, 1), (200, 2)], [(1, 0), (2, 8)]])
    assert (resp.accepted_records, resp.rejected_records) == (3, 1)

    def mismatched() -> Iterator[rbc_pb2.ReportRequest]:
        yield rbc_pb2.ReportRequest(latency_us=[5, 6], blocking_backend=[0, 1])
        yield rbc_pb2.ReportRequest(latency_us=[1, 2, 3], blocking_backend=[0, 0])
    with pytest.raises(grpc.RpcError) as err:
        s.stub.Report(mismatched(), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "latency_us[2] = 3 has no blocking backend" in (err.value.details() or "")
    # The trailers say what the failed stream stored.
    trailers = dict(err.value.trailing_metadata() or ())
    assert trailers["robinhood-accepted-records"] == "2" and trailers["robinhood-rejected-records"] == "0"

    assert s.stub.GetRBC(rbc_pb2.GetRBCRequest(), timeout=30).window_requests == 5
    _, metrics = s.get("/metrics")
    assert 'rbcserver_records_rejected_total{reason="backend_out_of_range"} 1' in metrics
    assert 'rbcserver_records_rejected_total{reason="length_mismatch"} 3' in metrics
    assert "rbcserver_records_ingested_total 5" in metrics


@pytest.mark.parametrize("req, message", [
    (rbc_pb2.GetRBCRequest(low_pct=120), "low_pct = 120 is outside (0, 100]"),
    (rbc_pb2.GetRBCRequest(low_pct=99, high_pct=98), "low_pct = 99 is above high_pct = 98"),
    (rbc_pb2.GetRBCRequest(window_seconds=-2), "window_seconds = -2 must be a finite number ≥ 0"),
])
def test_bad_parameters(rbcserver: Callable[..., RBCServer], req: rbc_pb2.GetRBCRequest, message: str) -> None:
    s = rbcserver()
    with pytest.raises(grpc.RpcError) as err:
        s.stub.GetRBC(req, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert details.startswith(message)
    query = "&".join(f"{f.name}={v:g}" for f, v in req.ListFields())
    code, body = s.get(f"/v1/rbc?{query}")
    assert (code, body.strip()) == (400, details)


def test_sigterm_exits_zero(rbcserver: Callable[..., RBCServer]) -> None:
    s = rbcserver()
    s.report([[(5, 0)]])
    s.proc.send_signal(signal.SIGTERM)
    try:
        assert s.proc.wait(timeout=20) == 0
    except subprocess.TimeoutExpired:
        pytest.fail("rbcserver did not exit within 20 s of SIGTERM")


def test_ring_property_against_reference(rbcserver: Callable[..., RBCServer]) -> None:
    """After every batch, GetRBC equals the reference over the newest
    --ring-size records sent so far, for random batches and bands."""
    ring_size = 300
    # Batches up to 250 records: the batch bound (--max-batch-fraction) is tested elsewhere.
    s = rbcserver("--ring-size", str(ring_size), "--max-backends", "1024", "--max-batch-fraction", "1")
    sent: list[Record] = []
    records = st.lists(st.tuples(st.integers(0, 2**32 - 1) | st.integers(0, 20), st.integers(0, 1023)),
                       max_size=250)
    pct = st.integers(1, 10000).map(lambda hundredths: hundredths / 100)

    @settings(max_examples=40, deadline=None)
    @given(batch=records, a=pct, b=pct)
    def check(batch: list[Record], a: float, b: float) -> None:
        s.report([batch])
        sent.extend(batch)
        low, high = min(a, b), max(a, b)
        snap = s.stub.GetRBC(rbc_pb2.GetRBCRequest(low_pct=low, high_pct=high), timeout=30)
        assert observed(snap) == reference(sent[-ring_size:], low, high)

    check()
