from __future__ import annotations

import json
from pathlib import Path

import pytest

from robinhood_testbed import analysis, metrics, plots, report
from robinhood_testbed.experiment import Experiment


def test_nearest_rank() -> None:
    v = sorted(float(x) for x in range(1, 101))
    assert analysis.nearest_rank(v, 50) == 50
    assert analysis.nearest_rank(v, 99) == 99
    assert analysis.nearest_rank(v, 99.5) == 100
    assert analysis.nearest_rank([7.0], 1) == 7
    assert analysis.nearest_rank([], 50) is None
    # 98.5% of 1000 is rank 985 exactly, not 986 through float error.
    w = [float(x) for x in range(1, 1001)]
    assert analysis.nearest_rank(w, 98.5) == 985


def test_parse_prometheus_and_quantile() -> None:
    text = """# HELP x
appserver_cache_hits_total{backend="a"} 30
appserver_cache_hits_total{backend="b"} 10
appserver_cache_misses_total{backend="a"} 10
h_bucket{le="0.1"} 50
h_bucket{le="0.2"} 100
h_bucket{le="+Inf"} 100
weird{l="a\\"b"} 1
"""
    s = metrics.parse_prometheus(text)
    assert metrics.by_label(s, "appserver_cache_hits_total", "backend") == {"a": 30, "b": 10}
    assert metrics.total(s, "appserver_cache_misses_total", backend="a") == 10
    assert metrics.histogram_quantile(s, "h", 0.5) == pytest.approx(0.1)
    assert metrics.histogram_quantile(s, "h", 0.75) == pytest.approx(0.15)
    assert s["weird"][0][0]["l"] == 'a"b'


def fake_run(root: Path, policy: str, p99s: list[float], lat_ms: list[float]) -> Path:
    d = root / policy
    (d / "replay").mkdir(parents=True)
    series = [{"t_s": 10.0 * (i + 1), "n": 100, "p50_ms": v / 5, "p90_ms": v / 2, "p99_ms": v}
              for i, v in enumerate(p99s)]
    (d / "replay" / "summary.json").write_text(json.dumps({
        "requests": len(lat_ms), "errors": {"timeout": 1},
        "slo": {"slo_ms": 150, "step_s": 10, "window_s": 10, "warmup_s": 20, "series": series}}))
    rows = ["send_ms,latency_us,status,blocking_backend,app_server"]
    rows += [f"{25000 + i},{int(v * 1000)},200,a,app0" for i, v in enumerate(lat_ms)]
    rows += ["1000,999999,200,a,app0"]  # in the warm-up: ignored
    (d / "replay" / "requests.csv").write_text("\n".join(rows) + "\n")
    (d / "result.json").write_text(json.dumps({"policy": policy, "hit_ratio": {"a": 0.5}, "overall_hit_ratio": 0.5}))
    (d / "rbc.jsonl").write_text("\n".join(json.dumps({"t": t, "rbc": {"a": 3, "b": 1}}) for t in range(5)) + "\n")
    if policy == "robinhood":
        ticks = [{"unix": 100.0 + i, "partitions": {"a": {"limit_bytes": (20 + i) << 20}, "b": {"limit_bytes": (20 - i) << 20}}}
                 for i in range(5)]
        (d / "controller-app0.jsonl").write_text("\n".join(json.dumps(t) for t in ticks) + "\n")
    return d


def test_comparison_plots_and_report(tmp_path: Path) -> None:
    # Series points at t = 10, 20, 30, 40; warm-up 20 s leaves 20, 30, 40.
    fake_run(tmp_path, "robinhood", [500, 100, 120, 140], [float(x) for x in range(1, 101)])
    fake_run(tmp_path, "static", [500, 100, 200, 300], [float(x) * 2 for x in range(1, 101)])
    runs = [analysis.PolicyRun.load(tmp_path / p) for p in ("robinhood", "static")]
    rows = analysis.comparison_rows(runs)
    assert rows[0]["slo_violation_pct"] == 0.0
    assert rows[1]["slo_violation_pct"] == pytest.approx(200 / 3)
    assert rows[1]["max_p99_ms"] == 300
    assert rows[0]["p50_ms"] == 50 and rows[1]["p90_ms"] == 180
    assert rows[0]["requests"] == 100 and rows[0]["errors"] == 1
    figs = plots.all_plots(runs, tmp_path)
    assert set(figs) == {"p99", "slo", "allocation", "rbc"}
    for f in figs.values():
        assert f.stat().st_size > 5000 and f.read_bytes()[:4] == b"\x89PNG"
    exp = Experiment.model_validate({
        "name": "t", "duration": 60, "backends": [{"name": "a", "type": "kv"}, {"name": "b", "type": "kv"}],
        "cache": {"budget_mb": 32}, "trace": {"synth": {"rate": 10}}})
    out = report.write_report(exp, runs, rows, figs, tmp_path / "report.html")
    text = out.read_text()
    for needle in ("robinhood", "static", "p99_over_time.png", "SLO violation %", "66.7"):
        assert needle in text
    md = analysis.markdown_table(rows)
    assert md.count("\n") == 3 and "| robinhood | 0.0 |" in md
