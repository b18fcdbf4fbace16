"""`wemask report`: one table per stage and task, and a PNG with a panel per metric, a line per setting."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path

from rich.table import Table

from wemask_cli.render.common import fitting, format_metric, is_percent, log_y_axis, pyplot, rate_axis, readable_ylim, save_figure, use_log_axis
from wemask_cli.render.eval import significance_cell

LABELS = ("setting", "r", "mode", "runs")
MAX_POINTS = 30  # rows (setting and rate) a table shows; the rest are counted, and all are in --csv/--json
LEGEND_CHARS = 48  # a legend entry wraps at this width, so the legend fits inside the figure


def report_tables(rows: list[dict], width: int) -> list:
    """One table per stage (and eval task), each fitting `width` columns (see `report_table`)."""
    from wemask_cli.commands.report import points

    tables = []
    for stage, task in dict.fromkeys((row["stage"], row["task"]) for row in rows):
        merged = points([row for row in rows if (row["stage"], row["task"]) == (stage, task)])
        tables.append(report_table(merged, f"{stage}: {task}" if task else stage, width))
    return tables


def report_table(merged: list[dict], what: str, width: int):
    """A row per setting and mask rate with a column per metric, or, when that is wider than `width`, a row per
    metric; values are means over the runs at that point (± std across runs or seeds when there are several).
    Setting names stay whole; where they do not fit, the table names them by key (#1, #2, ...), in full below it."""
    from rich.console import Group
    from rich.text import Text

    runs = {run for row in merged for run in row["runs"]}
    lines = list(dict.fromkeys(row["line"] for row in sorted(merged, key=line_order)))
    title = f"wemask report: {what}, {len(runs)} run(s), {len(lines)} setting(s); ± is the std across seeds"
    metrics = list(dict.fromkeys(row["metric"] for row in merged))
    keys = {line: f"#{i}" for i, line in enumerate(lines, 1)}
    whole = {line: line for line in lines}
    table = fitting([lambda names=names, wide=wide: _table(merged, title, metrics, names, wide)
                     for names in (whole, keys) for wide in (True, False)], width)  # fmt: skip
    if table.columns[0].no_wrap:  # names whole
        return table
    return Group(table, *(Text(f"{keys[line]}  {line}") for line in lines))


def line_order(row: dict) -> tuple:
    """Plain settings first, then by name and mask rate."""
    return not row["line"].startswith("plain"), row["line"], -1 if row["mask_rate"] is None else row["mask_rate"]


def _table(merged: list[dict], title: str, metrics: list[str], names: dict[str, str], wide: bool) -> Table:
    table = Table(title=title)
    keyed = any(key != line for line, key in names.items())
    for name in LABELS + (tuple(metrics) if wide else ("metric", "value")):
        numeric = name not in ("setting", "mode", "runs", "metric")
        whole = name in ("metric", "mode") or (name == "setting" and not keyed)  # run names wrap at word breaks
        table.add_column(name, justify="right" if numeric else "left", overflow="fold", no_wrap=numeric or whole,
                         min_width=max(map(len, metrics)) if name == "metric" else None)
    groups: dict[tuple, dict] = {}
    for row in sorted(merged, key=line_order):
        groups.setdefault((row["line"], row["mask_rate"]), {})[row["metric"]] = row
    order = list(groups)
    short = short_names([run for key in order for row in groups[key].values() for run in row["runs"]])
    for key in order[:MAX_POINTS]:
        first = next(iter(groups[key].values()))
        labels = (names[key[0]], rate_label(first), first["mode"], runs_label([short[run] for run in first["runs"]]))
        if wide:
            table.add_row(*labels, *(cell(groups[key].get(metric)) for metric in metrics))
            continue
        for metric, row in groups[key].items():
            table.add_row(*labels, metric, cell(row))
            labels = ("", "", "", "")
    if len(order) > MAX_POINTS:
        table.caption = f"… and {len(order) - MAX_POINTS} more setting-and-rate rows: every row is in --csv / --json"
    return table


def rate_label(point: dict) -> str:
    """The mask rate of a point ('-' when the run recorded none)."""
    return "-" if point["mask_rate"] is None else f"{point['mask_rate']:g}"


def runs_label(names: list[str]) -> str:
    """The runs of one point: all of them up to three, else the first and how many more."""
    return ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} more"


