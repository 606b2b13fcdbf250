"""report.html: the comparison table and the figures of a comparison, in one page."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from .analysis import COLUMNS, PolicyRun, fmt
from .experiment import Experiment

_CSS = """
body{font-family:system-ui,-apple-system,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.35em .7em;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}code,pre{background:#f6f6f6;padding:.1em .3em}
pre{padding:.8em;overflow:auto}.best{font-weight:bold;color:#b00}
"""


def write_report(exp: Experiment, runs: list[PolicyRun], rows: list[dict[str, Any]],
                 plots: dict[str, Path], out: Path) -> Path:
    best = min((r["slo_violation_pct"] for r in rows if r["slo_violation_pct"] is not None), default=None)
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in COLUMNS)
    body = []
    for r in rows:
        cells = []
        for k, _, p in COLUMNS:
            cls = ' class="best"' if k == "slo_violation_pct" and r[k] is not None and r[k] == best else ""
            cells.append(f"<td{cls}>{html.escape(fmt(r[k], p))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    hit_rows = []
    names = [b.name for b in exp.backends]
    for run in runs:
        hr = run.result.get("hit_ratio", {})
        hit_rows.append("<tr><td>" + html.escape(run.policy) + "</td>" +
                        "".join(f"<td>{fmt(hr.get(n), '{:.3f}')}</td>" for n in names) + "</tr>")
    figs = {
        "p99": "P99 request latency over time (paper Fig. 3)",
        "slo": "SLO-violation curves for P99, P90 and P50 (paper Fig. 8)",
        "allocation": "Cache allocation per backend over time (paper Fig. 13)",
        "rbc": "RBC share of the top backends (paper Fig. 9)",
    }
    fig_html = "".join(
        f"<h3>{html.escape(title)}</h3><img src=\"{html.escape(plots[k].name)}\" alt=\"{html.escape(title)}\">"
        for k, title in figs.items() if k in plots)
    slo = exp.slo
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>RobinHood testbed: {html.escape(exp.name)}</title>
<style>{_CSS}</style></head><body>
<h1>RobinHood testbed: {html.escape(exp.name)}</h1>
<p>{html.escape(exp.description)}</p>
<p>Same trace, scenario and seed ({exp.seed}) for every policy, each on a fresh topology.
SLO: P99 ≤ {slo.latency * 1000:g} ms, evaluated every {slo.step:g} s over the previous {slo.window:g} s,
after a {slo.warmup:g} s warm-up; run length {exp.duration:g} s.</p>
<h2>Comparison</h2>
<table><tr>{head}</tr>{''.join(body)}</table>
<p>SLO viol. %: the share of the P99 observations after the warm-up above the SLO. max P99: the largest
windowed P99 after the warm-up. P50/P90/P99: over all requests sent after the warm-up. Hit ratio: all cache
lookups of the run.</p>
<h2>Hit ratio per backend</h2>
<table><tr><th>policy</th>{''.join(f'<th>{html.escape(n)}</th>' for n in names)}</tr>{''.join(hit_rows)}</table>
<h2>Figures</h2>{fig_html}
<h2>Experiment</h2><pre>{html.escape(json.dumps(exp.document, indent=2, default=str))}</pre>
<p>Per-policy folders hold the replay outputs (<code>replay/requests.csv</code>, <code>replay/summary.json</code>,
<code>replay/scenario.jsonl</code>), the controller's allocation timeline (<code>controller-*.jsonl</code>),
the RBC timeline (<code>rbc.jsonl</code>), the generated <code>topology.yaml</code> and every component's log
(<code>logs/</code>).</p>
</body></html>"""
    out.write_text(doc)
    return out
