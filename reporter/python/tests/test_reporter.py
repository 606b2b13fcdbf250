"""robinhood_report against the real RBC server (bin/rbcserver): records arrive and count
in the RBC exactly, the fan-out helper names the query that ended last, a full buffer
drops and counts without blocking, the reporter reconnects after the server returns,
and it authenticates with a token over mutual TLS."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

from conftest import wait_tcp
from robinhood_report import Reporter, RequestTimer, fan_out
from robinhood_report.fanout import Call, blocking

BACKENDS = {"catalog": 0, "ratings": 1, "reviews": 2}
BLOCKING = json.loads((Path(__file__).resolve().parents[3] / "tests" / "vectors" / "blocking.json").read_text())


def _rbc(procs, gobin, free_address, *extra: str) -> tuple[str, object]:
    addr = free_address()
    p = procs.start([gobin("rbcserver"), "--grpc-addr", addr, "--http-addr", free_address(), "--window", "10m",
                     *extra], name="rbcserver")
    wait_tcp(addr, proc=p)
    return addr, p


def _get_rbc(addr: str, creds: grpc.ChannelCredentials | None = None, md=None) -> rbc_pb2.GetRBCResponse:
    ch = grpc.secure_channel(addr, creds) if creds else grpc.insecure_channel(addr)
    with ch:
        return rbc_pb2_grpc.RBCServiceStub(ch).GetRBC(rbc_pb2.GetRBCRequest(), timeout=5, metadata=md)


def _wait_requests(addr: str, n: int, **kw) -> rbc_pb2.GetRBCResponse:
    deadline = time.monotonic() + 15
    while True:
        r = _get_rbc(addr, **kw)
        if r.window_requests >= n or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def test_records_reach_the_rbc_exactly(procs, gobin, free_address) -> None:
    addr, _ = _rbc(procs, gobin, free_address)
    with Reporter(addr, "app0", BACKENDS, batch=100) as rep:
        # 1000 requests: latencies 1..1000 µs; the band P98.5-P99.5 holds 986..995,
        # blamed on ratings, everything else on catalog.
        for lat in range(1, 1001):
            assert rep.record(lat, "ratings" if 986 <= lat <= 995 else "catalog")
        assert not rep.record(5, "nosuch")
        assert rep.flush()
    r = _wait_requests(addr, 1000)
    assert r.window_requests == 1000
    band = range(r.low_latency_us, r.high_latency_us + 1)
    want = {1: sum(1 for lat in band if 986 <= lat <= 995), 0: sum(1 for lat in band if not 986 <= lat <= 995)}
    got = {b.backend: b.blocking_count for b in r.backends}
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v} and want[1] >= 9, (got, band)
    assert {b.backend: b.window_blocking for b in r.backends} == {0: 990, 1: 10}
    s = rep.stats()
    assert (s.recorded, s.dropped, s.unknown_backend, s.sent, s.lost, s.refused) == (1000, 0, 1, 1000, 0, 0)
    assert s.batches >= 10


def test_one_bad_record_never_loses_good_ones(procs, gobin, free_address) -> None:
    # The server takes ids below 8; the reporter, without a backends map, ids below 1024.
    addr, _ = _rbc(procs, gobin, free_address, "--max-backends", "8")
    with Reporter(addr, "app0", batch=500) as rep:
        for i in range(6000):
            assert rep.record(100 + i, i % 8)
        assert rep.record(7, 9)  # valid here, refused by the server: that record only
        # Refused at record(): counted, False, nothing sent.
        assert not rep.record(5, 5000) and not rep.record(5, -1) and not rep.record(5, "catalog")
        assert not rep.record(2**32, 1) and not rep.record(-3, 1) and not rep.record(float("nan"), 1)
        assert not rep.record(5, True)
        for i in range(6000):
            assert rep.record(100 + i, i % 8)
        assert rep.flush()
    assert _wait_requests(addr, 12_000).window_requests == 12_000
    s = rep.stats()
    assert (s.recorded, s.sent, s.lost, s.refused, s.invalid, s.unknown_backend) == (12_001, 12_001, 0, 1, 6, 1)
    assert s.not_stored == 8 and s.stream_errors == 0
    # With a backends map, an id it does not name is refused too.
    named = Reporter(addr, "app0", BACKENDS, start=False)
    assert named.record(5, 2) and not named.record(5, 3) and named.stats().invalid == 1
    with pytest.raises(ValueError, match="max_backends"):
        Reporter(addr, "app0", {"x": 2000}, start=False)


def test_lost_is_exact_when_the_server_ends_a_stream(procs, gobin, free_address) -> None:
    # Batches over 1% of a 20,000-record ring (200 records) end the stream
    # (ResourceExhausted); the server's trailers say what that stream stored before it.
    addr, _ = _rbc(procs, gobin, free_address, "--ring-size", "20000", "--max-batch-fraction", "0.01")
    with Reporter(addr, "app0", batch=1000, flush_interval=0.05) as rep:
        for _round in range(6):  # six batches of 100 on one stream: stored
            for i in range(100):
                assert rep.record(1000 + i, 1)
            time.sleep(0.2)
        assert _wait_requests(addr, 600).window_requests == 600
        for i in range(700):  # one batch of 700 on the same stream: refused, the stream ends
            assert rep.record(5, 2)
        deadline = time.monotonic() + 10
        while rep.stats().stream_errors == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
    s = rep.stats()
    # Before trailers, all 1,300 records of the stream counted as lost.
    assert (s.stream_errors, s.sent, s.lost) == (1, 1300, 700), s
    assert _get_rbc(addr).window_requests == s.sent - s.lost == 600


def test_request_timer_names_the_query_that_ended_last() -> None:
    got: list[tuple[int, int | str]] = []

    class Sink:
        def record(self, latency_us: int, backend: int | str) -> bool:
            got.append((latency_us, backend))
            return True

    delays = {"catalog": 0.03, "ratings": 0.08, "reviews": 0.01}
    res = fan_out(Sink(), {n: (lambda d=d, n=n: time.sleep(d) or n) for n, d in delays.items()})
    assert res == {n: n for n in delays}
    assert got[0][1] == "ratings" and got[0][0] >= 80_000
    with RequestTimer(Sink()) as req:
        with req.query("catalog"):
            time.sleep(0.01)
        with req.query("reviews"):
            pass
    assert got[1][1] == "reviews" and req.blocking == "reviews"
    with RequestTimer(Sink()):  # a request without queries is not recorded
        pass
    assert len(got) == 2


def test_failed_request_counts_against_the_backend_that_failed_it() -> None:
    got: list[tuple[int, int | str]] = []

    class Sink:
        backends = BACKENDS

        def record(self, latency_us: int, backend: int | str) -> bool:
            got.append((latency_us, backend))
            return True

    # The slow query succeeds, the fast one fails: the failure decides.
    with pytest.raises(RuntimeError):
        with RequestTimer(Sink()) as req:
            with req.query("catalog"):
                time.sleep(0.02)
            with req.query("ratings"):
                raise RuntimeError("boom")
    assert req.failed and got == [(req.latency_us, "ratings")] and req.latency_us >= 20_000
    # In parallel: reviews fails at 10 ms while catalog is still running (no end yet).
    got.clear()

    def fail() -> None:
        time.sleep(0.01)
        raise ConnectionError("reviews down")

    with pytest.raises(ConnectionError):
        fan_out(Sink(), {"catalog": lambda: time.sleep(0.2), "reviews": fail})
    assert [b for _, b in got] == ["reviews"]
    # A request whose own code raised after its queries: the slowest query blocked it.
    got.clear()
    with pytest.raises(KeyError):
        with RequestTimer(Sink()) as req:
            req.done("catalog", end=time.perf_counter())
            req.done("reviews", end=time.perf_counter() + 1)
            raise KeyError("app")
    assert got[0][1] == "reviews" and not req.failed


def test_ties_go_to_the_smaller_id_whatever_the_order() -> None:
    got: list[int | str] = []

    class Sink:
        backends = BACKENDS

        def record(self, latency_us: int, backend: int | str) -> bool:
            got.append(backend)
            return True

    for order in (("reviews", "ratings", "catalog"), ("catalog", "ratings", "reviews")):
        with RequestTimer(Sink()) as req:
            for name in order:
                req.done(name, end=5.0 if name != "catalog" else 1.0)
    assert got == ["ratings", "ratings"]  # ratings (1) and reviews (2) end together


@pytest.mark.parametrize("case", BLOCKING["cases"], ids=lambda c: c["name"])
def test_blocking_vectors(case: dict) -> None:
    """The shared cases (tests/vectors/blocking.json), also run by lib/fanout and the
    OTLP assembler; and through RequestTimer, in the case's order and reversed."""
    calls = [Call(backend=c["backend"], end=c["end"], failed=c.get("failed", False), empty=c.get("empty", False))
             for c in case["calls"]]
    assert blocking(calls) == (case["expect"]["blocking"], case["expect"]["failed"]), case["description"]
    assert blocking(reversed(calls)) == blocking(calls)
    for order in (calls, calls[::-1]):
        got: list[int | str] = []

        class Sink:
            def record(self, latency_us: int, backend: int | str) -> bool:
                got.append(backend)
                return True

        with RequestTimer(Sink()) as req:
            for c in order:
                if not c.empty:  # a timer sees queries, never an empty batch
                    req.done(c.backend, end=float("inf") if c.end is None else c.end, failed=c.failed)
        want = case["expect"]["blocking"]
        assert got == ([] if want is None else [want]) and req.failed == case["expect"]["failed"]


