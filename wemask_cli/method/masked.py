"""One measurement with WeMask installed at a rate from a layer on, against the same model unmasked: the attention
sink, the first token's cross-prompt cosine and norm, and the diversity measures per layer (locate --mask-rate, and
each probe of `wemask probe --mask-rate`)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.collect import collect_stats
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.method.diversity import diversity_layers
from wemask_cli.method.locate import layer_records
from wemask_cli.method.wemask_hook import apply_wemask


def mean_after(rows: list[dict], key: str, layer: int) -> float | None:
    """The mean of `key` over the layers after `layer` where it is defined (None where it is nowhere)."""
    values = [row[key] for row in rows[layer + 1 :] if row[key] is not None]
    return sum(values) / len(values) if values else None


def masked_run(model: nn.Module, token_ids: Sequence[Sequence[int]], me_layer: int, rate: float, base: list[dict],
               **collect) -> dict:
    """Sink mass, cross-prompt cosine and the diversity measures per layer with WeMask at `rate` from `me_layer`, and
    their means after it beside those of `base` (the unmasked layer records); `collect` goes to collect_stats."""
    with apply_wemask(model, WeMaskConfig(mask_rate=rate, me_layer=me_layer)):
        stats = collect_stats(model, token_ids, **collect)
        diversity = diversity_layers(model, token_ids, collect["batch_size"], collect["pad_id"], collect.get("shares"))
    records = layer_records(stats, resolve_layers(model))
    return {
        "mask_rate": rate,
        "sink_mass": [r["sink_mass"] for r in records],
        "first_token_cosine": [r["first_token_cosine"] for r in records],
        "mean_sink_mass_after_me": mean_after(records, "sink_mass", me_layer),
        "unmasked_mean_sink_mass_after_me": mean_after(base, "sink_mass", me_layer),
        "mean_cosine_after_me": mean_after(records, "first_token_cosine", me_layer),
        "unmasked_mean_cosine_after_me": mean_after(base, "first_token_cosine", me_layer),
        "first_norm": [r["first_norm"] for r in records],
        "diversity": diversity,
    }
