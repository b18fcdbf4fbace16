"""`wemask probe`: the table of every probe against the unmodified model, the mask-rate table and the PNG."""

from __future__ import annotations

import math
from pathlib import Path

from rich.table import Table

from wemask_cli.models.names import model_label
from wemask_cli.render.common import compact, num, save_figure

DIVERSITY_SHOWN = "effective_rank_rest"  # the diversity column of the table: the other tokens' effective rank


def mean_after(values: list, me: int) -> float | None:
    kept = [v for v in values[me + 1 :] if v is not None]
    return sum(kept) / len(kept) if kept else None


def runs(report: dict) -> list[tuple[str, dict]]:
    """(label, run): the unmodified model first, then each probe."""
    return [("unmodified", report["unmodified"]), *((p["probe"], p) for p in report["probes"])]


def lands(run: dict) -> str:
    if run["sink_lands"] is None:
        return "-"
    return f"{run['sink_lands']} ({run['sink_lands_layers']:.0%})"


def probe_table(report: dict) -> Table:
    """One row per run: the jump at the ME layer, the norm and sink after it, where the sink lands, the ME layer found."""
    me = report["me_layer"]
    table = Table(
        title=f"{report['model_type']}: probes of ME layer {me} (0-based; medians over {report['prompts']} prompts)",
        caption="jump: ‖h₀‖ at the ME layer over ‖h₀‖ entering it; ratio: ‖h₀‖/‖hₜ‖ there; ‖h₀‖ after, sink after, "
        "eff. rank: means over the layers after it (eff. rank of the other tokens); sink lands: the position (0 = "
        "first token) receiving the most attention (share of later layers); ME found: what locate finds on that model",
    )
    for name in ("probe", "jump", "vs unmod.", "ratio", "‖h₀‖ after", "sink after", "sink lands", "eff. rank", "ME found"):
        table.add_column(name, justify="left" if name == "probe" else "right", no_wrap=name == "probe")
    for label, run in runs(report):
        change = run.get("jump_over_unmodified")
        table.add_row(
            label, compact(run["jump"]), "-" if change is None else f"{change:.3g}x", compact(run["first_over_other"]),
            compact(run["mean_first_norm_after_me"]), num(run["mean_sink_mass_after_me"], ".3f"), lands(run),
            num(mean_after([d[DIVERSITY_SHOWN] for d in run["diversity"]], me), ".2f"),
            "none" if run["located_me_layer"] is None else str(run["located_me_layer"]),
        )  # fmt: skip
    return table


def probe_mask_rates_table(report: dict) -> Table:
    """Per run and --mask-rate: the sink mass and the other tokens' effective rank after the ME layer, masked and not."""
    me = report["me_layer"]
    table = Table(title=f"WeMask from layer {me} on each run (means over the layers after it)")
    for name in ("probe", "mask rate", "sink mass", "unmasked", "eff. rank", "unmasked eff. rank"):
        table.add_column(name, justify="left" if name == "probe" else "right", no_wrap=name == "probe")
    for label, run in runs(report):
        plain = mean_after([d[DIVERSITY_SHOWN] for d in run["diversity"]], me)
        for masked in run["mask_rates"]:
            table.add_row(
                label, f"{masked['mask_rate']:g}", num(masked["mean_sink_mass_after_me"], ".3f"),
                num(masked["unmasked_mean_sink_mass_after_me"], ".3f"),
                num(mean_after([d[DIVERSITY_SHOWN] for d in masked["diversity"]], me), ".2f"), num(plain, ".2f"),
            )  # fmt: skip
    return table


def probe_plot(report: dict, path: str | Path) -> Path:
    """probe_figure as a PNG."""
    return save_figure(probe_figure(report), path)


def series(values: list) -> list[float]:
    return [math.nan if v is None else v for v in values]


def probe_figure(report: dict):
    """One panel per probe: the first token's norm per layer (log, left) and the sink mass per layer (right), the
    probe's solid, the unmodified model's dashed, the ME layer marked."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    probes, base, me = report["probes"], report["unmodified"], report["me_layer"]
    cols = 2 if len(probes) > 1 else 1
    rows = max(1, math.ceil(len(probes) / cols))
    fig = Figure(figsize=(8 * cols, 3.6 * rows + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).flatten()
    fig.suptitle(f"{model_label(report['model'])} ({report['model_type']}): probes of ME layer {me} (0-based)", fontsize=13)
    layers = list(range(report["num_layers"]))
    for ax, run in zip(axes, probes):
        sink = ax.twinx()
        ax.plot(layers, series(run["first_norm"]), color="tab:blue", marker="o", markersize=3, label="‖h₀‖, probed")
        ax.plot(layers, series(base["first_norm"]), color="tab:blue", linestyle="--", alpha=0.7, label="‖h₀‖, unmodified")
        sink.plot(layers, series(run["sink_mass"]), color="tab:red", marker="s", markersize=3, label="sink mass, probed")
        sink.plot(layers, series(base["sink_mass"]), color="tab:red", linestyle="--", alpha=0.7, label="sink mass, unmodified")
        ax.axvline(me, color="grey", linewidth=1, alpha=0.6)
        ax.set_yscale("log")
        sink.set_ylim(0, 1.05)
        ax.set_ylabel("first-token norm ‖h₀‖ (log)", color="tab:blue")
        sink.set_ylabel("attention on the first token", color="tab:red")
        ax.set_title(f"{run['probe']}: {run['summary']}", fontsize=10)
        ax.set_xlabel("layer (0-based)")
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        handles = ax.get_legend_handles_labels()[0] + sink.get_legend_handles_labels()[0]
        ax.legend(handles=handles, fontsize=7, loc="lower right")
    for ax in axes[len(probes) :]:
        ax.set_visible(False)
    return fig
