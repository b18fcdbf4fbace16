"""Terminal output (rich tables) and machine-readable output (JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from .errors import WeMaskError

console = Console()
err_console = Console(stderr=True)


def completions_table(records: list[dict]) -> Table:
    """Prompts as rows, one column per mask setting: completions side by side."""
    columns: dict[str, list[dict]] = {}
    for record in records:
        config = record["wemask"]
        label = "no mask" if config is None else f"r={config['mask_rate']:g}"
        columns.setdefault(label, []).append(record)
    table = Table(show_lines=True, title="Completions side by side")
    table.add_column("prompt", style="bold", max_width=40)
    for label in columns:
        table.add_column(label, overflow="fold")
    first = next(iter(columns.values()))
    for row, record in enumerate(first):
        prompt = record["input"]
        if isinstance(prompt, list):
            prompt = prompt[-1]["content"]
        table.add_row(prompt, *(column[row]["completion"].strip() for column in columns.values()))
    return table


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write as PNG (creating folders) and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def check_outputs(paths, overwrite: bool) -> None:
    """Before any work: each output file (None: not asked for) must be new, or replaceable with --overwrite."""
    for path in filter(None, paths):
        if Path(path).is_dir():
            raise WeMaskError(f"{path} is a directory: give a file path for this output")
        if Path(path).exists() and not overwrite:
            raise WeMaskError(f"{path} exists: pass --overwrite to replace it (or choose another path)")


def write_json(data, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def _num(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _compact(value) -> str:
    """Short numbers: 23600 -> 23.6k, 152.3 -> 152, 0.9951 -> 0.99."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value / 1000:.3g}k"
    return f"{value:.3g}" if abs(value) >= 1 else f"{value:.2f}"


LOCATE_COLUMNS = (  # (header, formatter, shown on narrow terminals)
    ("layer", lambda r, me: f"{r['layer']}{' ME' if r['layer'] == me else ''}", True),
    ("‖h₀‖", lambda r, _: _compact(r["first_norm"]), True),
    ("‖hₜ‖", lambda r, _: _compact(r["other_norm"]), True),
    ("ratio", lambda r, _: _compact(r["first_over_other"]), True),
    ("step", lambda r, _: _compact(r["step"]), True),
    ("share", lambda r, _: _num(r["ffn_share"], ".2f"), True),
    ("FFN×", lambda r, _: _compact(r["ffn_magnification"]), True),
    ("ΔFrac", lambda r, _: _num(r["delta_frac"], ".2f"), False),
    ("ΔKL", lambda r, _: _num(r["delta_kl"], ".2f"), True),
    ("ΔC↓", lambda r, _: _num(r["delta_c_down"], ".2f"), False),
    ("cos", lambda r, _: _num(r["first_token_cosine"], ".3f"), True),
    ("sink", lambda r, _: _num(r["sink_mass"], ".2f"), True),
    ("max|h|", lambda r, _: f"{_compact(r['max_abs'])} {r['max_abs_token']}:{r['max_abs_dim']}", False),
)


