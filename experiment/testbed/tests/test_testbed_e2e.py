"""The testbed end to end with real processes: a short `compare` of three policies,
and `up --prometheus` checked through Prometheus's HTTP API. No effectiveness
thresholds here: effectiveness is measured by the demo (docs/results.md)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
import yaml

from conftest import interrupt, sigint_default, wait_ready_file
from robinhood_controller import policies
from robinhood_testbed import prom
from robinhood_testbed.experiment import dispatch_policies
from robinhood_testbed.procs import MARKER_ENV

REPO = Path(__file__).resolve().parents[3]

TINY = {
    "name": "tiny",
    "seed": 3,
    "duration": "24s",
    "backends": [
        {"name": "alpha", "type": "kv", "limits": {"workers": 4, "extra_latency_ms": 2}},
        {"name": "beta", "type": "sql", "limits": {"workers": 4, "extra_latency_ms": 2}, "sql": {"rows": 2000}},
    ],
    "cache": {"budget_mb": 40},
    "controller": {"interval": "1s", "min_partition_mb": 16},
    "rbc_server": {"window": "4s"},
    "slo": {"latency": "100ms", "step": "2s", "window": "6s", "warmup": "6s"},
    "trace": {"synth": {"rate": 80, "params": {"queries-per-request": 6, "keys": 3000, "mean-size": 4096}}},
    "scenario": {"events": [{"kind": "set", "at": "10s", "backend": "beta", "set": {"rate": 40}},
                            {"kind": "set", "at": "18s", "backend": "beta", "set": {"rate": 0}}]},
}


def leftovers(marker: str) -> list[str]:
    """Processes still carrying the testbed's marker for this run."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{MARKER_ENV}={marker}".encode() in env:
            out.append(f"{d.name}: {cmd}")
    return out


def cli_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "robinhood_testbed.cli", *args]


@pytest.fixture
def built(gobin: Callable[[str], Path]) -> None:
    for name in ("backend", "rbcserver", "appserver", "tracegen"):
        gobin(name)


