"""Locate the ME layer (SPEC section 2): the detection Decision and the per-layer summary records.

The statistics come from `collect.collect_stats`, the per-token metrics from `metrics`; the names callers use
are re-exported here, so `from wemask_cli.method import locate` keeps giving the whole locating API.

Choices made here:
- Residual sinks: dims with |h_i| >= SINK_RMS x RMS(h) on at least SINK_SHARE of the non-first tokens
  of the residual stream entering the pre-FFN norm, reported with both norms' w_eff at those dims.
- Aggregates over prompts are medians; first-vs-other metrics skip degenerate prompts (1 token, or one
  token repeated). NaN where a metric is undefined.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from wemask_cli.method.arch import LayerParts, resolve_layers
from wemask_cli.method.batch import pad
from wemask_cli.method.collect import FRAC_SHARE, PromptStats, batches, collect_stats
from wemask_cli.method.metrics import (
    SINK_RMS,
    Tokens,
    concentration,
    first_minus_rest,
    first_over_rest,
    frac_in_dims,
    kl_to_scale,
    largest_activation,
    mean_pairwise_cosine,
    rest_mean,
    sink_hits,
    sink_mass,
)
from wemask_cli.method.moe import jump_writer, routing_summary
from wemask_cli.method.wemask_hook import masked_layers
from wemask_cli.runtime.errors import WeMaskError

# Re-exported for callers of `method.locate` (commands, locate_cache, tests, bench) besides what is defined here.
__all__ = [
    "FFN_SHARE", "FRAC_SHARE", "JUMP", "PERSIST", "SINK_RMS", "SINK_SHARE", "Detection", "LocateResult",
    "PromptStats", "Tokens", "batches", "collect_stats", "concentration", "detect", "detect_prompt",
    "first_minus_rest", "first_over_rest", "frac_in_dims", "kl_to_scale", "largest_activation", "layer_records",
    "locate", "mean_pairwise_cosine", "pad", "rest_mean", "sink_hits", "sink_mass",
]  # fmt: skip

SINK_SHARE = 0.5
JUMP = 8.0  # "about an order of magnitude": first/other ratio and step over the previous layer
PERSIST = 3  # layers after the jump that must keep it (fewer when the model ends sooner)
FFN_SHARE = 0.5  # the FFN branch must carry at least this share of the first token's output norm
RISE = 2.0  # an earlier rise: the first token grows >= 2x over the previous layer and is >= 2x the others
RELATIVE = {"other_norm", "norm_magnification", "delta_frac", "delta_kl", "delta_c_up", "delta_c_gate",
            "delta_c_down", "ffn_magnification", "sink_mass"}  # fmt: skip
SHARES = ("attn_share", "ffn_share", "routed_share", "shared_share")


# ---------------------------------------------------------------- detection (SPEC section 2, Decision)


def steps(first_norm: torch.Tensor, input_first_norm: torch.Tensor) -> torch.Tensor:
    """(..., L) the first token's norm over its norm entering the layer."""
    previous = torch.cat([input_first_norm[..., None], first_norm[..., :-1]], -1)
    return first_norm / previous


def detect_prompt(
    first_norm: torch.Tensor,
    other_norm: torch.Tensor,
    ffn_share: torch.Tensor,
    input_first_norm: float,
    degenerate: bool,
) -> int | None:
    """The first layer where the first token's norm steps up >= JUMP x over the previous layer and ends >= JUMP x
    the other tokens', written by the FFN branch, and stays up for PERSIST layers; None if there is none.

    A degenerate prompt has no other tokens to compare with: only the absolute step counts, and not at
    layer 0 (its step from the embeddings says nothing about emergence).
    """
    n = first_norm.numel()
    step = steps(first_norm, torch.tensor(input_first_norm, dtype=first_norm.dtype))
    ratio = first_norm / other_norm
    for l in range(n - 1):
        if step[l] < JUMP or not ffn_share[l] >= FFN_SHARE or (degenerate and l == 0):
            continue
        if not degenerate and not ratio[l] >= JUMP:
            continue
        after = range(l + 1, min(n, l + 1 + PERSIST))
        if all(first_norm[j] >= first_norm[l] / 2 and (degenerate or ratio[j] >= JUMP / 2) for j in after):
            return l
    return None


@dataclass
class Detection:
    """The located ME layer (None: no massive activation found), how the prompts voted, and why."""

    me_layer: int | None
    agree: int
    total: int
    per_prompt: list[int | None]
    step: float | None = None  # median over the agreeing prompts: first-token norm / previous layer's
    ratio: float | None = None  # median over the agreeing non-degenerate prompts: first-token norm / other tokens' mean
    ffn_share: float | None = None  # median over the agreeing prompts: ||FFN branch_0|| / ||output_0||
    writer: dict | None = None  # the branch that writes the jump (moe.jump_writer) and each branch's share
    earlier_rises: list[dict] = field(default_factory=list)

    @property
    def confidence(self) -> float:
        return self.agree / self.total if self.total else 0.0


