"""apply_wemask(): zero the chosen dims of the first real token's attention input (SPEC section 3).

The hook is a forward pre-hook on each masked layer's attention module. It keeps no state between
calls: which tokens are first is derived, in every call, from the attention mask and position ids the
layer receives, so it stays exact under gradient checkpointing (where hooks run twice) and in any
trainer forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..errors import WeMaskError
from .arch import LayerParts, resolve_layers
from .config import WeMaskConfig, WeMaskConfigError


def first_token_positions(
    attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, batch: int, length: int
) -> torch.Tensor:
    """Boolean (batch, length): which positions of this forward are the first real token of a sequence.

    - 4D masks (sdpa, eager; also packed sequences): a first token is one that may attend to exactly one
      key, itself. This holds under left and right padding and for every packed sequence start, and never
      for a token decoded after a cached prefix.
    - 2D masks (flash attention, covering cached + new keys): the first key whose mask is 1.
    - No mask (unpadded causal batches): the positions whose position id is 0.
    """
    if attention_mask is None:
        if position_ids is None:
            raise WeMaskError("the attention layer received neither an attention mask nor position ids")
        return (position_ids == 0).expand(batch, length)
    if not isinstance(attention_mask, torch.Tensor):
        raise WeMaskError(
            f"attention masks of type {type(attention_mask).__name__} are not supported by WeMask: "
            "load the model with attn_implementation 'sdpa', 'eager' or 'flash_attention_2'"
        )
    if attention_mask.dim() == 4:
        if attention_mask.dtype == torch.bool:
            allowed = attention_mask[:, 0]
        else:
            allowed = attention_mask[:, 0] > torch.finfo(attention_mask.dtype).min / 2
        return (allowed.sum(-1) == 1).expand(batch, length)
    if attention_mask.dim() == 2:
        real = attention_mask.bool()
        first = real & (real.cumsum(-1) == 1)
        return first[:, -length:]
    raise WeMaskError(f"unexpected attention mask of shape {tuple(attention_mask.shape)} in the attention layer")


def cached_length(kwargs: dict, layer: int) -> int:
    """How many tokens this layer's KV cache already holds (0 without a cache or for a cache that needs a sync)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is None or not hasattr(cache, "get_seq_length"):
        return 0
    length = cache.get_seq_length(layer)
    return length if isinstance(length, int) else 0


class AttentionInputMask:
    """Forward pre-hook (with kwargs) on a layer's attention: scales the chosen dims of first tokens.

    `keep` is a (d,) vector: 1 - strength at the masked dims, 1 elsewhere.
    """

    def __init__(self, layer: int, dims: torch.Tensor, keep: torch.Tensor):
        self.layer = layer
        self.dims = dims
        self.keep = keep

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        if cached_length(kwargs, getattr(module, "layer_idx", self.layer)) > 0:
            return None  # decoding after a cached prefix: new tokens are never first tokens
        if "hidden_states" in kwargs:
            hidden = kwargs["hidden_states"]
        else:
            hidden, args = args[0], args[1:]
        first = first_token_positions(kwargs.get("attention_mask"), kwargs.get("position_ids"), *hidden.shape[:2])
        keep = self.keep.to(device=hidden.device, dtype=hidden.dtype)
        kwargs["hidden_states"] = hidden * torch.where(first.unsqueeze(-1), keep, 1.0)  # x * 1 is exact
        return args, kwargs


class WeMaskHandle:
    """The installed mask: `remove()` it, or use it as a context manager. `config` records the dims used."""

    def __init__(self, model: nn.Module, config: WeMaskConfig, hooked_layers: Sequence[int]):
        self.model = model
        self.config = config
        self.hooked_layers = list(hooked_layers)

    def remove(self) -> None:
        remove_wemask(self.model)

    def __enter__(self) -> "WeMaskHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def remove_wemask(model: nn.Module) -> int:
    """Remove every WeMask hook from `model` (copies made with deepcopy included); leave other hooks alone."""
    removed = 0
    for module in model.modules():
        for hook_id, hook in list(module._forward_pre_hooks.items()):
            if isinstance(hook, AttentionInputMask):
                del module._forward_pre_hooks[hook_id]
                module._forward_pre_hooks_with_kwargs.pop(hook_id, None)
                removed += 1
    return removed


