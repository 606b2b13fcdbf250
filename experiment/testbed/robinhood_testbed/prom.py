"""A real Prometheus server (Debian's package) scraping every component of a deployment."""
from __future__ import annotations

import json
import shutil
import urllib.parse
from typing import TYPE_CHECKING, Any

import yaml

from . import metrics
from .procs import StartError, wait_http

if TYPE_CHECKING:
    from .deploy import Deployment


def scrape_config(jobs: dict[str, list[str]], interval: str = "2s") -> dict[str, Any]:
    """A Prometheus configuration with one job per component kind."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in jobs.items() if targets
        ],
    }


def start_prometheus(dep: "Deployment") -> str:
    """Start Prometheus for `dep` and return its address once it is ready."""
    exe = shutil.which("prometheus")
    if exe is None:
        raise StartError("prometheus is not installed: run 'make deps' (as root it installs Debian's prometheus)")
    addr = dep.ports.addr()
    pdir = dep.run_dir / "prometheus"
    (pdir / "data").mkdir(parents=True, exist_ok=True)
    cfg = pdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(scrape_config(dep.ep.scrape_targets()), sort_keys=False))
    proc = dep.sup.start("prometheus", [
        exe, f"--config.file={cfg}", f"--storage.tsdb.path={pdir / 'data'}",
        f"--web.listen-address={addr}", "--storage.tsdb.retention.time=1d", "--log.level=warn"])
    wait_http(proc, f"http://{addr}/-/ready")
    return addr


def query(addr: str, promql: str) -> list[dict[str, Any]] | None:
    """Instant query through Prometheus's HTTP API; None when it does not answer."""
    body = metrics.fetch(f"http://{addr}/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=3)
    if body is None:
        return None
    data = json.loads(body)
    if data.get("status") != "success":
        return None
    return data["data"]["result"]


def targets(addr: str) -> list[dict[str, Any]] | None:
    """Active scrape targets with their health."""
    body = metrics.fetch(f"http://{addr}/api/v1/targets", timeout=3)
    if body is None:
        return None
    return json.loads(body)["data"]["activeTargets"]
