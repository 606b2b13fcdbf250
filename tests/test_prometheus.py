"""Every component with the tools operators use (docs/security.md, "Scraping with
Prometheus, calling with curl"): the RBC server, a backend, an app server and its
controller run on loopback with tokens and mutual TLS, started once for the module.

- `promtool check metrics` (Debian's, /usr/bin/promtool) passes each component's real
  /metrics page, and `tracegen replay --metrics`'s, after traffic has made every
  labelled series appear; any problem it prints fails the test.
- A real Prometheus (/usr/bin/prometheus) given the scrape job docs/security.md shows
  (taken from the page, only the targets' addresses replaced) finds every target up
  with the bare `prometheus.bearer` file devcerts writes; the same file holding the
  `name token` line, or a wrong token, makes every target down with 401.
- The curl line the page shows reads every component's /metrics.
"""
from __future__ import annotations

import json
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import REPO, Procs, free_addr, go_binary, wait_tcp

SECURITY_MD = REPO / "docs" / "security.md"
# The targets the documented scrape job names, and which of the stack's addresses each
# one stands for.
DOC_TARGETS = {"rbc.internal:7071": "rbc", "backend-0.internal:7200": "backend",
               "app0.internal:8080": "appserver", "app0.internal:9100": "controller"}
DOC_CURL_TARGET = "rbc.internal:7071"


def doc_block(kind: str) -> str:
    """The fenced block of `kind` that follows the marker naming this test in
    docs/security.md (the text operators copy)."""
    text = SECURITY_MD.read_text()
    marker = f"<!-- tests/test_prometheus.py runs the next {kind} block -->"
    assert text.count(marker) == 1, f"docs/security.md lacks the marker {marker!r}"
    m = re.compile(r"```" + kind + r"\n(.*?)```", re.S).search(text, text.index(marker))
    assert m is not None, f"no ```{kind} block after {marker!r}"
    return m.group(1)


def need(tool: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        pytest.fail(f"{tool} is not installed: run 'make deps' (as root it installs Debian's prometheus)")
    return exe


@dataclass
class Stack:
    dir: Path
    secrets: Path
    procs: Procs
    addr: dict[str, str] = field(default_factory=dict)  # rbc, rbc_grpc, backend, appserver, controller
    topology: Path = Path()

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.secrets / "ca.pem"))
        ctx.load_cert_chain(self.secrets / "cert.pem", self.secrets / "key.pem")
        return ctx

    def get(self, addr: str, path: str, caller: str = "operator") -> bytes:
        """GET https://addr/path with the caller's bare token, over mutual TLS."""
        token = (self.secrets / f"{caller}.bearer").read_text().strip()
        req = urllib.request.Request(f"https://{addr}{path}", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, context=self.ssl_context(), timeout=5) as r:
            return r.read()

    def logs(self) -> str:
        return "\n".join(f"--- {' '.join(map(str, p.args))[:100]}\n{self.procs.log(p)[-2000:]}"
                         for p, _ in self.procs.procs)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("stack")
    (d / "logs").mkdir()
    s = Stack(dir=d, secrets=d / "secrets", procs=Procs(d / "logs"))
    subprocess.run([go_binary("devcerts"), "--out", s.secrets, "--callers", "app0,operator,prometheus"],
                   check=True, capture_output=True)
    try:
        _, mc = s.procs.memcached(16)
        s.addr = {k: free_addr() for k in ("rbc_grpc", "rbc", "backend_grpc", "backend", "appserver", "controller")}
        a = s.addr
        s.topology = d / "topology.yaml"
        s.topology.write_text(f"""
rbc_server: {{grpc: "{a['rbc_grpc']}", http: "{a['rbc']}", window: 5s}}
backends:
  - {{id: 0, name: ratings, type: kv, replicas: [{{grpc: "{a['backend_grpc']}", http: "{a['backend']}"}}]}}
app_servers:
  - id: app0
    http: "{a['appserver']}"
    cache_mode: partitioned
    cache_budget_mb: 16
    partitions: {{ratings: "{mc}"}}
    controller: {{interval: 500ms, min_partition_mb: 8, rbc_timeout: 2s}}
auth: {{tokens: secrets/tokens, token: "secrets/{{id}}.token"}}
tls: {{ca: secrets/ca.pem, cert: secrets/cert.pem, key: secrets/key.pem, client_auth: true}}
""")
        topo = str(s.topology)
        started = [
            (s.procs.start([go_binary("rbcserver"), "--topology", topo], name="rbcserver"), a["rbc"]),
            (s.procs.start([go_binary("backend"), "--topology", topo, "--id", "ratings"], name="backend"), a["backend"]),
            (s.procs.start([go_binary("appserver"), "--topology", topo, "--id", "app0"], name="appserver"),
             a["appserver"]),
            (s.procs.start([sys.executable, "-m", "robinhood_controller.cli", "run", "--topology", topo,
                            "--id", "app0", "--metrics", a["controller"]], name="controller"), a["controller"]),
        ]
        for p, addr in started:
            wait_tcp(addr, timeout=30, proc=p)
        yield s
    finally:
        s.procs.stop_all()


