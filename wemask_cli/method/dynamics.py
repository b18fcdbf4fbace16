"""Training dynamics on a fixed probe: three numbers per measurement (`wemask sft|dpo|grpo|kto --log-diagnostics`).

Over a few prompts, through the model as it is (every hook it carries, the WeMask mask included):
- `first_token_norm`: the first real token's norm at the output of the ME layer, the mean over the prompts;
- `sink_mass`: the mean attention weight on the first real token (metrics.sink_mass) over the prompts and the layers
  after the ME layer;
- `effective_rank`: the effective rank of the other tokens (diversity.py's `effective_rank_rest`, the first token
  excluded) over the prompts and the layers after the ME layer.
"After the ME layer" is the layers after it, or the last layer when the ME layer is the last. NaN where a value is
undefined (a prompt of one token). The prompts run in one padded batch with eager attention (collect.run_batches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.collect import run_batches
from wemask_cli.method.diversity import DiversityRecorder, DiversityStats
from wemask_cli.method.metrics import Tokens, first_value

NAMES = ("first_token_norm", "sink_mass", "effective_rank")


def layers_after(me_layer: int, layers: int) -> list[int]:
    """The layers whose sink mass and effective rank are averaged: those after the ME layer (the last one when none)."""
    return list(range(min(me_layer + 1, layers - 1), layers))


def finite_mean(values: torch.Tensor) -> float:
    kept = values[torch.isfinite(values)]
    return float(kept.mean()) if kept.numel() else math.nan


@torch.no_grad()
def probe_dynamics(model: nn.Module, token_ids: Sequence[Sequence[int]], me_layer: int, *, pad_id: int = 0) -> dict[str, float]:
    """{name: value} of NAMES for the prompts `token_ids` (lists of token ids, each non-empty) at `me_layer` (0-based)."""
    parts = resolve_layers(model)
    after = layers_after(me_layer, len(parts))
    stats = DiversityStats.empty(len(token_ids), len(parts))
    recorder = DiversityRecorder([parts[l] for l in after], stats)
    norms = torch.full((len(token_ids),), math.nan, dtype=torch.float64)

    def start(_k: int, rows: list[int], mask: torch.Tensor) -> None:
        recorder.rows, recorder.tokens = list(rows), Tokens.from_mask(mask)

    def on_me_layer(_module, _inputs, out) -> None:
        h = (out[0] if isinstance(out, tuple) else out).detach().float()
        norms[recorder.rows] = first_value(h.norm(dim=-1), recorder.tokens).double().cpu()

    handle = parts[me_layer].layer.register_forward_hook(on_me_layer)
    try:
        with recorder.installed():
            run_batches(model, token_ids, start, batch_size=len(token_ids), pad_id=pad_id, padding_side="right", progress=None)
    finally:
        handle.remove()
    return {
        "first_token_norm": finite_mean(norms),
        "sink_mass": finite_mean(stats.values["sink_mass"][:, after]),
        "effective_rank": finite_mean(stats.values["effective_rank_rest"][:, after]),
    }
