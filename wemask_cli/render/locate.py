"""`wemask locate`: the per-layer table, the mask-rate table and the PNG."""

from __future__ import annotations

import math
from pathlib import Path

from rich import box
from rich.table import Table

from wemask_cli.models.names import model_label
from wemask_cli.render.common import compact, num, save_figure

LOCATE_COLUMNS = (  # (header, formatter, shown on narrow terminals)
    ("layer", lambda r, me: f"{r['layer']}{' ME' if r['layer'] == me else ''}", True),
    ("‖h₀‖", lambda r, _: compact(r["first_norm"]), True),
    ("‖hₜ‖", lambda r, _: compact(r["other_norm"]), True),
    ("ratio", lambda r, _: compact(r["first_over_other"]), True),
    ("step", lambda r, _: compact(r["step"]), True),
    ("share", lambda r, _: num(r["ffn_share"], ".2f"), True),
    ("attn", lambda r, _: num(r.get("attn_share"), ".2f"), False),
    ("FFN×", lambda r, _: compact(r["ffn_magnification"]), True),
    ("ΔFrac", lambda r, _: num(r["delta_frac"], ".2f"), False),
    ("ΔKL", lambda r, _: num(r["delta_kl"], ".2f"), True),
    ("ΔC↓", lambda r, _: num(r["delta_c_down"], ".2f"), False),
    ("cos", lambda r, _: num(r["first_token_cosine"], ".3f"), True),
    ("sink", lambda r, _: num(r["sink_mass"], ".2f"), True),
    ("max|h|", lambda r, _: f"{compact(r['max_abs'])} {r['max_abs_token']}:{r['max_abs_dim']}", False),
)


def locate_table(report: dict, width: int = 200):
    """`wemask locate`: one row per layer (0-based), the ME layer highlighted, earlier rises in yellow.

    Below 110 columns of terminal the table is split in two: ΔFrac, ΔC↓ and max|h| follow in a second table.
    """
    from rich.console import Group

    me = report["me_layer"]
    rises = {r["layer"] for r in report["earlier_rises"]}
    wide = width >= 110
    main = [c for c in LOCATE_COLUMNS if c[2] or wide]
    title = f"{report['model_type']}: per-layer statistics (layers 0-based; medians over {len(report['prompts'])} prompts)"
    tables = [_layer_table(report, main, title, CAPTION, me, rises)]
    if not wide:
        rest = [LOCATE_COLUMNS[0], *(c for c in LOCATE_COLUMNS if not c[2])]
        tables.append(_layer_table(report, rest, "per-layer statistics, continued", None, me, rises))
    return tables[0] if wide else Group(*tables)


CAPTION = (
    "‖h₀‖, ‖hₜ‖: first / other tokens' output norm; ratio = ‖h₀‖/‖hₜ‖; step: ‖h₀‖ over the previous layer's; "
    "share, attn: FFN / attention branch over ‖h₀‖; FFN×: branch magnification, first vs others; ΔFrac, ΔKL at the pre-FFN norm; "
    "ΔC↓ after down (up, gate: --json/--plot); cos: first token across prompts; sink: attention on the first token; "
    "max|h| at token:dim (token 0 = first real token)"
)


def _layer_table(report: dict, columns: list, title: str, caption: str | None, me, rises: set) -> Table:
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False)
    for name, _, _ in columns:
        table.add_column(name, justify="right", no_wrap=True)
    for r in report["layers"]:
        style = "bold black on green" if r["layer"] == me else ("yellow" if r["layer"] in rises else None)
        table.add_row(*(cell(r, me) for _, cell, _ in columns), style=style)
    return table


def routing_table(report: dict) -> Table:
    """MoE models: per MoE layer, the experts the router sends the first token to, and across how many prompts."""
    table = Table(title="First-token routing (MoE layers, 0-based; share of prompts)", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("layer", "most common expert set", "its share", "experts (share)", "routed", "shared"):
        table.add_column(name, justify="right")
    rows = {r["layer"]: r for r in report["layers"]}
    for entry in report["routing"]:
        record = rows[entry["layer"]]
        experts = " ".join(f"{e['expert']}({e['share']:.0%})" for e in entry["experts"][:4])
        table.add_row(
            f"{entry['layer']}{' ME' if entry['layer'] == report['me_layer'] else ''}",
            ",".join(map(str, entry["modal_set"] or [])) or "-", num(entry["modal_set_share"], ".0%"), experts,
            num(record.get("routed_share"), ".2f"), num(record.get("shared_share"), ".2f"),
        )  # fmt: skip
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
            f"{run['mask_rate']:g}", num(masked, ".3f"), num(plain, ".3f"), change,
            num(run["mean_cosine_after_me"], ".3f"), num(run["unmasked_mean_cosine_after_me"], ".3f"),
        )  # fmt: skip
    return table


def locate_plot(report: dict, path: str | Path) -> Path:
    """locate_figure as a PNG."""
    return save_figure(locate_figure(report), path)