def test_compare_three_policies(tmp_path: Path, built: None) -> None:
    exp = tmp_path / "tiny.yaml"
    exp.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    # Partitioned (robinhood, static) and shared: every policy would take eight arms of
    # real time (the simulator's test runs them all).
    res = subprocess.run(cli_args("compare", "--experiment", str(exp), "--out", str(out), "--quiet",
                                  "--policies", "robinhood,static"),
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for policy in ("robinhood", "static", "shared"):
        d = out / policy
        summary = json.loads((d / "replay" / "summary.json").read_text())
        assert summary["sent"] > 500, f"{policy}: only {summary['sent']} requests sent"
        assert (d / "replay" / "requests.csv").stat().st_size > 0
        assert (d / "replay" / "scenario.jsonl").read_text().count("\n") >= 2, "both scenario changes applied"
        assert (d / "rbc.jsonl").read_text().strip(), "RBC timeline recorded"
        assert (d / "topology.yaml").exists() and (d / "logs").is_dir()
        result = json.loads((d / "result.json").read_text())
        assert set(result["hit_ratio"]) == {"alpha", "beta"}
        assert leftovers(str(d / "logs")) == [], "every process of the run was stopped"
    for policy in ("robinhood", "static"):
        ticks = (out / policy / "controller-app0.jsonl").read_text().splitlines()
        assert len(ticks) >= 10, f"{policy}: controller timeline has {len(ticks)} ticks"
    assert not list((out / "shared").glob("controller-*.jsonl")), "shared mode runs no controller"
    for png in ("p99_over_time.png", "slo_violation_curves.png", "allocation.png", "rbc_share.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG", png
    report = (out / "report.html").read_text()
    for policy in ("robinhood", "static", "shared"):
        assert f"<td>{policy}</td>" in report
    assert "Policy comparison" in res.stdout and "report.html" in res.stdout


def test_run_on_redis_partitions(tmp_path: Path, built: None) -> None:
    """`run --store redis`: the partitions are redis-servers the app server caches in
    and the controller resizes within the budget."""
    exp = tmp_path / "tiny.yaml"
    # More data than the budget (20,000 keys of 16 KB), so the partitions fill and the
    # controller has space to move.
    synth = {"rate": 80, "params": {**TINY["trace"]["synth"]["params"], "keys": 20000, "mean-size": 16384}}
    exp.write_text(yaml.safe_dump({**TINY, "trace": {"synth": synth}}))
    out = tmp_path / "out"
    res = subprocess.run(cli_args("run", "--experiment", str(exp), "--out", str(out), "--quiet",
                                  "--policy", "robinhood", "--store", "redis"),
                         capture_output=True, text=True, timeout=200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    d = out / "robinhood"
    topo = yaml.safe_load((d / "topology.yaml").read_text())
    parts = topo["app_servers"][0]["partitions"]
    assert set(parts) == {"alpha", "beta"} and all("redis" in p and "addr" not in p for p in parts.values())
    assert sorted(p.name for p in (d / "logs").glob("redis-app0-*")) == ["redis-app0-alpha.log", "redis-app0-beta.log"]
    summary = json.loads((d / "replay" / "summary.json").read_text())
    # The 502s when beta is cut to 40 queries/s are the backend's, as on memcached: 4.5% of
    # the requests on a quiet machine, more on a busy one (the throttled backend's queue
    # grows while the cores are taken). Every other request is answered, and nothing else
    # fails: no timeout, no transport error, no other status.
    assert set(summary["status"]) <= {"200", "502"} and summary["errors"]["timeout"] == 0, summary
    assert summary["errors"]["transport"] == 0 and summary["errors"]["dropped"] == 0, summary
    assert summary["sent"] > 500 and summary["ok"] >= 0.8 * summary["sent"], summary
    result = json.loads((d / "result.json").read_text())
    assert all(h > 0.1 for h in result["hit_ratio"].values()), f"Redis partitions serve hits: {result['hit_ratio']}"
    ticks = [json.loads(line) for line in (d / "controller-app0.jsonl").read_text().splitlines()]
    assert len(ticks) >= 10
    for t in ticks:
        limits = [p["limit_bytes"] for p in t["partitions"].values() if p["up"]]
        assert sum(limits) <= 40 << 20, t
    assert {t["partitions"]["beta"]["limit_bytes"] for t in ticks} != {20 << 20}, "the controller resized Redis"
    assert leftovers(str(d / "logs")) == [], "every process of the run was stopped"


def test_bad_experiment_exits_2_and_starts_nothing(tmp_path: Path, built: None, gobin: Callable[[str], Path]) -> None:
    exp = tmp_path / "bad.yaml"
    exp.write_text(yaml.safe_dump({**TINY, "duration": "forever"}))
    res = subprocess.run(cli_args("run", "--experiment", str(exp), "--policy", "robinhood", "--out", str(tmp_path / "o")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert 'duration: "forever" is not a duration' in res.stderr
    assert not (tmp_path / "o").exists()
    res = subprocess.run(cli_args("compare", "--experiment", str(tmp_path / "nope.yaml"), "--policies", "robinhood"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "No such file" in res.stderr
    exp.write_text(yaml.safe_dump(TINY))
    res = subprocess.run(cli_args("compare", "--experiment", str(exp), "--policies", "robinhood,lru"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and f"--policies: 'lru' is not one of {', '.join(policies.names())}" in res.stderr
    res = subprocess.run(cli_args("compare", "--experiment", str(exp), "--policies", "robinhood,shared"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "'shared' is a cache mode, not an allocation policy" in res.stderr
    res = subprocess.run(cli_args("compare", "--experiment", str(exp), "--dispatch", "psychic"),
                         capture_output=True, text=True, timeout=60)
    known = ", ".join(dispatch_policies(str(gobin("appserver"))))
    assert res.returncode == 2 and f"dispatch policy 'psychic' is not one of {known}" in res.stderr


def test_up_with_prometheus(tmp_path: Path, built: None) -> None:
    exp = tmp_path / "tiny.yaml"
    exp.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    ready = tmp_path / "ready"
    # Output to a file, never a pipe nobody reads: a full pipe would block `up`.
    log = tmp_path / "up.log"
    with log.open("w") as fh:
        p = subprocess.Popen(cli_args("up", "--experiment", str(exp), "--policy", "robinhood", "--prometheus",
                                     "--out", str(out), "--ready-file", str(ready)),
                             stdout=fh, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=sigint_default)
    try:
        wait_ready_file(p, ready, "testbed up", timeout=120, log=log)
        cfg = yaml.safe_load((out / "robinhood" / "prometheus" / "prometheus.yml").read_text())
        addr = json.loads(ready.read_text())["prometheus"]
        jobs = {j["job_name"] for j in cfg["scrape_configs"]}
        assert jobs == {"rbcserver", "appserver", "backend", "controller"}
        # Every target up, and the per-partition allocation and RBC series present.
        deadline = time.monotonic() + 60
        while True:
            targets = prom.targets(addr) or []
            up = [t for t in targets if t.get("health") == "up"]
            alloc = prom.query(addr, "controller_partition_limit_bytes") or []
            rbc = prom.query(addr, "controller_partition_rbc") or []
            if targets and len(up) == len(targets) == 5 and len(alloc) == 2 and len(rbc) == 2:
                break
            assert time.monotonic() < deadline, (
                f"targets {[(t['labels'].get('job'), t.get('health'), t.get('lastError')) for t in targets]}, "
                f"allocation series {len(alloc)}, RBC series {len(rbc)}")
            time.sleep(1)
        assert {s["metric"]["partition"] for s in alloc} == {"alpha", "beta"}
        assert sum(float(s["value"][1]) for s in alloc) == 40 * 2**20
        assert prom.query(addr, "rbcserver_records_ingested_total") is not None
    finally:
        interrupt(p)
    assert p.returncode == 130
    assert leftovers(str(out / "robinhood" / "logs")) == []


def _one_kv_topology(a: dict[str, str]) -> str:
    """A topology of one kv backend and one partitioned app server on the addresses a."""
    return f"""
rbc_server: {{grpc: "{a['rbc_grpc']}", http: "{a['rbc_http']}", window: 2s}}
backends:
  - {{id: 0, name: kv0, type: kv, limits: {{workers: 2}}, replicas: [{{grpc: "{a['be_grpc']}", http: "{a['be_http']}"}}]}}
app_servers:
  - id: app0
    http: "{a['app']}"
    cache_budget_mb: 16
    partitions: {{kv0: "{a['mc']}"}}
    controller: {{policy: static, min_partition_mb: 16, interval: 500ms, metrics: "{a['ctl']}"}}
"""


def test_up_starts_a_topology_with_tokens_and_mutual_tls(tmp_path: Path, built: None, gobin: Callable[[str], Path],
                                                          free_address: Callable[[], str]) -> None:
    """`up --topology FILE` with auth and tls blocks written as docs/security.md writes
    them (paths relative to the file): the copy in the run folder still finds the
    secrets, the readiness checks speak HTTPS with the topology's CA and certificate,
    the endpoints it prints say https, and the started stack serves a request over
    mutual TLS with a token at the address it printed."""
    import ssl
    import urllib.request

    secrets = tmp_path / "conf" / "secrets"
    subprocess.run([gobin("devcerts"), "--out", secrets, "--callers", "app0,operator"], check=True,
                   capture_output=True, timeout=60)
    a = {k: free_address() for k in ("rbc_grpc", "rbc_http", "be_grpc", "be_http", "app", "mc", "ctl")}
    topo = tmp_path / "conf" / "topology.yaml"
    topo.write_text("""
auth: {tokens: secrets/tokens, token: "secrets/{id}.token"}
tls: {ca: secrets/ca.pem, cert: secrets/cert.pem, key: secrets/key.pem, client_auth: true}""" + _one_kv_topology(a))
    out, ready = tmp_path / "out", tmp_path / "ready"
    log = tmp_path / "up.log"
    with log.open("w") as fh:  # started from another folder: the relative paths are the file's, not the cwd's
        p = subprocess.Popen(cli_args("up", "--topology", str(topo), "--out", str(out), "--ready-file", str(ready)),
                             stdout=fh, stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_default,
                             cwd=tmp_path)
    try:
        wait_ready_file(p, ready, "testbed up --topology (auth, tls)", timeout=120, log=log)
        ctx = ssl.create_default_context(cafile=str(secrets / "ca.pem"))
        ctx.load_cert_chain(str(secrets / "cert.pem"), str(secrets / "key.pem"))
        token = (secrets / "operator.bearer").read_text().strip()
        printed = log.read_text()
        urls = re.findall(r"\b\w+://\S+", printed)
        assert urls and all(u.startswith("https://") for u in urls), printed
        assert f"app server app0: POST https://{a['app']}/v1/request" in printed, printed
        for want in (f"https://{a['rbc_http']}/v1/rbc", f"https://{a['ctl']}/metrics",
                     f"https://{a['be_http']}/admin/limits"):
            assert want in urls, printed
        body = json.dumps({"t": 0, "d": [{"kv0": {"S": [100], "U": ["k1"], "C": [1]}}]}).encode()
        req = urllib.request.Request(f"https://{a['app']}/v1/request", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            assert resp.status == 200
    finally:
        interrupt(p)
    assert leftovers(str(out / "logs")) == []
    # Its Prometheus would scrape without credentials: refused, before anything starts.
    res = subprocess.run(cli_args("up", "--topology", str(topo), "--prometheus", "--out", str(tmp_path / "o3")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--prometheus" in res.stderr and not (tmp_path / "o3").exists()


def test_up_starts_a_given_topology(tmp_path: Path, built: None, free_address: Callable[[], str]) -> None:
    """`up --topology FILE` starts the processes of an existing topology (every one
    reading that file); an `--id` that names no component is refused."""
    import urllib.request

    a = {k: free_address() for k in ("rbc_grpc", "rbc_http", "be_grpc", "be_http", "app", "mc", "ctl")}
    topo = tmp_path / "topology.yaml"
    topo.write_text(_one_kv_topology(a))
    out, ready = tmp_path / "out", tmp_path / "ready"
    log = tmp_path / "up.log"  # a file, never a pipe nobody reads: a full pipe would block `up`
    with log.open("w") as fh:
        p = subprocess.Popen(cli_args("up", "--topology", str(topo), "--out", str(out), "--ready-file", str(ready)),
                             stdout=fh, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=sigint_default)
    try:
        wait_ready_file(p, ready, "testbed up --topology", timeout=90, log=log)
        assert f"app server app0: POST http://{a['app']}/v1/request" in log.read_text()  # no tls block: http
        body = json.dumps({"t": 0, "d": [{"kv0": {"S": [100], "U": ["k1"], "C": [1]}}]}).encode()
        deadline = time.monotonic() + 10  # the first request fills the cache asynchronously
        while True:
            req = urllib.request.Request(f"http://{a['app']}/v1/request", data=body, method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200
            metrics = urllib.request.urlopen(f"http://{a['app']}/metrics", timeout=5).read().decode()
            if 'appserver_cache_hits_total{backend="kv0"} 0' not in metrics:
                break
            assert time.monotonic() < deadline, "no cache hit: the memcached partition is not in use"
            time.sleep(0.2)
        assert urllib.request.urlopen(f"http://{a['ctl']}/metrics", timeout=5).status == 200
    finally:
        interrupt(p)
    assert leftovers(str(out / "logs")) == []
    # --id names a component of the file, or it is refused before anything starts.
    res = subprocess.run(cli_args("up", "--topology", str(topo), "--id", "nope", "--out", str(tmp_path / "o2")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--id: 'nope' is not rbc_server, a backend or an app server" in res.stderr
    # A backend given by id and name alone (the attach form) is none the testbed can start.
    ext = tmp_path / "external.yaml"
    ext.write_text(topo.read_text().replace("backends:\n", "backends:\n  - {id: 1, name: ext}\n")
                   .replace("partitions: {kv0:", f"partitions: {{ext: \"{free_address()}\", kv0:")
                   .replace("cache_budget_mb: 16", "cache_budget_mb: 32"))
    res = subprocess.run(cli_args("up", "--topology", str(ext), "--out", str(tmp_path / "o4")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "backend 'ext' has no type or no replicas" in res.stderr, res.stderr
    assert not (tmp_path / "o4" / "logs").exists() or not list((tmp_path / "o4" / "logs").iterdir())