def locate_table(report: dict, width: int = 200) -> Table:
    """`wemask locate`: one row per layer (0-based), the ME layer highlighted, earlier rises in yellow.

    Below 110 columns of terminal, ΔFrac, ΔC and max|h| are left out (they stay in --json and --plot).
    """
    me = report["me_layer"]
    rises = {r["layer"] for r in report["earlier_rises"]}
    columns = [c for c in LOCATE_COLUMNS if c[2] or width >= 110]
    table = Table(
        title=f"{report['model_type']}: per-layer statistics (layers 0-based; medians over {len(report['prompts'])} prompts)",
        caption="‖h₀‖, ‖hₜ‖: first / other tokens' output norm; ratio = ‖h₀‖/‖hₜ‖; step: ‖h₀‖ over the previous layer's; "
        "share: FFN branch / ‖h₀‖; FFN×: branch magnification, first vs others; ΔFrac, ΔKL at the pre-FFN norm; "
        "ΔC↓ after down (up, gate: --json/--plot); cos: first token across prompts; sink: attention on the first token; "
        "max|h| at token:dim (token 0 = first real token)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for name, _, _ in columns:
        table.add_column(name, justify="right", no_wrap=True)
    for r in report["layers"]:
        style = "bold black on green" if r["layer"] == me else ("yellow" if r["layer"] in rises else None)
        table.add_row(*(cell(r, me) for _, cell, _ in columns), style=style)
    return table


def mask_rates_table(report: dict) -> Table:
    """`wemask locate --mask-rate`: attention-sink mass and cross-prompt cosine after the ME layer, per rate."""
    table = Table(title=f"WeMask from layer {report['me_layer']} (means over layers after it)")
    for name in ("mask rate", "sink mass", "unmasked", "change", "cos h₀", "unmasked cos"):
        table.add_column(name, justify="right")
    for run in report["mask_rates"]:
        masked, plain = run["mean_sink_mass_after_me"], run["unmasked_mean_sink_mass_after_me"]
        change = f"{masked / plain - 1:+.0%}" if masked is not None and plain else "-"
        table.add_row(
            f"{run['mask_rate']:g}", _num(masked, ".3f"), _num(plain, ".3f"), change,
            _num(run["mean_cosine_after_me"], ".3f"), _num(run["unmasked_mean_cosine_after_me"], ".3f"),
        )  # fmt: skip
    return table


def locate_plot(report: dict, path: str | Path) -> Path:
    """A PNG: first vs other token norm (log) with the ME layer marked, and panels for the section-2 metrics."""
    from matplotlib.figure import Figure

    layers = [r["layer"] for r in report["layers"]]

    def series(key: str) -> list[float]:
        return [float("nan") if r[key] is None else r[key] for r in report["layers"]]

    me = report["me_layer"]
    fig = Figure(figsize=(14, 10), layout="constrained")
    axes = fig.subplots(3, 2, sharex=True).flatten()
    title = f"{Path(report['model']).name} ({report['model_type']}): "
    title += "no ME layer found" if me is None else f"ME layer {me} (0-based), {report['agreement']} prompts agree"
    fig.suptitle(title, fontsize=14)
    panels = [
        ("Residual-stream norm (log)", [("first_norm", "first token ‖h₀‖"), ("other_norm", "other tokens, mean ‖hₜ‖")], True),
        ("First token vs others, and step over the previous layer (log)",
         [("first_over_other", "‖h₀‖ / ‖hₜ‖"), ("step", "‖h₀‖ / previous layer's")], True),
        ("Pre-FFN norm: ΔFrac (left) and ΔKL (right axis)", [("delta_frac", "ΔFrac (top-1% |w| dims)")], False),
        ("Projection concentration ΔC", [("delta_c_up", "up"), ("delta_c_gate", "gate"), ("delta_c_down", "down")], False),
        ("FFN branch: magnification first vs others (log)", [("ffn_magnification", "FFN×"), ("norm_magnification", "pre-FFN norm×")], True),
        ("Attention sink mass and first-token cosine across prompts",
         [("sink_mass", "sink mass (attention on first token)"), ("first_token_cosine", "cos(h₀) across prompts")], False),
    ]  # fmt: skip
    for ax, (name, keys, log) in zip(axes, panels):
        for key, label in keys:
            ax.plot(layers, series(key), marker="o", markersize=3, label=label)
        if log:
            ax.set_yscale("log")
        ax.set_title(name, fontsize=11)
        ax.grid(alpha=0.3)
    kl = axes[2].twinx()
    kl.plot(layers, series("delta_kl"), marker="o", markersize=3, color="tab:orange", label="ΔKL (right axis)")
    kl.axhline(0, color="tab:orange", linewidth=0.5, alpha=0.5)
    axes[2].set_ylabel("ΔFrac", color="tab:blue")
    kl.set_ylabel("ΔKL", color="tab:orange")
    for run in report["mask_rates"]:
        axes[5].plot(layers, [float("nan") if v is None else v for v in run["sink_mass"]], linestyle="--",
                     label=f"sink mass, WeMask r={run['mask_rate']:g}")  # fmt: skip
    for ax in axes:
        for i, rise in enumerate(report["earlier_rises"]):
            label = "earlier rise" if ax is axes[0] and i == 0 else None
            ax.axvline(rise["layer"], color="orange", linestyle=":", alpha=0.8, label=label)
        if me is not None:
            ax.axvline(me, color="red", linewidth=1.5, alpha=0.7, label=f"ME layer {me}" if ax is axes[0] else None)
    for ax in (axes[0], axes[1], axes[3], axes[4]):
        ax.legend(fontsize=8)
    axes[2].legend(handles=axes[2].get_legend_handles_labels()[0] + kl.get_legend_handles_labels()[0], fontsize=8, loc="upper center")
    axes[5].set_ylim(-0.02, 1.45)  # room for the legend above the curves
    axes[5].legend(fontsize=8, loc="upper center", ncol=2)
    for ax in axes[4:]:
        ax.set_xlabel("layer (0-based)")
    return save_figure(fig, path)


# ---------------------------------------------------------------------------------------------------------------
# `wemask eval` and `wemask report`: tables, progress and plots (matplotlib, Agg backend)


def format_metric(metric: str, value) -> str:
    """Accuracies and rates (fractions) as percentages, the rest with 4 significant digits."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    name = metric.rsplit("/", 1)[-1]
    if name.startswith(("acc", "exact_match")) or name.endswith("_rate"):
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


def _is_percent(metric: str) -> bool:
    return format_metric(metric, 0.5).endswith("%")


class ProgressTracker:
    """What the sweep calls: tracker(k) advances by k units, tracker.label(text) names the current setting."""

    def __init__(self, progress, total: int):
        self.progress = progress
        self.task_id = progress.add_task("evaluating", total=total)

    def __call__(self, k: int) -> None:
        self.progress.advance(self.task_id, k)

    def label(self, text: str) -> None:
        self.progress.update(self.task_id, description=text)


from contextlib import contextmanager  # noqa: E402


@contextmanager
def eval_progress():
    """A rich progress bar on stderr; yields a factory total -> ProgressTracker."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        console=err_console,
    ) as progress:
        yield lambda total: ProgressTracker(progress, total)


