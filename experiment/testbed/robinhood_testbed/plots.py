"""The figures of a comparison, after the paper: P99 over time with the SLO line
(Fig. 3), SLO-violation curves for P50/P90/P99 (Fig. 8), allocation per backend over
time (Fig. 13) and the RBC share of the top backends (Fig. 9)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from robinhood_controller import policies as allocation_policies

from .analysis import PolicyRun


class _Pyplot:
    """matplotlib.pyplot, imported (with the Agg backend) on first use: the commands
    that draw nothing (up, a refused configuration, --help) start without it, about
    0.4 s sooner."""

    def __getattr__(self, name: str) -> Any:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot

        return getattr(pyplot, name)


plt: Any = _Pyplot()

#: Colors of the cache modes that have no allocation policy; allocation policies
#: declare their own (AllocationPolicy.color) or take one from the palette.
MODE_COLORS = {"shared": "#2ca02c", "none": "#7f7f7f"}


def _color(arm: str, i: int) -> str:
    """An arm's color: its cache mode's, its allocation policy's (from the registry), or
    the palette's. An arm is named for its mode or policy, with "+dispatch" when several
    dispatch policies are compared; policy names may themselves end in "++", so the name
    is looked up whole and anything that is not a mode or a policy takes the palette."""
    if arm in MODE_COLORS:
        return MODE_COLORS[arm]
    try:
        color = allocation_policies.get(arm).color
    except allocation_policies.PolicyError:  # "policy+dispatch": the palette tells the arms apart
        return f"C{i}"
    return color or f"C{i + 3}"


#: Up to this many arms share one axis; more get one small panel each (the others in grey).
ONE_AXIS_MAX = 4


def _grid(n: int, width: float, height: float, max_cols: int = 4, **kw):
    """A figure of n panels, at most max_cols per row, each width x height inches."""
    cols = min(n, max_cols)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, **kw)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def save(fig, out: Path, dpi: int = 110) -> Path:
    """Lay a figure out, write it to out and close it."""
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def violation_axis(ax, ylabel: str, title: str, legend_size: int = 8, **title_kw: Any) -> None:
    """An axis of SLO violation % (0-100, a little room around), with its grid and legend."""
    ax.set_ylabel(ylabel)
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, ncol=2)
    ax.set_title(title, **title_kw)


def _p99_points(r: PolicyRun) -> tuple[list[float], list[float]]:
    pts = [p for p in r.series() if p.get("p99_ms") is not None]
    return [p["t_s"] for p in pts], [p["p99_ms"] for p in pts]


def _p99_frame(ax, runs: list[PolicyRun], title: str) -> None:
    ax.axhline(runs[0].slo_ms, ls="--", color="0.3", lw=1, label=f"SLO {runs[0].slo_ms:g} ms")
    if runs[0].warmup_s > 0:
        ax.axvspan(0, runs[0].warmup_s, color="0.9", zorder=0, label="warm-up")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")


def p99_over_time(runs: list[PolicyRun], out: Path) -> Path:
    """P99 over time (Fig. 3). Up to ONE_AXIS_MAX arms share one axis; with more, each
    arm gets its own panel, drawn over the other arms in grey, so that eight stay readable."""
    if len(runs) <= ONE_AXIS_MAX:
        fig, ax = plt.subplots(figsize=(9, 4.2))
        for i, r in enumerate(runs):
            ax.plot(*_p99_points(r), label=r.policy, color=_color(r.policy, i), lw=1.8)
        if runs:
            _p99_frame(ax, runs, "P99 request latency over time (windowed)")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("P99 request latency (ms)")
        ax.legend(loc="upper left", fontsize=8)
    else:
        fig, axes = _grid(len(runs), 4.2, 3.0, sharex=True, sharey=True)
        points = [_p99_points(r) for r in runs]
        for i, (ax, r) in enumerate(zip(axes, runs)):
            for j, (xs, ys) in enumerate(points):
                if j != i:
                    ax.plot(xs, ys, color="0.8", lw=0.8)
            ax.plot(*points[i], color=_color(r.policy, i), lw=1.6, label=r.policy)
            _p99_frame(ax, runs, r.policy)
            if i % 4 == 0:
                ax.set_ylabel("P99 (ms)")
            ax.set_xlabel("time (s)")
        axes[0].legend(loc="upper left", fontsize=7)
        fig.suptitle("P99 request latency over time (windowed); other arms in grey")
    return save(fig, out)


def slo_curves(runs: list[PolicyRun], out: Path) -> Path:
    """For each percentile: the SLO that would be violated x% of the time (Fig. 8)."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    for ax, key, title in zip(axes, ("p99_ms", "p90_ms", "p50_ms"), ("P99", "P90", "P50")):
        for i, r in enumerate(runs):
            vals = sorted(r.measured_series(key), reverse=True)
            if not vals:
                continue
            n = len(vals)
            xs = [100.0 * (k + 1) / n for k in range(n)]
            ax.step(xs, vals, where="post", label=r.policy, color=_color(r.policy, i), lw=1.6)
        if key == "p99_ms" and runs:
            ax.axhline(runs[0].slo_ms, ls="--", color="0.3", lw=1)
        ax.set_xlabel("SLO violations (%)")
        ax.set_ylabel(f"{title} SLO (ms)")
        ax.set_yscale("log")
        ax.set_title(f"{title} SLO vs violations")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8, ncol=2 if len(runs) > ONE_AXIS_MAX else 1)
    return save(fig, out)