def masked_layers(model: nn.Module) -> list[int]:
    """The layers that currently carry a WeMask hook."""
    return sorted(
        hook.layer
        for module in model.modules()
        for hook in module._forward_pre_hooks.values()
        if isinstance(hook, AttentionInputMask)
    )


def select_dims(
    config: WeMaskConfig,
    parts: Sequence[LayerParts],
    layers: Sequence[int],
    calibration_input_ids: torch.Tensor | None,
    model: nn.Module,
) -> dict[int, list[int]]:
    """The k dims to mask per layer, chosen once: by |w_eff| (the method), first-token activation, or seeded random."""
    d = parts[0].attn_scale().numel()
    k = config.num_dims(d)
    if config.select == "weight":
        return {l: torch.topk(parts[l].attn_scale().abs(), k).indices.tolist() for l in layers}
    if config.select == "random":
        picks = {}
        for l in layers:
            generator = torch.Generator().manual_seed(config.seed * 100_003 + l)
            picks[l] = torch.randperm(d, generator=generator)[:k].tolist()
        return picks
    activations = first_token_attention_inputs(model, parts, layers, calibration_input_ids)
    return {l: torch.topk(activations[l].abs(), k).indices.tolist() for l in layers}


@torch.no_grad()
def first_token_attention_inputs(
    model: nn.Module, parts: Sequence[LayerParts], layers: Sequence[int], input_ids: torch.Tensor | None
) -> dict[int, torch.Tensor]:
    """The first token's normed attention input at each layer, from one calibration forward."""
    if input_ids is None:
        config = getattr(model, "config", None)
        start = getattr(config, "bos_token_id", None) or getattr(config, "eos_token_id", None) or 0
        start = start[0] if isinstance(start, (list, tuple)) else start
        input_ids = torch.tensor([[int(start), *range(100, 116)]])
    device = next(model.parameters()).device
    captured: dict[int, torch.Tensor] = {}
    handles = [
        parts[l].attn_norm.register_forward_hook(
            lambda _m, _i, out, l=l: captured.__setitem__(l, out[0, 0].detach().float().cpu())
        )
        for l in layers
    ]
    try:
        model(input_ids=input_ids.to(device), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return captured


def apply_wemask(
    model: nn.Module, config: WeMaskConfig, *, calibration_input_ids: torch.Tensor | None = None
) -> WeMaskHandle:
    """Install WeMask on `model` (replacing any WeMask already there) and return its handle.

    Dims come from `config.dims` when recorded (a saved run), else are selected now from the weights.
    `calibration_input_ids` is used only by select='activation'.
    """
    remove_wemask(model)
    parts = resolve_layers(model)
    if not config.active:
        return WeMaskHandle(model, config.with_updates(dims=None), [])
    d = parts[0].attn_scale().numel()
    layers = config.layer_indices(len(parts))
    k = config.num_dims(d)
    dims = config.dims
    if dims is None:
        dims = select_dims(config, parts, layers, calibration_input_ids, model)
    else:
        bad = [l for l in layers if l not in dims or len(dims[l]) != k or not all(0 <= i < d for i in dims[l])]
        if bad or set(dims) != set(layers):
            raise WeMaskConfigError(
                f"the recorded dims do not fit this model/config (layers {bad or sorted(set(dims) ^ set(layers))}): "
                f"expected {k} dims in [0, {d}) for layers {layers[0]}..{layers[-1]}; drop 'dims' to reselect"
            )
    resolved = config.with_updates(dims={l: sorted(dims[l]) for l in layers})
    for l in layers:
        weight = parts[l].attn_norm.weight
        index = torch.tensor(resolved.dims[l], dtype=torch.long)
        keep = torch.ones(d, dtype=torch.float32)
        keep[index] = 1.0 - float(config.strength)
        hook = AttentionInputMask(l, index, keep.to(weight.device))
        parts[l].attention.register_forward_pre_hook(hook, with_kwargs=True)
    return WeMaskHandle(model, resolved, layers)
