from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from robinhood_testbed import analysis, metrics, plots, report
from robinhood_common.experiment import from_document


def test_parse_prometheus() -> None:
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
    assert s["weird"][0][0]["l"] == 'a"b'


def fake_run(root: Path, policy: str, p99s: list[float], lat_ms: list[float]) -> Path:
    """A run folder as the runner leaves it; lat_ms = [P50, P90, P99] after the warm-up."""
    d = root / policy
    (d / "replay").mkdir(parents=True)
    series = [{"t_s": 10.0 * (i + 1), "n": 100, "p50_ms": v / 5, "p90_ms": v / 2, "p99_ms": v}
              for i, v in enumerate(p99s)]
    counted = [v for i, v in enumerate(p99s) if 10.0 * (i + 1) >= 20]
    (d / "replay" / "summary.json").write_text(json.dumps({
        "sent": 100, "dropped": 2, "errors": {"timeout": 1},
        "latency_ms_after_warmup": {"n": 97, "p50": lat_ms[0], "p90": lat_ms[1], "p99": lat_ms[2]},
        "slo": {"slo_ms": 150, "step_s": 10, "window_s": 10, "warmup_s": 20, "points_counted": len(counted),
                "violation_pct": 100.0 * sum(v > 150 for v in counted) / len(counted), "series": series}}))
    (d / "result.json").write_text(json.dumps({"policy": policy, "hit_ratio": {"a": 0.5}, "overall_hit_ratio": 0.5}))
    (d / "rbc.jsonl").write_text("\n".join(json.dumps({"t": t, "rbc": {"a": 3, "b": 1}}) for t in range(5)) + "\n")
    if policy == "robinhood":
        ticks = [{"unix": 100.0 + i, "partitions": {"a": {"limit_bytes": (20 + i) << 20}, "b": {"limit_bytes": (20 - i) << 20}}}
                 for i in range(5)]
        (d / "controller-app0.jsonl").write_text("\n".join(json.dumps(t) for t in ticks) + "\n")
    return d


def test_comparison_plots_and_report(tmp_path: Path) -> None:
    # Series points at t = 10, 20, 30, 40; warm-up 20 s leaves 20, 30, 40.
    fake_run(tmp_path, "robinhood", [500, 100, 120, 140], [50.0, 90.0, 99.0])
    fake_run(tmp_path, "static", [500, 100, 200, 300], [100.0, 180.0, 198.0])
    runs = [analysis.PolicyRun.load(tmp_path / p) for p in ("robinhood", "static")]
    rows = analysis.comparison_rows(runs)
    assert rows[0]["slo_violation_pct"] == 0.0
    assert rows[1]["slo_violation_pct"] == pytest.approx(200 / 3)
    assert rows[1]["max_p99_ms"] == 300
    assert rows[0]["p50_ms"] == 50 and rows[1]["p90_ms"] == 180
    assert rows[0]["requests"] == 100 and rows[0]["errors"] == 3
    figs = plots.all_plots(runs, tmp_path)
    assert set(figs) == {"p99", "slo", "allocation", "rbc"}
    for f in figs.values():
        assert f.stat().st_size > 5000 and f.read_bytes()[:4] == b"\x89PNG"
    exp = from_document({
        "name": "t", "duration": "60s", "backends": [{"name": "a", "type": "kv"}, {"name": "b", "type": "kv"}],
        "cache": {"budget_mb": 32}, "trace": {"synth": {"rate": 10}}})
    out = report.write_report(exp, runs, rows, figs, tmp_path / "report.html")
    text = out.read_text()
    for needle in ("robinhood", "static", "p99_over_time.png", "SLO viol. %", "66.7"):
        assert needle in text
    md = analysis.markdown_table(rows)
    assert md.count("\n") == 3 and "| robinhood | 0.0 |" in md


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_eight_arms_stay_readable(tmp_path: Path) -> None:
    # Eight arms (every registered policy and the shared cache): the P99 plot becomes one panel
    # per arm, and the per-arm figures wrap at four panels a row instead of growing without bound.
    arms = ["robinhood", "static", "fair++", "lama++", "cliffhanger++", "tao++", "oracle", "shared"]
    for k, arm in enumerate(arms):
        d = fake_run(tmp_path, arm, [500, 100 + k, 120 + 2 * k, 140], [50.0, 90.0, 99.0])
        if arm != "robinhood" and arm != "shared":  # every policy leaves an allocation timeline
            (d / "controller-app0.jsonl").write_text(
                (tmp_path / "robinhood" / "controller-app0.jsonl").read_text() if (tmp_path / "robinhood").exists() else "")
    runs = [analysis.PolicyRun.load(tmp_path / a) for a in arms]
    figs = plots.all_plots(runs, tmp_path)
    assert set(figs) == {"p99", "slo", "allocation", "rbc"}
    w, h = _png_size(figs["p99"])
    assert h > 500 and w < 2000, (w, h)  # two rows of four panels, not one crowded axis
    w, h = _png_size(figs["allocation"])
    assert w <= 4 * 5.0 * 110 + 10 and h > 2 * 3 * 110, (w, h)  # seven controllers: 4 + 3 panels
    w, _ = _png_size(figs["rbc"])
    assert w <= 4 * 4.5 * 110 + 10
    colors = {to_hex(plots._color(a, i)) for i, a in enumerate(arms)}
    assert len(colors) == len(arms), "every arm has its own color"
    assert plots._color("fair++", 2) == "#9467bd", "a policy named with ++ keeps its registered color"
    assert plots.ONE_AXIS_MAX < len(arms)