PANELS = [  # (title, [(metric, label), ...], log scale): the first seven panels, in reading order
    ("Residual-stream norm (log)", [("first_norm", "first token ‖h₀‖"), ("other_norm", "other tokens, mean ‖hₜ‖")], True),
    ("First token vs others, and step over the previous layer (log)",
     [("first_over_other", "‖h₀‖ / ‖hₜ‖"), ("step", "‖h₀‖ / previous layer's")], True),
    ("Pre-FFN norm: ΔFrac (left) and ΔKL (right axis)", [("delta_frac", "ΔFrac (top-1% |w| dims)")], False),
    ("Projection concentration ΔC", [("delta_c_up", "up"), ("delta_c_gate", "gate"), ("delta_c_down", "down")], False),
    ("FFN branch: magnification first vs others (log)", [("ffn_magnification", "FFN×"), ("norm_magnification", "pre-FFN norm×")], True),
    ("Attention sink mass and first-token cosine across prompts",
     [("sink_mass", "sink mass (attention on first token)"), ("first_token_cosine", "cos(h₀) across prompts")], False),
    ("Who writes the first token's output: branch norm / ‖h₀‖",
     [("attn_share", "attention"), ("ffn_share", "FFN (whole block)"), ("routed_share", "routed experts"),
      ("shared_share", "shared expert")], False),
]  # fmt: skip
LEGEND_OUTSIDE = {"fontsize": 8, "loc": "upper left", "borderaxespad": 0}  # right of each panel, never over its curves


def locate_figure(report: dict):
    """First vs other token norm (log) with the ME layer marked, and panels for the ME-layer metrics."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    me = report["me_layer"]
    fig = Figure(figsize=(17, 13), layout="constrained")
    axes = fig.subplots(4, 2, sharex=True).flatten()
    title = f"{model_label(report['model'])} ({report['model_type']}): "
    title += "no ME layer found" if me is None else f"ME layer {me} (0-based), {report['agreement']} prompts agree"
    fig.suptitle(title, fontsize=14)
    kl = metric_panels(axes, report)
    mark_layers(axes, report)
    for ax in (axes[0], axes[1], axes[3], axes[4], axes[5]):
        ax.legend(bbox_to_anchor=(1.02, 1), **LEGEND_OUTSIDE)
    handles = axes[2].get_legend_handles_labels()[0] + kl.get_legend_handles_labels()[0]
    kl.legend(handles=handles, bbox_to_anchor=(1.14, 1), **LEGEND_OUTSIDE)  # beyond the ΔKL axis and its label
    axes[6].legend(bbox_to_anchor=(1.02, 1), **LEGEND_OUTSIDE)
    bottom = [axes[6], axes[7]]
    if routing_panel(axes[7], report):
        axes[7].legend(bbox_to_anchor=(1.02, 1), **LEGEND_OUTSIDE)
    else:  # a dense model: no routing panel; the panel above it gets the layer axis
        axes[7].set_visible(False)
        axes[5].xaxis.set_tick_params(labelbottom=True)
        bottom[1] = axes[5]
    for ax in bottom:
        ax.set_xlabel("layer (0-based)")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))  # shared by every panel
    return fig


def metric_series(report: dict, key: str) -> list[float]:
    """One metric per layer, NaN where the report has none."""
    return [float("nan") if r.get(key) is None else r[key] for r in report["layers"]]


def metric_panels(axes, report: dict):
    """The PANELS, ΔKL on a right axis of the third (returned) and WeMask's sink mass in the sixth."""
    layers = [r["layer"] for r in report["layers"]]
    for ax, (name, keys, log) in zip(axes, PANELS):
        for key, label in keys:
            series = metric_series(report, key)
            if not all(math.isnan(value) for value in series):  # a dense model has no routed or shared experts
                ax.plot(layers, series, marker="o", markersize=3, label=label)
        if log:
            ax.set_yscale("log")
        ax.set_title(name, fontsize=11)
        ax.grid(alpha=0.3)
    kl = axes[2].twinx()
    kl.plot(layers, metric_series(report, "delta_kl"), marker="o", markersize=3, color="tab:orange", label="ΔKL (right axis)")
    kl.axhline(0, color="tab:orange", linewidth=0.5, alpha=0.5)
    axes[2].set_ylabel("ΔFrac", color="tab:blue")
    kl.set_ylabel("ΔKL", color="tab:orange")
    for run in report["mask_rates"]:
        axes[5].plot(layers, [float("nan") if v is None else v for v in run["sink_mass"]], linestyle="--",
                     label=f"sink mass, WeMask r={run['mask_rate']:g}")  # fmt: skip
    return kl


def mark_layers(axes, report: dict) -> None:
    """The earlier rises (dotted) and the ME layer (red) on every panel, labelled in the first."""
    me = report["me_layer"]
    for ax in axes:
        for i, rise in enumerate(report["earlier_rises"]):
            label = "earlier rise" if ax is axes[0] and i == 0 else None
            ax.axvline(rise["layer"], color="orange", linestyle=":", alpha=0.8, label=label)
        if me is not None:
            ax.axvline(me, color="red", linewidth=1.5, alpha=0.7, label=f"ME layer {me}" if ax is axes[0] else None)


def routing_panel(ax, report: dict) -> bool:
    """The first token's routing per MoE layer: the share of prompts sending it to the most common expert set,
    and to the most common single expert (named above its point); False (nothing drawn) on a dense model."""
    entries = report.get("routing") or []
    if not entries:
        return False
    ax.set_title("First-token routing concentration across prompts (MoE layers)", fontsize=11)
    ax.grid(alpha=0.3)
    layers = [e["layer"] for e in entries]
    ax.plot(layers, [e["modal_set_share"] for e in entries], marker="o", markersize=3, label="most common expert set")
    top = [e["experts"][0] if e["experts"] else {"expert": None, "share": float("nan")} for e in entries]
    ax.plot(layers, [t["share"] for t in top], marker="s", markersize=3, label="most common expert")
    for layer, t in zip(layers, top):
        ax.annotate(f"e{t['expert']}", (layer, t["share"]), fontsize=7, textcoords="offset points", xytext=(0, 4))
    ax.set_ylim(0, 1.1)
    return True