def wait_for(what: str, cond: Callable[[], object], stack: Stack, timeout: float = 15.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = cond()
        except (OSError, urllib.error.URLError):
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:g}s\n{stack.logs()}")
        time.sleep(0.2)


def promtool_problems(page: bytes) -> str:
    """What `promtool check metrics` prints about a page ('' when it passes)."""
    r = subprocess.run([need("promtool"), "check", "metrics"], input=page, capture_output=True, timeout=30)
    out = (r.stdout + r.stderr).decode(errors="replace").strip()
    if r.returncode != 0 and not out:
        out = f"exit status {r.returncode}"
    return out


def test_promtool_passes_every_metrics_page(stack: Stack) -> None:
    """Traffic through the stack (tracegen replay), a default GetRBC and a controller
    tick make the labelled series appear; then each page must pass promtool."""
    trace = stack.dir / "trace.jsonl"
    trace.write_text("".join(json.dumps({"t": i, "d": [{"ratings": {"S": [100, 200], "U": [f"k{i % 7}", f"j{i % 5}"],
                                                                    "C": [1, 1]}}]}) + "\n"
                             for i in range(50)))
    replay_metrics = free_addr()
    replay = stack.procs.start([go_binary("tracegen"), "replay", "--topology", stack.topology, "--trace", trace,
                                "--out", stack.dir / "replay", "--rate", "100", "--loop", "--duration", "20s",
                                "--metrics", replay_metrics], name="replay")
    pages: dict[str, bytes] = {}
    try:
        def replay_page() -> bytes | None:
            with urllib.request.urlopen(f"http://{replay_metrics}/metrics", timeout=5) as r:
                body = r.read()
            return body if re.search(rb"^replay_responses_total\{.*\} [1-9]", body, re.M) else None
        pages["replay"] = wait_for("tracegen replay's /metrics did not count a response", replay_page, stack)

        def rbc_page() -> bytes | None:
            stack.get(stack.addr["rbc"], "/v1/rbc")  # the default parameters publish the per-backend gauges
            body = stack.get(stack.addr["rbc"], "/metrics")
            return body if b"\nrbcserver_blocking_requests{" in body else None
        pages["rbcserver"] = wait_for("the RBC server's /metrics did not show rbcserver_blocking_requests",
                                      rbc_page, stack)
    finally:
        Procs.stop(replay)
    pages["appserver"] = stack.get(stack.addr["appserver"], "/metrics")
    pages["backend"] = stack.get(stack.addr["backend"], "/metrics")
    pages["controller"] = wait_for(
        "the controller's /metrics did not show its partition",
        lambda: (lambda b: b if b'controller_partition_up{partition="ratings"}' in b else None)(
            stack.get(stack.addr["controller"], "/metrics", caller="prometheus")), stack)

    # Each page has its component's series (so that promtool sees them), then passes.
    expect = {"rbcserver": b"rbcserver_records_ingested_total", "appserver": b"appserver_requests_total",
              "backend": b"backend_", "controller": b"controller_ticks_total", "replay": b"replay_requests_sent_total"}
    problems = {}
    for name, page in pages.items():
        assert expect[name] in page, f"{name}'s /metrics lacks {expect[name]!r}:\n{page[:2000]!r}"
        if out := promtool_problems(page):
            problems[name] = out
    assert not problems, "promtool check metrics:\n" + "\n".join(f"{k}: {v}" for k, v in problems.items())