def cell(row: dict | None) -> str:
    """'2.31', '2.31 ± 0.04' (several seeds)."""
    if row is None:
        return ""
    text = format_metric(row["metric"], row["value"])
    if row.get("spread"):
        std = row["std"] * (100 if is_percent(row["metric"]) else 1)
        text += f" ± {std:.2g}"
    return text + paired_note(row)


def paired_note(row: dict) -> str:
    """An eval point's paired change from r = 0 below its value, its 95% interval and p-value on two short lines
    ('\n[-0.8, +1.2]\np=0.41 vs r=0'), else ''."""
    if row.get("p_value") is None:
        return ""
    low, high = row.get("paired_ci95_low"), row.get("paired_ci95_high")
    interval = None if low is None or high is None else [low, high]
    bounds, p_value = significance_cell(row["metric"], {"paired_ci95": interval, "p_value": row["p_value"]}).rsplit(" ", 1)
    return f"\n{bounds}\n{p_value} vs r=0"


def short_names(runs: list[str]) -> dict[str, str]:
    """Run paths relative to the folder that holds them all ('runs/r0.3' -> 'r0.3')."""
    parents = [os.path.dirname(os.path.abspath(r)) for r in runs]
    try:
        root = os.path.commonpath(parents) if parents else ""
    except ValueError:
        return {r: r for r in runs}
    return {r: os.path.relpath(os.path.abspath(r), root) for r in runs}


def report_png(rows: list[dict], path: str | Path) -> Path:
    """report_figure as a PNG."""
    return save_figure(report_figure(rows), path)


def report_figure(rows: list[dict]):
    """A panel per stage and metric: value against mask rate, a line per setting (mean over seeds, error bars the std
    across them; see draw_panel), and below them one legend, its entries wrapped to fit inside the figure. A panel
    of a single point (one setting at one rate) is left to the table, named in the title, unless all are. Runs trained
    with --log-diagnostics add a last row: each diagnostic per step, a curve per run (draw_dynamics)."""
    from wemask_cli.commands.report import points
    from wemask_cli.commands.report_dynamics import NAMES, run_histories

    plt = pyplot()
    merged = [row for row in points(rows) if row["mask_rate"] is not None]
    found: dict[tuple, list[dict]] = {}
    for row in merged:
        found.setdefault((row["stage"], row["task"], row["metric"]), []).append(row)
    panels = {panel: mine for panel, mine in found.items() if len(mine) > 1} or found or {("", "", ""): []}
    single = [panel for panel in found if panel not in panels]
    histories = run_histories(rows)
    lines = dict.fromkeys([row["line"] for mine in panels.values() for row in mine] + [h["run"] for h in histories])
    colors = {line: f"C{i % 10}" for i, line in enumerate(lines)}  # a colour per setting, and per run for the dynamics
    cols = min(3, max(len(panels), len(NAMES) if histories else 0))
    grid = math.ceil(len(panels) / cols) + bool(histories)
    legend_in = 0.32 * math.ceil(len(colors) / cols) + 0.4  # two text lines per entry at most
    fig, axes = plt.subplots(grid, cols, figsize=(5.2 * cols, 3.9 * grid + legend_in), squeeze=False, layout="constrained")
    for ax, (panel, mine) in zip(axes.flat, panels.items()):
        draw_panel(ax, mine, panel, colors)
    dynamics = list(axes[-1])[: len(NAMES)] if histories else []
    for ax, name in zip(dynamics, NAMES):
        draw_dynamics(ax, histories, name, colors)
    for ax in [ax for ax in list(axes.flat)[len(panels):] if not any(ax is shown for shown in dynamics)]:
        ax.set_visible(False)
    handles = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        labels = [textwrap.fill(label, LEGEND_CHARS) for label in handles]
        fig.legend(handles.values(), labels, loc="outside lower center", ncol=min(cols, len(handles)), fontsize=8)
    fig.suptitle("wemask report: mean over seeds; error bars: std across seeds" + single_note(single), fontsize=11)
    return fig


