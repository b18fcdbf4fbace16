"""`wemask locate`'s measurement: the report `run_locate` builds from a loaded model (the dict written by --json;
keys documented in docs/reference/outputs.md). Imports torch: commands/locate.py imports it once its checks pass.

Report keys: model, model_type, num_layers, layer_indexing ("0-based"), me_layer (int or null), confidence
(share of prompts agreeing), agreement ("16/16"), jump (step, first_over_other, ffn_share and writer at the ME
layer: the branch writing most of the jump, attention / FFN or routed experts / shared expert, with each share),
routing (MoE models: per MoE layer, the first token's experts and how concentrated they are; null otherwise),
me_layer_metrics (that layer's record), earlier_rises, metric_peaks, residual_sink_dims, verdict, settings,
prompts (one record per prompt: index, preview, tokens, first_token_is_bos, degenerate, me_layer), layers (one
record per layer), diversity (per layer: method/diversity.py's measures averaged over the prompts), mask_rates (one
record per --mask-rate, its diversity included), massive_tokens (see method/massive_tokens.py; null without an ME
layer), interventions (the saved ones re-installed on load); under a launcher, settings.processes.

Under a launcher every process measures its share of the batches (batch k on rank k % N, runtime/ranks.py) and the
shares are joined on every process (method/shares.py: the sums added in batch order), so each builds the report one
process builds, to the last bit; commands/locate.py writes it from the main process.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from wemask_cli.method import locate as method
from wemask_cli.method import massive_tokens as massive
from wemask_cli.method.arch import model_type, resolve_layers
from wemask_cli.method.diversity import diversity_layers
from wemask_cli.method.masked import masked_run
from wemask_cli.models.bos import starts_with_bos
from wemask_cli.models.loading import LoadedModel
from wemask_cli.prompts.rendering import encode
from wemask_cli.runtime import ranks

PEAKS = {  # metric -> (its ME-layer signature is a maximum, not a minimum; name in the verdict)
    "first_over_other": (True, "first/other norm ratio"), "norm_magnification": (True, "pre-FFN norm magnification"),
    "delta_frac": (True, "ΔFrac"), "delta_kl": (False, "ΔKL (minimum)"), "delta_c_up": (True, "ΔC up"),
    "delta_c_gate": (True, "ΔC gate"), "delta_c_down": (True, "ΔC down"), "ffn_magnification": (True, "FFN magnification"),
}  # fmt: skip


def preview(prompt: str | list[dict], width: int = 60) -> str:
    text = prompt if isinstance(prompt, str) else " | ".join(f"{m['role']}: {m['content']}" for m in prompt)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def metric_peaks(layers: list[dict]) -> dict[str, int | None]:
    """For each section-2 metric, the layer where it is largest (smallest for ΔKL)."""
    peaks = {}
    for name, (largest, _) in PEAKS.items():
        values = [(r[name], r["layer"]) for r in layers if r[name] is not None]
        peaks[name] = (max(values) if largest else min(values))[1] if values else None
    return peaks


def sink_dims(layers: list[dict]) -> list[dict]:
    """Residual-sink dims over the whole model: in how many layers each is one, and its median norm weights."""
    by_dim: dict[int, list[dict]] = {}
    for record in layers:
        for sink in record["residual_sinks"]:
            by_dim.setdefault(sink["dim"], []).append(sink)
    summary = [
        {
            "dim": dim,
            "layers": len(sinks),
            "median_ffn_norm_weight": float(torch.tensor([s["ffn_norm_weight"] for s in sinks]).median()),
            "median_attn_norm_weight": float(torch.tensor([s["attn_norm_weight"] for s in sinks]).median()),
            "median_abs_over_rms": float(torch.tensor([s["mean_abs_over_rms"] for s in sinks]).median()),
        }
        for dim, sinks in by_dim.items()
    ]
    return sorted(summary, key=lambda s: -s["layers"])


def prompt_records(tokenizer, prompts: list, ids: list[list[int]], result) -> list[dict]:
    """Per prompt: its preview, length, whether its first token is BOS, and the ME layer it alone points to."""
    return [
        {
            "index": i,
            "preview": preview(prompt),
            "tokens": len(ids[i]),
            "first_token_is_bos": starts_with_bos(tokenizer, ids[i]),
            "degenerate": bool(result.stats.degenerate[i]),
            "me_layer": result.detection.per_prompt[i],
        }
        for i, prompt in enumerate(prompts)
    ]


def run_locate(
    loaded: LoadedModel,
    prompts: list,
    *,
    max_length: int = 256,
    batch_size: int = 8,
    mask_rates: list[float] | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Locate the ME layer on these prompts (and measure each mask rate); the report as a JSON-ready dict. The sizes
    are the command's to check (commands/locate.py), before the model loads."""
    parts = resolve_layers(loaded.model)
    ids = encode(loaded.tokenizer, prompts, max_length)
    split = ranks.batch_shares()
    collect = dict(batch_size=batch_size, pad_id=loaded.tokenizer.pad_token_id or 0, progress=progress, shares=split)
    with massive.recording(loaded.model, ids, split and split.runs) as norms:
        result = method.locate(loaded.model, ids, **collect)
    norms = split.join(norms) if split else norms
    detection, layers = result.detection, result.layers
    me = detection.me_layer
    report = {
        "model": loaded.source,
        "model_type": model_type(loaded.model),
        "num_layers": len(parts),
        "layer_indexing": "0-based",
        "me_layer": me,
        "confidence": detection.confidence,
        "agreement": f"{detection.agree}/{detection.total}",
        "jump": None if me is None else {
            "step": detection.step, "first_over_other": detection.ratio, "ffn_share": detection.ffn_share,
            "writer": detection.writer,
        },  # fmt: skip
        "routing": routing(layers),
        "me_layer_metrics": None if me is None else layers[me],
        "earlier_rises": detection.earlier_rises,
        "metric_peaks": metric_peaks(layers),
        "residual_sink_dims": sink_dims(layers),
        "settings": {
            "max_length": max_length, "batch_size": batch_size, "jump": method.JUMP, "persist": method.PERSIST,
            "ffn_share": method.FFN_SHARE, "frac_share": method.FRAC_SHARE, "sink_rms": method.SINK_RMS,
            "sink_share": method.SINK_SHARE, **({"processes": ranks.world_size()} if split else {}),
        },  # fmt: skip
        "prompts": prompt_records(loaded.tokenizer, prompts, ids, result),
        "layers": layers,
        "diversity": diversity_layers(loaded.model, ids, batch_size, collect["pad_id"], split),
        "mask_rates": [],
        "massive_tokens": None if me is None else massive.massive_tokens(norms, ids, loaded.tokenizer, me),
        "interventions": loaded.installed.describe() if getattr(loaded, "installed", None) else [],
    }
    if mask_rates and me is not None:
        report["mask_rates"] = [masked_run(loaded.model, ids, me, rate, layers, **collect) for rate in mask_rates]
    report["verdict"] = verdict(report)
    return report


