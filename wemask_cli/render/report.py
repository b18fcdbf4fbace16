"""`wemask report`: one table per stage and the PNG by mode and mask rate."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from .common import format_metric, is_percent, pyplot, save_figure


def report_table(rows: list[dict], stage: str) -> Table:
    """One stage's runs: a row per run and mask rate with a column per metric, or, when there are more metrics
    than fit side by side, a row per metric (value ± std across seeds when there are several)."""
    metrics = list(dict.fromkeys(row["metric"] for row in rows))
    wide = len(metrics) <= 4
    table = Table(title=f"wemask report: {stage}, {len({r['run'] for r in rows})} run(s)")
    for name in ("run", "mode", "mask rate") + (tuple(metrics) if wide else ("metric", "value")):
        table.add_column(name, justify="left" if name in ("run", "mode", "metric") else "right", overflow="fold")
    groups: dict[tuple, dict] = {}
    for row in rows:
        groups.setdefault((row["run"], row["mode"], row["mask_rate"]), {})[row["metric"]] = row
    order = sorted(groups, key=lambda k: (k[1], -1 if k[2] is None else k[2], k[0]))
    short = _short_names([key[0] for key in order])

    def cell(row: dict | None) -> str:
        if row is None:
            return ""
        text = format_metric(row["metric"], row["value"])
        if row.get("seeds", 1) > 1:
            text += f" ± {format_metric(row['metric'], row['std']).rstrip('%')} ({row['seeds']} seeds)"
        return text

    for key in order:
        labels = (short[key[0]], key[1], "-" if key[2] is None else f"{key[2]:g}")
        if wide:
            table.add_row(*labels, *(cell(groups[key].get(metric)) for metric in metrics))
        else:
            for metric, row in groups[key].items():
                table.add_row(*labels, metric, cell(row))
                labels = ("", "", "")
    return table


def _short_names(runs: list[str]) -> dict[str, str]:
    """Run paths relative to the folder that holds them all ('runs/r0.3' -> 'r0.3')."""
    import os

    parents = [os.path.dirname(os.path.abspath(r)) for r in runs]
    try:
        root = os.path.commonpath(parents) if parents else ""
    except ValueError:
        return {r: r for r in runs}
    return {r: os.path.relpath(os.path.abspath(r), root) for r in runs}


def report_png(rows: list[dict], path: str | Path) -> Path:
    """One panel per metric: value against mask rate, one line per (stage, mode); runs at one point averaged."""
    import math
    import statistics

    plt = pyplot()
    metrics = [m for m in dict.fromkeys(r["metric"] for r in rows) if any(r["mask_rate"] is not None for r in rows if r["metric"] == m)]
    if not metrics:
        metrics = ["(no metric with a mask rate)"]
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        scale = 100.0 if is_percent(metric) else 1.0
        points = [r for r in rows if r["metric"] == metric and r["mask_rate"] is not None]
        groups = list(dict.fromkeys((r["stage"], r["mode"]) for r in points))
        for index, (stage, mode) in enumerate(groups):
            by_rate: dict[float, list[dict]] = {}
            for r in points:
                if (r["stage"], r["mode"]) == (stage, mode):
                    by_rate.setdefault(r["mask_rate"], []).append(r)
            x = sorted(by_rate)
            y, err = [], []
            for rate in x:
                group = by_rate[rate]
                values = [scale * r["value"] for r in group]
                y.append(statistics.fmean(values))
                err.append(statistics.stdev(values) if len(values) > 1 else scale * (group[0].get("std") or 0.0))
            dodge = (index - (len(groups) - 1) / 2) * 0.008  # overlapping error bars stay apart
            bars = ax.errorbar([v + dodge for v in x], y, yerr=err if any(err) else None, marker="o", capsize=4,
                               label=f"{stage} · {mode}" + (" (r=0 baseline)" if mode == "none" and x == [0.0] else ""))
            if mode == "none" and x == [0.0]:  # an unmasked run: a reference line across the rates
                ax.axhline(y[0], color=bars[0].get_color(), linestyle="--", linewidth=1, alpha=0.7)
        ax.set_title(metric + (" (%)" if scale == 100 else ""), fontsize=10)
        ax.set_xlabel("mask rate r")
        ax.set_xlim(-0.05, 1.05)  # the whole range of r, also for a single run
        ax.grid(alpha=0.3)
        if points:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.suptitle("wemask report (error bars: std across runs or seeds at the same point)", fontsize=10)
    return save_figure(fig, path)