def eval_table(document: dict) -> Table:
    """One row per mask rate: each metric as value ± spread, and the primary metric's change from r = 0."""
    summary = document["summary"]
    metrics = list(dict.fromkeys(row["metric"] for row in summary))
    primary = document.get("primary_metric") or (metrics[0] if metrics else None)
    seeds = document.get("seeds", {}).get("count", 1)
    spread = f"std across {seeds} seeds" if seeds > 1 else f"standard error over {document.get('unit', 'examples')}"
    unit = document.get("unit", "examples")
    table = Table(title=f"wemask eval: {document['task']} ({document.get('n_examples', '?')} {unit}; ± is the {spread})")
    table.add_column("mask rate", justify="right")
    table.add_column("mode")
    for metric in metrics:
        table.add_column(metric, justify="right")
    table.add_column("n", justify="right")
    cells = {(r["mask_rate"], r["mode"], r["metric"]): r for r in summary}
    has_delta = any("delta" in r for r in summary if r["metric"] == primary)
    if has_delta:
        table.add_column(f"Δ {primary} vs r=0 (paired)", justify="right")
    for rate, mode in dict.fromkeys((r["mask_rate"], r["mode"]) for r in summary):
        row = [f"{rate:g}", mode]
        for metric in metrics:
            cell = cells.get((rate, mode, metric))
            if cell is None:
                row.append("-")
                continue
            error = cell["std"] if seeds > 1 else cell["se"]
            row.append(f"{format_metric(metric, cell['mean'])} ± {format_metric(metric, error).rstrip('%')}")
        first = next(r for r in summary if (r["mask_rate"], r["mode"]) == (rate, mode))
        row.append(str(first["n"]))
        if has_delta:
            cell = cells.get((rate, mode, primary))
            if cell is None or "delta" not in cell:
                row.append("-")
            elif _is_percent(primary):
                row.append(f"{100 * cell['delta']:+.1f} ± {100 * cell['delta_se']:.1f} pt")
            else:
                row.append(f"{cell['delta']:+.4g} ± {cell['delta_se']:.2g}")
        table.add_row(*row)
    return table


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def eval_curve_png(summary: list[dict], path: str | Path, title: str, seeds: int, unit: str = "examples") -> Path:
    """Metric against mask rate, one line per metric (and mode); spread as error bars (seeds) or a band (s.e.)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lines = dict.fromkeys((r["metric"], r["mode"]) for r in summary)
    percent = all(_is_percent(metric) for metric, _ in lines)
    scale = 100.0 if percent else 1.0
    for metric, mode in lines:
        rows = sorted((r for r in summary if (r["metric"], r["mode"]) == (metric, mode)), key=lambda r: r["mask_rate"])
        x = [r["mask_rate"] for r in rows]
        y = [scale * r["mean"] for r in rows]
        label = metric if len({m for _, m in lines}) == 1 else f"{metric} ({mode})"
        if seeds > 1:
            err = [scale * r["std"] for r in rows]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=4, label=f"{label}: mean ± std over {seeds} seeds")
        else:
            err = [scale * r["se"] for r in rows]
            (line,) = ax.plot(x, y, marker="o", label=f"{label} (band: ± 1 s.e. over {unit})")
            ax.fill_between(x, [a - b for a, b in zip(y, err)], [a + b for a, b in zip(y, err)], color=line.get_color(), alpha=0.15)
    rates = sorted({r["mask_rate"] for r in summary})
    ax.set_xticks(rates)
    ax.set_xlabel("mask rate r")
    ax.set_ylabel(", ".join(dict.fromkeys(m for m, _ in lines)) + (" (%)" if percent else ""))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


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

    plt = _pyplot()
    metrics = [m for m in dict.fromkeys(r["metric"] for r in rows) if any(r["mask_rate"] is not None for r in rows if r["metric"] == m)]
    if not metrics:
        metrics = ["(no metric with a mask rate)"]
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        scale = 100.0 if _is_percent(metric) else 1.0
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
