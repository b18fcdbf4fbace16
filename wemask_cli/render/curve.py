"""`wemask eval`'s curve.png: the metric against mask rate and, beside it, its paired change from r = 0."""

from __future__ import annotations

from pathlib import Path

from wemask_cli.models.names import model_label
from wemask_cli.render.common import is_percent, log_y_axis, pyplot, rate_axis, readable_ylim, save_figure, use_log_axis

FIXED = ("mask_rate", "mode", "me_layer")


def eval_curve_png(document: dict, path: str | Path) -> Path:
    """curve_figure as a PNG."""
    return save_figure(curve_figure(document), path)


def curve_figure(document: dict):
    """Left: the primary metric (and metrics of its kind) against mask rate, a line per metric and other axis,
    with the std over seeds (error bars) or ± 1 standard error over units (a band; error bars for a single point).
    Right, when the sweep has a change from r = 0: that change, paired unit by unit, with its paired SE."""
    summary, primary = document["summary"], document.get("primary_metric")
    percent = primary is not None and is_percent(primary)
    shown = [m for m in dict.fromkeys(r["metric"] for r in summary) if m == primary or (percent and is_percent(m))]
    extra = [axis for axis in document.get("axes", []) if axis not in FIXED]
    deltas = [r for r in summary if r["metric"] == primary and r.get("delta") is not None and r["mask_rate"]]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 if deltas else 1, figsize=(11 if deltas else 7, 4.6), squeeze=False, layout="constrained")
    draw_metric(axes[0][0], document, shown, extra, 100.0 if percent else 1.0)
    if deltas:
        draw_deltas(axes[0][1], document, extra, 100.0 if percent else 1.0)
    data = Path(document["data"]).name if document.get("data") else ""
    fig.suptitle(f"{document['task']}: {model_label(document.get('model'))}" + (f" on {data}" if data else ""), fontsize=11)
    handles = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=min(2, len(handles)), fontsize=8)
    return fig


def curve_lines(rows: list[dict], extra: list[str]) -> dict[tuple, list[dict]]:
    """The rows of each line, by mask rate: one line per metric and setting of the other axes, its r = 0 point the
    plain model's (the mode of each rate is in the table: plain, aware at the trained rate, free at others)."""
    lines: dict[tuple, list[dict]] = {}
    for row in rows:
        lines.setdefault((row["metric"], *(row.get(a) for a in extra)), []).append(row)
    return {key: sorted(found, key=lambda r: r["mask_rate"]) for key, found in lines.items()}


def line_label(key: tuple, extra: list[str]) -> str:
    return " ".join([key[0]] + [f"{a}={v}" for a, v in zip(extra, key[1:])])


def draw_metric(ax, document: dict, shown: list[str], extra: list[str], scale: float) -> None:
    summary = document["summary"]
    seeds, unit = document.get("seeds", {}).get("count", 1), document.get("unit", "examples")
    lines = curve_lines([r for r in summary if r["metric"] in shown and r["mean"] is not None], extra)
    values, errors = [], []
    for key, rows in lines.items():
        x, y = [r["mask_rate"] for r in rows], [scale * r["mean"] for r in rows]
        err = [scale * ((r["std"] if seeds > 1 else r["se"]) or 0.0) for r in rows]
        values, errors = values + y, errors + err
        spread = f"mean ± std over {seeds} seeds" if seeds > 1 else f"± 1 s.e. over {unit}"
        label = f"{line_label(key, extra)} ({spread})"
        if seeds > 1 or len(x) == 1:
            ax.errorbar(x, y, yerr=err, marker="o", capsize=4, label=label)
            continue
        (drawn,) = ax.plot(x, y, marker="o", label=label)
        ax.fill_between(x, [a - b for a, b in zip(y, err)], [a + b for a, b in zip(y, err)], color=drawn.get_color(), alpha=0.15)
    if use_log_axis(shown[0] if shown else "", values):
        log_y_axis(ax)
    elif values:
        readable_ylim(ax, values, errors)
    rate_axis(ax, [r["mask_rate"] for r in document["summary"]])
    ax.set_ylabel(", ".join(shown) + (" (%)" if scale == 100 else ""))
    ax.set_title("value", fontsize=10)
    ax.grid(alpha=0.3)


def draw_deltas(ax, document: dict, extra: list[str], scale: float) -> None:
    """The primary metric's change from r = 0, paired unit by unit (error bars: its paired standard error)."""
    primary = document["primary_metric"]
    rows = [r for r in document["summary"] if r["metric"] == primary and r.get("delta") is not None]
    lines = curve_lines(rows, extra)
    values, errors = [0.0], [0.0]
    for key, mine in lines.items():
        mine = [r for r in mine if r["mask_rate"]]  # the change starts at 0 on r = 0 itself
        x, y = [0.0] + [r["mask_rate"] for r in mine], [0.0] + [scale * r["delta"] for r in mine]
        err = [0.0] + [scale * (r.get("delta_se") or 0.0) for r in mine]
        values, errors = values + y, errors + err
        ax.errorbar(x, y, yerr=err, marker="s", capsize=4, linestyle=":", label=f"Δ {line_label(key, extra)} vs r=0 (± paired s.e.)")
    ax.axhline(0, color="grey", linewidth=0.8)
    readable_ylim(ax, values, errors)
    rate_axis(ax, [r["mask_rate"] for r in document["summary"]])
    ax.set_ylabel(f"Δ {primary}" + (" (points)" if scale == 100 else ""))
    ax.set_title("change from r = 0, paired", fontsize=10)
    ax.grid(alpha=0.3)
