"""The controller against a secured RBC server (docs/security.md): it calls GetStats with
its app server's token over mutual TLS, both taken from the topology; a wrong token
gives errors, never a crash; its /metrics needs a token and TLS when the topology has
them, and a non-loopback /metrics address without auth is refused (exit 2)."""
from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import wait_tcp


def _secrets(gobin, d: Path) -> None:
    subprocess.run([gobin("devcerts"), "--out", d, "--callers", "app0,prometheus"], check=True,
                   capture_output=True)


def _topology(tmp_path: Path, rbc_grpc: str, rbc_http: str, mc: str) -> Path:
    topo = tmp_path / "topology.yaml"
    topo.write_text(f"""
rbc_server: {{grpc: {rbc_grpc}, http: {rbc_http}, window: 1s}}
backends: [{{id: 0, name: a, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}]
app_servers:
  - id: app0
    http: 127.0.0.1:1
    cache_mode: partitioned
    cache_budget_mb: 16
    partitions: {{a: {mc}}}
    controller: {{interval: 500ms, min_partition_mb: 8, rbc_timeout: 2s}}
auth: {{tokens: secrets/tokens, token: "secrets/{{id}}.token"}}
tls: {{ca: secrets/ca.pem, cert: secrets/cert.pem, key: secrets/key.pem, client_auth: true}}
""")
    return topo


def _ticks(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_controller_with_tokens_and_mtls(procs, gobin, free_address, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    _secrets(gobin, secrets)
    _, mc = procs.memcached(16)
    rbc_grpc, rbc_http = free_address(), free_address()
    topo = _topology(tmp_path, rbc_grpc, rbc_http, mc)
    rbc = procs.start([gobin("rbcserver"), "--topology", topo], name="rbcserver")
    wait_tcp(rbc_grpc, proc=rbc)

    timeline, metrics_addr = tmp_path / "ok.jsonl", free_address()
    ctl = procs.start([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo, "--id", "app0",
                       "--timeline", timeline, "--metrics", metrics_addr], name="controller")
    wait_tcp(metrics_addr, proc=ctl)
    ctx = ssl.create_default_context(cafile=str(secrets / "ca.pem"))
    ctx.load_cert_chain(secrets / "cert.pem", secrets / "key.pem")
    url = f"https://{metrics_addr}/metrics"
    try:
        urllib.request.urlopen(url, context=ctx, timeout=5)
        raise AssertionError("/metrics answered without a token")
    except urllib.error.HTTPError as e:
        assert e.code == 401
    token = (secrets / "prometheus.token").read_text().split()[1]
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    assert b"controller_ticks_total" in urllib.request.urlopen(req, context=ctx, timeout=5).read()
    with urllib.request.urlopen(f"https://{metrics_addr}/healthz", context=ctx, timeout=5) as r:
        assert r.status == 200  # probes need no token
    # Clients that connect and send nothing (not even a TLS hello) hold up no one else:
    # the handshake runs on the connection's own thread, not in the accept loop. (The
    # generous timeout fails only on a hang: before, /healthz waited for them to leave.)
    host, port = metrics_addr.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(3)]
    try:
        with urllib.request.urlopen(f"https://{metrics_addr}/healthz", context=ctx, timeout=30) as r:
            assert r.status == 200
        assert b"controller_ticks_total" in urllib.request.urlopen(req, context=ctx, timeout=30).read()
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_ticks(timeline) if timeline.exists() else []) < 2:
        time.sleep(0.2)
    recs = _ticks(timeline)
    assert len(recs) >= 2, procs.log(ctl)
    assert all(r["rbc_ok"] for r in recs), procs.log(ctl)
    procs.stop(ctl)

    # app0's token file holds a token the servers do not know: every tick fails to
    # read the RBC, is counted, and the controller keeps running.
    (secrets / "app0.token").write_text("app0 notknowntotheserverxxxxxxxx\n")
    bad = tmp_path / "bad.jsonl"
    ctl = procs.start([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo, "--id", "app0",
                       "--timeline", bad, "--max-ticks", "2"], name="controller-bad")
    assert ctl.wait(60) == 0, procs.log(ctl)
    recs = _ticks(bad)
    assert recs and not any(r["rbc_ok"] for r in recs)
    assert "UNAUTHENTICATED" in procs.log(ctl)


def test_metrics_on_a_public_address_needs_auth(procs, tmp_path: Path, free_address) -> None:
    _, mc = procs.memcached(16)
    topo = tmp_path / "topology.yaml"
    topo.write_text(f"""
backends: [{{id: 0, name: a, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}]
app_servers:
  - {{id: app0, http: 127.0.0.1:1, cache_mode: partitioned, cache_budget_mb: 16, partitions: {{a: {mc}}},
     controller: {{min_partition_mb: 8, policy: static}}}}
""")
    port = free_address().rsplit(":", 1)[1]
    r = subprocess.run([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo, "--id", "app0",
                        "--metrics", f":{port}", "--max-ticks", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"controller.metrics :{port}: not a loopback address" in r.stderr and "--insecure" in r.stderr
    r = subprocess.run([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo, "--id", "app0",
                        "--metrics", f":{port}", "--max-ticks", "1", "--insecure"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_refused_token_file_leaves_no_metrics_listener(procs, gobin, free_address, tmp_path: Path) -> None:
    """A shared-readable token file is refused before /metrics listens: the controller
    exits 2 naming the file, and never said it served metrics."""
    _secrets(gobin, tmp_path / "secrets")
    (tmp_path / "secrets" / "app0.token").chmod(0o644)
    _, mc = procs.memcached(16)
    topo = _topology(tmp_path, free_address(), free_address(), mc)
    metrics = free_address()
    r = subprocess.run([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo, "--id", "app0",
                        "--metrics", metrics, "--max-ticks", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "app0.token" in r.stderr and "event=metrics" not in r.stderr, r.stderr