def routing(layers: list[dict]) -> list[dict] | None:
    """Per MoE layer, where the router sends the first token and how concentrated that is (None: no MoE layer)."""
    found = [{"layer": r["layer"], **r["first_token_routing"]} for r in layers if "first_token_routing" in r]
    return found or None


def writer_words(jump: dict) -> str:
    """'the FFN branch (97% of ...)', or the MoE branch that writes the most of it."""
    writer = jump.get("writer") or {}
    branch, shares = writer.get("branch"), writer.get("shares", {})
    if branch in (None, "FFN"):
        return f"the FFN branch ({jump['ffn_share']:.0%} of the first token's output norm)"
    others = ", ".join(f"{name} {share:.0%}" for name, share in shares.items() if name != branch)
    return f"the {branch} ({shares[branch]:.0%} of the first token's output norm; {others})"


def verdict(report: dict) -> str:
    """One plain-language paragraph: the answer, why, how sure, and what else was seen."""
    me, agreement = report["me_layer"], report["agreement"]
    if me is None:
        votes = [p["me_layer"] for p in report["prompts"] if p["me_layer"] is not None]
        why = (
            f"the prompts disagree ({len(votes)} of {len(report['prompts'])} found a jump, at layers "
            f"{sorted(set(votes))})"
            if votes
            else f"no layer makes the first token's norm jump by {method.JUMP:g}x or more (over the previous layer "
            "and over the other tokens) and stay up"
        )
        return f"No ME layer found in {report['model_type']} ({report['num_layers']} layers): {why}. The model shows no massive activation on these prompts."
    jump, record = report["jump"], report["me_layer_metrics"]
    text = (
        f"Layer {me} (0-based, of {report['num_layers']}) is the ME layer: there the first token's hidden-state norm "
        f"jumps {jump['step']:.0f}x over {f'layer {me - 1}' if me else 'the embeddings'}"
        + (f" and reaches {jump['first_over_other']:.0f}x the other tokens' norm" if jump["first_over_other"] else "")
        + f", written by {writer_words(jump)}, "
        f"and it stays up in the following layers. {agreement} prompts agree (confidence {report['confidence']:.2f})."
    )
    routed = record.get("first_token_routing")
    if routed and routed["modal_set"] is not None:
        text += (f" There the router sends the first token to expert(s) {', '.join(map(str, routed['modal_set']))} "
                 f"in {routed['modal_set_share']:.0%} of the prompts.")  # fmt: skip
    if report["earlier_rises"]:
        rises = ", ".join(f"{r['layer']} (x{r['step']:.1f})" for r in report["earlier_rises"])
        text += f" Smaller earlier rises at layer(s) {rises} are not the ME layer."
    peaks = report["metric_peaks"]
    agree = [PEAKS[name][1] for name, layer in peaks.items() if layer == me]
    elsewhere = [f"{PEAKS[name][1]} at {layer}" for name, layer in peaks.items() if layer not in (me, None)]
    text += f" Section-2 metrics peaking here: {', '.join(agree) or 'none'}"
    text += f"; elsewhere: {', '.join(elsewhere)}." if elsewhere else "."
    after = [r for r in report["layers"][me + 1 :] if r["sink_mass"] is not None]
    cosine = record["first_token_cosine"]
    if cosine is not None:
        text += f" Its output for the first token has cross-prompt cosine {cosine:.3f}"
        text += " (an almost fixed direction)" if cosine > 0.95 else ""
        if after:
            text += f" and queries in later layers put {sum(r['sink_mass'] for r in after) / len(after):.0%} of their attention on it (sink)"
        text += "."
    sinks = [s for s in report["residual_sink_dims"] if s["layers"] >= report["num_layers"] // 2]
    if sinks:
        dims = ", ".join(f"{s['dim']} (pre-FFN norm weight ~{s['median_ffn_norm_weight']:.3f})" for s in sinks)
        text += f" Residual sinks (large on most tokens in most layers): dim {dims}."
    if report.get("massive_tokens"):
        text += massive.describe(report["massive_tokens"])
    return text