def detect(stats: PromptStats) -> Detection:
    """Detect per prompt, then take the layer a strict majority of prompts agree on."""
    votes = [
        detect_prompt(
            stats.values["first_norm"][i],
            stats.values["other_norm"][i],
            stats.values["ffn_share"][i],
            float(stats.input_first_norm[i]),
            bool(stats.degenerate[i]),
        )
        for i in range(len(stats.lengths))
    ]
    counts = Counter(v for v in votes if v is not None)
    layer, agree = counts.most_common(1)[0] if counts else (None, 0)
    if 2 * agree <= len(votes):
        layer = None
    all_steps = steps(stats.values["first_norm"], stats.input_first_norm)
    ratios = stats.values["first_norm"] / stats.values["other_norm"]
    valid = ~stats.degenerate
    median_step, median_ratio = nanmedian(all_steps), nanmedian(ratios[valid])
    stop = layer if layer is not None else all_steps.shape[1]
    rises = [
        {"layer": l, "step": float(median_step[l]), "first_over_other": float(median_ratio[l])}
        for l in range(stop)
        if median_step[l] >= RISE and median_ratio[l] >= RISE
    ]
    detection = Detection(layer, agree if layer is not None else 0, len(votes), votes, earlier_rises=rises)
    if layer is not None:
        agreeing = torch.tensor([v == layer for v in votes])
        detection.step = float(all_steps[agreeing, layer].median())
        detection.ratio = plain(nanmedian(ratios[agreeing & valid])[layer])  # None when only degenerate prompts agree
        detection.ffn_share = float(stats.values["ffn_share"][agreeing, layer].median())
        detection.writer = jump_writer({key: plain(nanmedian(stats.values[key][agreeing])[layer]) for key in SHARES})
    return detection


def nanmedian(values: torch.Tensor) -> torch.Tensor:
    """(L,) median over prompts, ignoring NaN (NaN when a column has no value)."""
    if values.shape[0] == 0:
        return torch.full(values.shape[1:], math.nan, dtype=values.dtype)
    return values.nanmedian(0).values


# ---------------------------------------------------------------- per-layer summary


def residual_sinks(stats: PromptStats, parts: Sequence[LayerParts], layer: int) -> list[dict]:
    """Dims large (>= SINK_RMS x RMS) on at least SINK_SHARE of the non-first tokens at this layer's pre-FFN norm."""
    if stats.other_tokens == 0:
        return []
    share = stats.sink_count[layer] / stats.other_tokens
    dims = torch.nonzero(share >= SINK_SHARE).flatten().tolist()
    ffn_w, attn_w = parts[layer].ffn_scale(), parts[layer].scale_of("attn_norm")
    sinks = [
        {
            "dim": d,
            "token_share": float(share[d]),
            "mean_abs_over_rms": float(stats.sink_scale[layer, d] / stats.other_tokens),
            "ffn_norm_weight": None if ffn_w is None else float(ffn_w[d]),
            "attn_norm_weight": None if attn_w is None else float(attn_w[d]),
        }
        for d in dims
    ]
    return sorted(sinks, key=lambda s: -s["mean_abs_over_rms"])


def layer_records(stats: PromptStats, parts: Sequence[LayerParts]) -> list[dict]:
    """One record per layer: medians over prompts (first-vs-other metrics over non-degenerate prompts)."""
    valid = ~stats.degenerate
    medians = {
        name: nanmedian(values[valid] if name in RELATIVE else values)
        for name, values in stats.values.items()
        if not name.startswith("max_")
    }
    step = nanmedian(steps(stats.values["first_norm"], stats.input_first_norm))
    ratio = nanmedian((stats.values["first_norm"] / stats.values["other_norm"])[valid])
    cosine = mean_pairwise_cosine(stats.unit_sum, len(stats.lengths))
    strongest = stats.values["max_abs"].argmax(0)
    records = []
    for l, part in enumerate(parts):
        at = int(strongest[l])
        ffn_w = part.ffn_scale()
        record = {"layer": l, "first_norm": medians["first_norm"][l], "other_norm": medians["other_norm"][l]}
        record["first_over_other"] = ratio[l]
        record["step"] = step[l]
        record["max_abs"] = stats.values["max_abs"][at, l]
        record["max_abs_prompt"] = at
        record["max_abs_token"] = int(stats.values["max_token"][at, l])
        record["max_abs_dim"] = int(stats.values["max_dim"][at, l])
        for name in ("norm_magnification", "delta_frac", "delta_kl", "delta_c_up", "delta_c_gate", "delta_c_down",
                     "ffn_magnification", "ffn_share", "sink_mass", "attn_share", "routed_share", "shared_share"):  # fmt: skip
            record[name] = medians[name][l]
        record["first_token_cosine"] = cosine[l]
        record["ffn_norm_weight_mean_abs"] = None if ffn_w is None else ffn_w.abs().mean()
        record["residual_sinks"] = residual_sinks(stats, parts, l)
        if l in stats.first_experts:
            record["first_token_routing"] = routing_summary(stats.first_experts[l], ~stats.degenerate)
        records.append({key: plain(value) for key, value in record.items()})
    return records


def plain(value):
    """A JSON-ready number: Python int/float, NaN as None."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    return value


@dataclass
class LocateResult:
    stats: PromptStats
    detection: Detection
    layers: list[dict]


def locate(model: nn.Module, token_ids: Sequence[Sequence[int]], **collect) -> LocateResult:
    """Collect the statistics of these prompts and detect the ME layer (keyword args go to collect_stats)."""
    if masked_layers(model):
        raise WeMaskError("the model carries WeMask hooks: locating needs the unmasked model, remove them first")
    stats = collect_stats(model, token_ids, **collect)
    return LocateResult(stats, detect(stats), layer_records(stats, resolve_layers(model)))