def prometheus_targets(addr: str) -> list[dict]:
    with urllib.request.urlopen(f"http://{addr}/api/v1/targets?state=active", timeout=5) as r:
        return json.loads(r.read())["data"]["activeTargets"]


def test_prometheus_scrapes_with_the_documented_job(stack: Stack) -> None:
    job = doc_block("yaml")
    for doc, key in DOC_TARGETS.items():
        assert job.count(f'"{doc}"') == 1, f"the documented job no longer names {doc}"
        job = job.replace(f'"{doc}"', f'"{stack.addr[key]}"')
    assert ".internal" not in job, "the documented job names a target this test does not start"
    cfg = stack.dir / "prometheus.yml"  # beside secrets/: the job's relative paths resolve against it
    cfg.write_text("global: {scrape_interval: 1s, scrape_timeout: 1s}\n" + job)
    check = subprocess.run([need("promtool"), "check", "config", cfg], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr

    addr = free_addr()
    prom = stack.procs.start([need("prometheus"), f"--config.file={cfg}", f"--storage.tsdb.path={stack.dir / 'prom'}",
                              f"--web.listen-address={addr}", "--log.level=warn"], name="prometheus")
    bearer = stack.secrets / "prometheus.bearer"
    good = bearer.read_text()
    try:
        wait_tcp(addr, timeout=20, proc=prom)

        def all_targets(pred: Callable[[dict], bool]) -> list[dict] | None:
            ts = prometheus_targets(addr)
            if len(ts) == len(DOC_TARGETS) and all(pred(t) for t in ts):
                return ts
            return None

        def state() -> str:
            try:
                return json.dumps([{k: t.get(k) for k in ("scrapeUrl", "health", "lastError")}
                                   for t in prometheus_targets(addr)], indent=1)
            except OSError as e:
                return str(e)

        try:
            ts = wait_for("every target up", lambda: all_targets(lambda t: t["health"] == "up" and not t["lastError"]),
                          stack, timeout=20)
            assert sorted(t["labels"]["component"] for t in ts) == ["appserver", "backend", "controller", "rbcserver"]
            assert all(t["scrapeUrl"].startswith("https://") for t in ts)
            # Prometheus reads credentials_file at every scrape: the `name token` line
            # (what docs/security.md used to hand it), then a token no server knows.
            for wrong in ((stack.secrets / "prometheus.token").read_text(), "x" * 43 + "\n"):
                bearer.write_text(wrong)
                wait_for("every target down with 401", lambda: all_targets(
                    lambda t: t["health"] == "down" and "401" in t["lastError"]), stack, timeout=10)
            bearer.write_text(good)
            wait_for("every target up again", lambda: all_targets(lambda t: t["health"] == "up"), stack, timeout=10)
        except AssertionError as e:
            raise AssertionError(f"{e}\nPrometheus's targets: {state()}\n{stack.procs.log(prom)[-3000:]}") from None
    finally:
        bearer.write_text(good)
        Procs.stop(prom)


def test_the_documented_curl_line_reads_every_page(stack: Stack) -> None:
    line = doc_block("sh").strip()
    assert line.count(DOC_CURL_TARGET) == 1 and "\n" not in line, line
    for key in ("rbc", "backend", "appserver", "controller"):
        r = subprocess.run(["bash", "-c", line.replace(DOC_CURL_TARGET, stack.addr[key])], cwd=stack.dir,
                           capture_output=True, timeout=30)
        assert r.returncode == 0, f"{key}: curl exit {r.returncode}: {r.stderr.decode(errors='replace')}"
        assert b"# TYPE " in r.stdout, f"{key}: not a metrics page: {r.stdout[:300]!r}"
    # The `name token` file in its place is refused, as Prometheus's was.
    old = line.replace("operator.bearer", "operator.token").replace(DOC_CURL_TARGET, stack.addr["rbc"])
    r = subprocess.run(["bash", "-c", old], cwd=stack.dir, capture_output=True, timeout=30)
    assert r.returncode == 22 and b"401" in r.stderr, (r.returncode, r.stderr)


def test_probes_without_a_client_certificate_read_healthz_only(stack: Stack) -> None:
    """Under mutual TLS a Kubernetes kubelet's HTTPS probe presents no client certificate:
    /healthz answers it on every component; every other path still needs a certificate
    (403), whatever token comes with it."""
    ctx = ssl.create_default_context(cafile=str(stack.secrets / "ca.pem"))  # verifies the server, no client cert
    token = (stack.secrets / "prometheus.bearer").read_text().strip()
    for key in ("rbc", "backend", "appserver", "controller"):
        with urllib.request.urlopen(f"https://{stack.addr[key]}/healthz", context=ctx, timeout=5) as r:
            assert r.status == 200, key
        req = urllib.request.Request(f"https://{stack.addr[key]}/metrics", headers={"Authorization": f"Bearer {token}"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, context=ctx, timeout=5)
        assert e.value.code == 403, (key, e.value.code)
        assert stack.get(stack.addr[key], "/metrics", caller="prometheus")  # with the certificate: served


def metric(page: bytes, name: str) -> float:
    m = re.search(rb"^" + re.escape(name.encode()) + rb" ([0-9.e+]+)$", page, re.M)
    return float(m.group(1)) if m else 0.0


def test_rotating_every_token_under_load(stack: Stack) -> None:
    """docs/security.md's rotation, with every component running and a replay sending
    requests throughout: new tokens added to the servers' file and SIGHUP to every
    server (the controller among them: it stays up), the callers' own files rewritten
    (each re-reads its own within a second), the old tokens removed and SIGHUP again. The
    old tokens are then refused everywhere, the new ones accepted, the controller still
    reads the RBC with its new token, and no request of the replay was refused. Runs
    last in this module: it changes the stack's tokens."""
    procs = {name: p for p, name in ((p, p.args[0].rsplit("/", 1)[-1]) for p, _ in stack.procs.procs)}
    ctl = next(p for p, _ in stack.procs.procs if "robinhood_controller.cli" in p.args)
    servers = [procs["rbcserver"], procs["backend"], procs["appserver"], ctl]
    trace = stack.dir / "rotation-trace.jsonl"
    trace.write_text("".join(json.dumps({"t": i, "d": [{"ratings": {"S": [100], "U": [f"r{i % 11}"], "C": [1]}}]})
                             + "\n" for i in range(50)))
    replay = stack.procs.start([go_binary("tracegen"), "replay", "--topology", stack.topology, "--trace", trace,
                                "--out", stack.dir / "rotation-replay", "--rate", "50", "--loop",
                                "--duration", "30s"], name="rotation-replay")
    tokens_file = stack.secrets / "tokens"
    old = {line.split()[0]: line.split()[1] for line in tokens_file.read_text().splitlines()
           if line.strip() and not line.startswith("#")}
    new = {name: f"rotated-{name}-" + "x" * 24 + str(i) for i, name in enumerate(old)}
    old_prom = old["prometheus"]

    def answered() -> float:  # requests the app server answered (its counter, read as the operator)
        page = stack.get(stack.addr["appserver"], "/metrics", caller="prometheus")
        return sum(float(v) for v in re.findall(rb"^appserver_requests_total(?:\{[^}]*\})? ([0-9.e+]+)$", page, re.M))

    def ticks() -> float:
        return metric(stack.get(stack.addr["controller"], "/metrics", caller="prometheus"), "controller_ticks_total")

    def reloads() -> list[int]:  # SIGHUP re-reads each server has logged
        return [stack.procs.log(p).count("SIGHUP: credentials re-read") + stack.procs.log(p).count("event=reloaded")
                for p in servers]

    start = answered()
    wait_for("the replay's first requests", lambda: answered() >= start + 20, stack, timeout=60)
    # 1. Both tokens for every caller; SIGHUP every server, and wait until each says it re-read.
    tokens_file.write_text("".join(f"{n} {old[n]}\n{n} {new[n]}\n" for n in old))
    before = reloads()
    for p in servers:
        p.send_signal(signal.SIGHUP)
    wait_for("every server to re-read its credentials", lambda: all(a > b for a, b in zip(reloads(), before)), stack,
             timeout=60)
    # 2. The callers' own files. A caller re-reads its file on its first call at least a
    #    second after its last look: wait for that second, then for a call of each caller
    #    (a request through the app server, which calls the backend and the RBC server; a
    #    controller tick, which reads the RBC server).
    for n, tok in new.items():
        (stack.secrets / f"{n}.token").write_text(f"{n} {tok}\n")
        (stack.secrets / f"{n}.bearer").write_text(tok + "\n")
    written = time.monotonic()
    wait_for("a second since the callers' files changed", lambda: time.monotonic() - written > 1.1, stack)
    a0, t0 = answered(), ticks()
    wait_for("a request and a tick after that second", lambda: answered() > a0 + 5 and ticks() > t0 + 1, stack,
             timeout=60)
    # 3. The old tokens out; SIGHUP again.
    tokens_file.write_text("".join(f"{n} {new[n]}\n" for n in new))
    before = reloads()
    for p in servers:
        p.send_signal(signal.SIGHUP)
    wait_for("every server to re-read its credentials again", lambda: all(a > b for a, b in zip(reloads(), before)),
             stack, timeout=60)

    assert ctl.poll() is None, f"the controller exited with {ctl.returncode} on SIGHUP\n{stack.logs()}"
    assert "event=reloaded signal=SIGHUP reread=tokens,tls,rbc_token,rbc_tls" in stack.procs.log(ctl)

    def status(addr: str, token: str) -> int:
        req = urllib.request.Request(f"https://{addr}/metrics", headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, context=stack.ssl_context(), timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    for key in ("rbc", "backend", "appserver", "controller"):
        assert status(stack.addr[key], old_prom) == 401, f"{key} still takes the revoked token"
        assert status(stack.addr[key], new["prometheus"]) == 200, f"{key} refuses the new token"
    # The controller keeps reading the RBC server with its new token: ticks go on and no
    # RBC call is refused from here on.
    page = stack.get(stack.addr["controller"], "/metrics", caller="prometheus")
    ticks, refused = metric(page, "controller_ticks_total"), metric(page, 'controller_errors_total{kind="rbc_error"}')
    wait_for("the controller's ticks to go on", lambda: metric(
        stack.get(stack.addr["controller"], "/metrics", caller="prometheus"), "controller_ticks_total") >= ticks + 3,
        stack, timeout=10)
    page = stack.get(stack.addr["controller"], "/metrics", caller="prometheus")
    assert metric(page, 'controller_errors_total{kind="rbc_error"}') == refused, "RBC calls refused after rotation"
    # The replay's requests: none refused by the app server while the tokens turned over.
    assert replay.wait(timeout=90) == 0, stack.procs.log(replay)
    summary = json.loads((stack.dir / "rotation-replay" / "summary.json").read_text())
    assert summary["sent"] > 300 and not any(summary["errors"].values()) and summary["answered"] == summary["sent"], summary