@given(st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 9)), st.booleans(),
                          st.booleans()), max_size=8), st.randoms())
def test_blocking_property(raw: list, rnd) -> None:
    """The blocker is the latest of the failed calls if any failed, else of all calls with
    queries (no end latest), the smallest id among equals; order does not matter."""
    calls = [Call(backend=b, end=e, failed=f, empty=m) for b, e, f, m in raw]
    blk, failed = blocking(calls)
    live = [c for c in calls if not c.empty]
    if not live:
        assert (blk, failed) == (None, False)
        return
    assert failed == any(c.failed for c in live)
    cand = [c for c in live if c.failed == failed]
    key = max((float("inf") if c.end is None else c.end) for c in cand)
    assert blk == min(c.backend for c in cand if (float("inf") if c.end is None else c.end) == key)
    shuffled = calls[:]
    rnd.shuffle(shuffled)
    assert blocking(shuffled) == (blk, failed)


def test_full_buffer_drops_and_counts_and_reconnects(procs, gobin, free_address) -> None:
    addr = free_address()  # nothing listens yet
    rep = Reporter(addr, "app0", BACKENDS, buffer=500)
    try:
        t0 = time.perf_counter()
        accepted = sum(rep.record(100, 0) for _ in range(20_000))
        spent = time.perf_counter() - t0
        # Nothing is sent while the server is away: at most the buffer (plus what the
        # sender took before it found no server) is kept, the rest is dropped.
        s = rep.stats()
        assert s.dropped == 20_000 - accepted and s.dropped >= 19_000, s
        assert spent < 5, f"record blocked: {spent:.2f}s for 20,000 records"
        # The server comes up on that address: the reporter reconnects (back-off ≤ 2 s).
        port = addr.rsplit(":", 1)[1]
        p = procs.start([gobin("rbcserver"), "--grpc-addr", addr, "--http-addr", free_address(),
                         "--window", "10m"], name="rbcserver")
        wait_tcp(addr, proc=p)
        for _ in range(100):
            rep.record(200, 1)
        r = _wait_requests(addr, 100)
        assert r.window_requests >= 100, f"nothing arrived after the server came up on port {port}"
    finally:
        rep.close()