def single_note(panels: list[tuple]) -> str:
    """The title's line for the metrics of a single point, left to the table: how many, per stage."""
    if not panels:
        return ""
    stages = dict.fromkeys(f"{stage} {task}".strip() for stage, task, _ in panels)
    counts = ", ".join(f"{stage} {sum(f'{s} {t}'.strip() == stage for s, t, _ in panels)}" for stage in stages)
    return f"\n{len(panels)} metric(s) of a single point each ({counts}): in the table, not drawn"


def draw_panel(ax, rows: list[dict], panel: tuple, colors: dict) -> None:
    """One metric of one stage: a line per setting over the mask rate (its r = 0 point the plain baseline), error bars
    the std across seeds; a plain setting with no masked rate of its own is a dashed baseline across the rates."""
    stage, task, metric = panel
    scale = 100.0 if metric and is_percent(metric) else 1.0
    values, errors = [], []
    lines = list(dict.fromkeys(row["line"] for row in rows))
    rates = [row["mask_rate"] for row in rows]
    span = (max(rates) - min(rates)) or 1.0
    for index, line in enumerate(lines):
        mine = sorted((row for row in rows if row["line"] == line), key=lambda row: row["mask_rate"])
        x, y = [row["mask_rate"] for row in mine], [scale * row["value"] for row in mine]
        err = [scale * (row["std"] if row.get("spread") else 0.0) for row in mine]
        values += y
        errors += err
        label = line
        if all(row["mode"] == "plain" for row in mine) and len(mine) == 1:
            ax.axhline(y[0], color=colors[line], linestyle="--", linewidth=1.2, label=f"{label} (no mask)")
            if err[0]:
                ax.axhspan(y[0] - err[0], y[0] + err[0], color=colors[line], alpha=0.12)
            continue
        dodge = (index - (len(lines) - 1) / 2) * 0.01 * span  # error bars at one rate stay apart
        ax.errorbar([v + dodge for v in x], y, yerr=err if any(err) else None, marker="o", markersize=6 if len(x) == 1 else 4, capsize=4,
                    color=colors[line], label=label)  # fmt: skip
    if use_log_axis(metric, values):
        log_y_axis(ax)
    elif values:
        readable_ylim(ax, values, errors)
    ax.set_title(f"{stage}{f' {task}' if task else ''}: {metric}{' (%)' if scale == 100 else ''}", fontsize=10)
    rate_axis(ax, rates)
    ax.grid(alpha=0.3)


def draw_dynamics(ax, histories: list[dict], name: str, colors: dict) -> None:
    """One diagnostic of the runs trained with --log-diagnostics against the training step, a curve per run, named by
    its folder and mask ('aware (aware r=0.3)', 'plain (no mask)'); a run without a mask dashed, as in the panels above."""
    from wemask_cli.commands.report_dynamics import curve

    short = short_names([history["run"] for history in histories])
    for history in histories:
        steps, values = curve(history["history"], name)
        plain = history["mode"] == "plain"
        mask = "no mask" if plain else f"{history['mode']} r={history['mask_rate']:g}"
        ax.plot(steps, values, marker="o", markersize=3, color=colors[history["run"]], linestyle="--" if plain else "-",
                label=f"{short[history['run']]} ({mask})")
    stages = ", ".join(dict.fromkeys(history["stage"] for history in histories))
    ax.set_title(f"{stages} training dynamics: wemask/{name}", fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