def allocation_figure(runs: list[PolicyRun]):
    """Per-backend cache allocation over time for every policy with a controller: one
    panel each, all on one y-axis from 0 (so a flat 40 MB reads as flat next to a policy
    that moves 20-90 MB), a backend in the same color in every panel. None without a
    controller."""
    with_ctl = [r for r in runs if r.allocation_timeline()]
    if not with_ctl:
        return None
    names = sorted({n for r in with_ctl for t in r.allocation_timeline() for n in t.get("partitions", {})})
    fig, axes = _grid(len(with_ctl), 5.0, 3.4, sharex=True, sharey=True)
    top = 0.0
    for ax, r in zip(axes, with_ctl):
        ticks = r.allocation_timeline()
        t0 = ticks[0].get("unix", ticks[0].get("time", 0))
        for j, n in enumerate(names):
            xs, ys = [], []
            for t in ticks:
                p = t.get("partitions", {}).get(n)
                if p is None or p.get("limit_bytes") is None:
                    continue
                xs.append(t.get("unix", t.get("time", 0)) - t0)
                ys.append(p["limit_bytes"] / 2**20)
            if xs:
                ax.plot(xs, ys, label=n, lw=1.6, color=f"C{j}")
                top = max(top, *ys)
        ax.set_title(f"{r.policy}: cache allocation per backend")
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylim(0, top * 1.05 if top > 0 else 1)  # shared: every panel
    for ax in axes[::4]:
        ax.set_ylabel("memcached limit (MB)")
    fig.tight_layout()
    return fig


def allocation(runs: list[PolicyRun], out: Path) -> Path | None:
    """The allocation figure (:func:`allocation_figure`) written to out."""
    fig = allocation_figure(runs)
    return None if fig is None else save(fig, out)


def rbc_share(runs: list[PolicyRun], out: Path, top: int = 4) -> Path | None:
    """Share of the request blocking count of the top backends over time (Fig. 9)."""
    runs = [r for r in runs if r.rbc_timeline()]
    if not runs:
        return None
    fig, axes = _grid(len(runs), 4.5, 3.4, sharey=True)
    for ax, r in zip(axes, runs):
        tl = r.rbc_timeline()
        totals: dict[str, int] = {}
        for p in tl:
            for n, c in p.get("rbc", {}).items():
                totals[n] = totals.get(n, 0) + c
        names = sorted(totals, key=lambda n: -totals[n])[:top]
        for j, n in enumerate(names):
            xs, ys = [], []
            for p in tl:
                band = sum(p.get("rbc", {}).values())
                if band:
                    xs.append(p["t"])
                    ys.append(100.0 * p["rbc"].get(n, 0) / band)
            ax.plot(xs, ys, label=n, lw=1.4, color=f"C{j}")
        ax.axhline(50, ls=":", color="black", lw=1)
        ax.set_title(f"{r.policy}: RBC share")
        ax.set_xlabel("time (s)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes[::4]:
        ax.set_ylabel("share of blocking count (%)")
    return save(fig, out)


def all_plots(runs: list[PolicyRun], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path | None] = {
        "p99": p99_over_time(runs, out_dir / "p99_over_time.png"),
        "slo": slo_curves(runs, out_dir / "slo_violation_curves.png"),
        "allocation": allocation(runs, out_dir / "allocation.png"),
        "rbc": rbc_share(runs, out_dir / "rbc_share.png"),
    }
    return {k: v for k, v in made.items() if v is not None}
