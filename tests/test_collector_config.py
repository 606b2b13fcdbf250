"""docs/opentelemetry.md shows deploy/otel/collector.yaml exactly as it is: the file a
real Collector runs in `make collector-check` (tests/e2e/collector_test.go), and a valid
Collector configuration by its shape."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
FILE = REPO / "deploy" / "otel" / "collector.yaml"


def test_the_docs_show_the_tested_file() -> None:
    page = (REPO / "docs" / "opentelemetry.md").read_text()
    m = re.search(r"This is `deploy/otel/collector.yaml`.*?```yaml\n(.*?)```", page, re.S)
    assert m, "docs/opentelemetry.md lost its Collector configuration block"
    assert m.group(1) == FILE.read_text(), "docs/opentelemetry.md and deploy/otel/collector.yaml differ"


def test_the_pipeline_sends_traces_to_the_rbc_server() -> None:
    cfg = yaml.safe_load(FILE.read_text())
    traces = cfg["service"]["pipelines"]["traces"]
    assert traces["exporters"] == ["otlp_grpc/robinhood"] and traces["receivers"] == ["otlp"]
    exp = cfg["exporters"]["otlp_grpc/robinhood"]
    assert exp["headers"]["authorization"].startswith("Bearer ${env:") and "ca_file" in exp["tls"]
    assert "compression" not in exp  # the exporter's default, gzip: what the test exercises
    # Mutual TLS (client_auth: true) needs the Collector's certificate; unset without it.
    assert exp["tls"]["cert_file"] == "${env:ROBINHOOD_CERT:-}" and exp["tls"]["key_file"] == "${env:ROBINHOOD_KEY:-}"


def test_the_documented_rbcserver_line_takes_the_collectors_caller() -> None:
    # Without --otlp-callers, a topology's RBC server takes OTLP only from a caller
    # named otlp: a Collector sending the collector token would lose every trace.
    page = (REPO / "docs" / "opentelemetry.md").read_text()
    line = next(ln for ln in page.splitlines() if ln.startswith("rbcserver --topology"))
    assert "--otlp-callers collector" in line
    # The page's devcerts line makes the collector caller, whose collector.bearer it names.
    assert "collector.bearer" in page
    devcerts = re.findall(r"`(bin/devcerts [^`]*)`", page.replace("\n", " "))
    assert devcerts and all("collector" in c.split("--callers ", 1)[1].split()[0].split(",") for c in devcerts), devcerts