def test_token_and_mutual_tls(procs, gobin, free_address, tmp_path: Path) -> None:
    sec = tmp_path / "secrets"
    subprocess.run([gobin("devcerts"), "--out", sec, "--callers", "app0,app1"], check=True, capture_output=True)
    addr, _ = _rbc(procs, gobin, free_address, "--auth-token-file", str(sec / "tokens"),
                   "--tls-cert", str(sec / "cert.pem"), "--tls-key", str(sec / "key.pem"),
                   "--tls-client-ca", str(sec / "ca.pem"))
    tls = dict(tls_ca=str(sec / "ca.pem"), tls_cert=str(sec / "cert.pem"), tls_key=str(sec / "key.pem"))
    with Reporter(addr, "app0", BACKENDS, token_file=str(sec / "app0.token"), **tls) as rep:
        for _ in range(50):
            rep.record(300, "reviews")
        rep.flush()
        creds = grpc.ssl_channel_credentials((sec / "ca.pem").read_bytes(), (sec / "key.pem").read_bytes(),
                                             (sec / "cert.pem").read_bytes())
        tok = (sec / "app1.token").read_text().split()[1]
        r = _wait_requests(addr, 50, creds=creds, md=(("authorization", f"Bearer {tok}"),))
        assert r.window_requests == 50
    # app1's token reporting as app0: refused, counted as a stream error, never accepted.
    with Reporter(addr, "app0", BACKENDS, token_file=str(sec / "app1.token"), **tls) as rep:
        rep.record(300, "reviews")
        deadline = time.monotonic() + 10
        while rep.stats().stream_errors == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rep.stats().stream_errors >= 1


