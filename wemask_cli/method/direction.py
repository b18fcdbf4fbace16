"""The massive direction v^(l) and the basis-free mask (SPEC section 6), for WeMask's select='direction'.

v^(l) is the mean, over the locate prompts, of the first token's attention input at layer l (the normed input in
pre-norm layouts), made a unit vector; one per masked layer, estimated on the model without a mask. The mask
subtracts the first token's component along it: h~ = h - alpha * <h, v> v. A run saves the vectors beside its
wemask_config.json (config.DIRECTION_FILE, tensors "layer.<l>") so that a reload removes the same direction.
Both engines compute the removal with `remove_direction`, the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from wemask_cli.method.arch import LayerParts
from wemask_cli.method.config import DIRECTION_FILE, WeMaskConfigError


def remove_direction(hidden: torch.Tensor, chosen: torch.Tensor, unit: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
    """`hidden` less `<hidden, unit> * scaled` (scaled = alpha * unit) where `chosen` (broadcast over the last dim) is
    True; exactly `hidden` elsewhere (h - 0 is exact)."""
    component = (hidden @ unit).unsqueeze(-1) * scaled
    return hidden - torch.where(chosen, component, 0.0)


@torch.no_grad()
def first_token_attention_inputs(
    model: nn.Module, parts: Sequence[LayerParts], layers: Sequence[int], input_ids: torch.Tensor | None
) -> dict[int, torch.Tensor]:
    """The first token's attention input (normed, in pre-norm layouts) at each layer, from one calibration forward."""
    if input_ids is None:
        config = getattr(model, "config", None)
        start = getattr(config, "bos_token_id", None) or getattr(config, "eos_token_id", None) or 0
        start = start[0] if isinstance(start, (list, tuple)) else start
        input_ids = torch.tensor([[int(start), *range(100, 116)]])
    device = next(model.parameters()).device
    captured: dict[int, torch.Tensor] = {}

    def capture(l: int, args: tuple, kwargs: dict) -> None:
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        captured[l] = hidden[0, 0].detach().float().cpu()

    handles = [
        parts[l].attention.register_forward_pre_hook(lambda _m, a, kw, l=l: capture(l, a, kw), with_kwargs=True)
        for l in layers
    ]
    try:
        model(input_ids=input_ids.to(device), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return captured


@torch.no_grad()
def estimate_direction(
    model: nn.Module, parts: Sequence, layers: Sequence[int], prompts: Sequence[torch.Tensor]
) -> tuple[dict[int, torch.Tensor], dict]:
    """({layer: unit v}, what the config records: prompts, norms of the mean, mean cosine of each prompt's first
    token to v) from one forward per prompt (1 x T token ids)."""
    if not prompts:
        raise WeMaskConfigError("select='direction' needs at least one prompt to estimate the massive direction")
    per_prompt = [first_token_attention_inputs(model, parts, layers, ids) for ids in prompts]
    vectors, norms, cosines = {}, {}, {}
    for l in layers:
        stacked = torch.stack([inputs[l] for inputs in per_prompt])  # (prompts, d), float32
        mean = stacked.mean(0)
        norm = float(mean.norm())
        if not norm > 0:
            raise WeMaskConfigError(f"the first token's attention input at layer {l} averages to zero: no direction to remove")
        vectors[l] = mean / norm
        cosines[l] = float(torch.nn.functional.cosine_similarity(stacked, vectors[l].unsqueeze(0)).mean())
        norms[l] = norm
    record = {"file": DIRECTION_FILE, "prompts": len(prompts), "estimated_on": "the first token's attention input",
              "norms": {str(l): round(norms[l], 6) for l in layers}, "cosines": {str(l): round(cosines[l], 6) for l in layers}}
    return vectors, record


def check_vectors(vectors: dict, layers: Sequence[int], d: int) -> None:
    """Recorded vectors fit the masked layers of a model of hidden size `d`, else one line."""
    bad = sorted(set(layers) ^ set(vectors)) + [l for l in layers if l in vectors and tuple(vectors[l].shape) != (d,)]
    if bad:
        raise WeMaskConfigError(
            f"the recorded massive direction does not fit this model/config (layers {bad}): expected a vector of size {d} "
            f"for each of layers {layers[0]}..{layers[-1]}; delete {DIRECTION_FILE} and 'direction' to estimate it again"
        )