def test_allocation_panels_share_one_y_axis_from_zero(tmp_path: Path) -> None:
    # A flat 40 MB split and one moving 20-90 MB: both panels span 0 to the largest limit.
    for name, limits in (("static", [(40, 40)] * 3), ("robinhood", [(40, 40), (20, 60), (90, 10)])):
        d = fake_run(tmp_path, name, [100, 110], [50.0, 90.0, 99.0])
        (d / "controller-app0.jsonl").write_text("".join(
            json.dumps({"unix": 100 + 10 * i, "partitions": {"a": {"limit_bytes": a << 20}, "b": {"limit_bytes": b << 20}}})
            + "\n" for i, (a, b) in enumerate(limits)))
    runs = [analysis.PolicyRun.load(tmp_path / p) for p in ("static", "robinhood")]
    fig = plots.allocation_figure(runs)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    try:
        assert len(axes) == 2
        assert {ax.get_ylim() for ax in axes} == {(0.0, 90 * 1.05)}
        # The same backend has the same color in both panels.
        assert [ln.get_color() for ln in axes[0].lines] == [ln.get_color() for ln in axes[1].lines]
    finally:
        plots.plt.close(fig)


def test_console_table_fits_80_columns_without_cutting_a_cell() -> None:
    from rich.console import Console

    from robinhood_testbed.cli import comparison_table

    names = [*allocation_names(), "shared", "robinhood+partitioned+jsq"]
    rows = [dict(policy=n, slo_violation_pct=43.9, max_p99_ms=4012.0, p50_ms=12.3, p90_ms=45.6, p99_ms=1234.0,
                 hit_ratio=0.612, requests=123456, errors=12345) for n in names]
    for width, shown in ((80, None), (200, 9)):
        table, left_out = comparison_table(rows, width)
        console = Console(width=width, record=True, file=open("/dev/null", "w"))
        console.print(table)
        text = console.export_text()
        assert "…" not in text and max(len(line.rstrip()) for line in text.splitlines()) <= width
        for n in names:
            assert n in text, n
        if shown is not None:
            assert len(table.columns) == shown and not left_out
        else:
            assert 3 <= len(table.columns) < 9 and left_out and "SLO viol%" in text


def allocation_names() -> list[str]:
    from robinhood_controller import policies

    return policies.names()


def test_report_rebuilds_a_results_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robinhood_testbed import cli
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: t\nduration: 60s\nbackends: [{name: a, type: kv}, {name: b, type: kv}]\n"
                   "cache: {budget_mb: 32}\ntrace: {synth: {rate: 10}}\n")
    out = tmp_path / "res"
    for arm in ("shared", "static", "oracle", "robinhood"):
        fake_run(out, arm, [500, 100, 120, 140], [50.0, 90.0, 99.0])
    (out / "half-done").mkdir()  # an arm that never finished is not reported
    assert cli.results_arms(out) == ["robinhood", "static", "oracle", "shared"]
    assert cli.main(["report", "--experiment", str(exp), "--dir", str(out)]) == 0
    table = (out / "comparison.md").read_text().splitlines()
    assert [ln.split("|")[1].strip() for ln in table[2:]] == ["robinhood", "static", "oracle", "shared"]
    assert (out / "report.html").is_file() and (out / "p99_over_time.png").is_file()
    assert cli.main(["report", "--experiment", str(exp), "--dir", str(out), "--arms", "static,robinhood"]) == 0
    assert len((out / "comparison.md").read_text().splitlines()) == 4
    before = (out / "comparison.md").read_text()
    assert cli.main(["report", "--experiment", str(exp), "--dir", str(out), "--arms", "static,half-done"]) == 2
    assert "--arms: 'half-done' has no finished run" in capsys.readouterr().err
    assert (out / "comparison.md").read_text() == before
    assert cli.main(["report", "--experiment", str(exp), "--dir", str(tmp_path / "nope")]) == 2