def test_bad_arguments() -> None:
    for kw, msg in [({"app_server": ""}, "app_server"), ({"buffer": 0}, "at least 1"),
                    ({"flush_interval": 0}, "positive"), ({"tls_cert": "x"}, "go together"),
                    ({"token": "a" * 20, "token_file": "f"}, "not both")]:
        args = {"app_server": "app0", **kw}
        with pytest.raises(ValueError, match=msg):
            Reporter("127.0.0.1:1", start=False, **args)


def test_cli_streams_stdin(procs, gobin, free_address) -> None:
    addr, _ = _rbc(procs, gobin, free_address)
    good = "# latency backend\n" + "".join(f"{i} ratings\n" for i in range(1, 301)) + "7 1\n"
    cmd = [sys.executable, "-m", "robinhood_report.cli", "--rbc", addr, "--app-server", "app0", "--backend", "ratings=1"]
    r = subprocess.run(cmd, input=good, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "301 records taken, 301 sent, 0 lost, 0 refused by the server, 0 dropped, 0 bad lines" in r.stderr
    # Bad lines cost themselves only, and the exit status says something was not stored.
    r = subprocess.run(cmd, input=good + "oops\n5 nosuch\n7 2\n4294967296 1\n", capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.stderr
    assert "line 303: want 'LATENCY_US BACKEND'" in r.stderr and "line 304: not recorded: backend 'nosuch'" in r.stderr
    assert "line 305: not recorded: backend id 2 is not below --max-backends 1024 or not one of the --backend ids" \
        in r.stderr and "line 306: not recorded: latency 4294967296 is beyond" in r.stderr
    assert "301 records taken, 301 sent, 0 lost, 0 refused by the server, 0 dropped, 4 bad lines" in r.stderr
    assert _wait_requests(addr, 602).window_requests == 602


def test_concurrent_recorders_lose_nothing() -> None:
    rep = Reporter("127.0.0.1:1", "app0", buffer=10**6, start=False)
    ts = [threading.Thread(target=lambda: [rep.record(i, 0) for i in range(20_000)]) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert rep.stats().recorded == 160_000 and len(rep._q) == 160_000
