"""apply_wemask(): zero the chosen dims of the first real token's attention input (SPEC section 3).

The hook is a forward pre-hook on each masked layer's attention module. It keeps no state between
calls: which tokens are first is derived, in every call, from the attention mask and position ids the
layer receives, so it stays exact under gradient checkpointing (where hooks run twice) and in any
trainer forward pass. With tokens='massive', a pre-hook on the decoder layer (which sees the residual
input) picks the tokens and hands them to the attention hook as a call argument, never as stored state.

Every hook is registered through `hooks.register_hook`, which keeps its RemovableHandle; removal never
touches torch's private hook dictionaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from wemask_cli.method.arch import LayerParts, hidden_size, resolve_layers
from wemask_cli.method.config import KIND, WeMaskConfig, WeMaskConfigError
from wemask_cli.method.direction import check_vectors, estimate_direction, first_token_attention_inputs, remove_direction
from wemask_cli.method.owned_hooks import OwnedHook, owned_hooks, register_hook, remove_owned
from wemask_cli.method.tokens import first_token_positions, massive_token_positions

TOKENS_KWARG = "wemask_tokens"  # the decoder layer's pre-hook passes the chosen tokens to the attention hook
__all__ = ["WeMaskHandle", "apply_wemask", "first_token_positions", "masked_layers", "remove_wemask"]


def cached_length(kwargs: dict, layer: int) -> int:
    """How many tokens this layer's KV cache already holds (0 without a cache or for a cache that needs a sync)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is None or not hasattr(cache, "get_seq_length"):
        return 0
    length = cache.get_seq_length(layer)
    return length if isinstance(length, int) else 0


class AttentionInputMask:
    """Forward pre-hook (with kwargs) on a layer's attention: scales the chosen dims of first (or massive) tokens.

    `keep` is a (d,) vector: 1 - strength at the masked dims, 1 elsewhere. With `direction` (unit v, alpha * v)
    the hook instead removes alpha * <h, v> v (select='direction'). `active`, when given, is asked on every call;
    while it returns False the hook changes nothing (DPO's unmasked reference pass).
    """

    def __init__(self, layer: int, dims: torch.Tensor, keep: torch.Tensor, active: Callable[[], bool] | None = None,
                 direction: tuple[torch.Tensor, torch.Tensor] | None = None):
        self.layer = layer
        self.dims = dims
        self.keep = keep
        self.active = active
        self.direction = direction

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        chosen = kwargs.pop(TOKENS_KWARG, None)  # always taken out, so the attention never sees it
        if self.active is not None and not self.active():
            return (args, kwargs) if chosen is not None else None
        if cached_length(kwargs, getattr(module, "layer_idx", self.layer)) > 0:
            # decoding after a cached prefix: new tokens are never masked
            return (args, kwargs) if chosen is not None else None
        if "hidden_states" in kwargs:
            hidden = kwargs["hidden_states"]
        else:
            hidden, args = args[0], args[1:]
        if chosen is None:
            chosen = first_token_positions(kwargs.get("attention_mask"), kwargs.get("position_ids"), *hidden.shape[:2])
        if self.direction is not None:
            unit, scaled = (vector.to(device=hidden.device, dtype=hidden.dtype) for vector in self.direction)
            kwargs["hidden_states"] = remove_direction(hidden, chosen.unsqueeze(-1), unit, scaled)
            return args, kwargs
        keep = self.keep.to(device=hidden.device, dtype=hidden.dtype)
        kwargs["hidden_states"] = hidden * torch.where(chosen.unsqueeze(-1), keep, 1.0)  # x * 1 is exact
        return args, kwargs


class MassiveTokenChooser:
    """Forward pre-hook (with kwargs) on a decoder layer: picks the massive tokens from the residual input and
    passes them to the attention hook as the call argument `wemask_tokens` (stateless; see tokens.py)."""

    def __init__(self, layer: int, active: Callable[[], bool] | None = None):
        self.layer = layer
        self.active = active

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        if self.active is not None and not self.active():
            return None
        if cached_length(kwargs, self.layer) > 0:
            return None
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        kwargs[TOKENS_KWARG] = massive_token_positions(hidden, kwargs.get("attention_mask"), kwargs.get("position_ids"))
        return args, kwargs


class WeMaskHandle:
    """The installed mask: `remove()` it, or use it as a context manager. `config` records the dims used."""

    def __init__(self, model: nn.Module, config: WeMaskConfig, hooked_layers: Sequence[int], records=()):
        self.model = model
        self.config = config
        self.hooked_layers = list(hooked_layers)
        self.records: list[OwnedHook] = list(records)

    def remove(self) -> int:
        """Remove exactly the hooks this handle installed (on this model, not on deep copies); returns how many
        attention hooks were live."""
        removed = sum(1 for record in self.records if isinstance(record.hook, AttentionInputMask) and record.alive())
        for record in self.records:
            record.remove()
        self.records = []
        return removed

    def __enter__(self) -> "WeMaskHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def remove_wemask(model: nn.Module) -> int:
    """Remove every WeMask hook from `model` (a deep copy's own hooks included, see hooks.py); leave other hooks
    alone. Returns how many attention hooks were removed."""
    masks = sum(1 for record in owned_hooks(model, KIND) if isinstance(record.hook, AttentionInputMask))
    remove_owned(model, KIND)
    return masks


def masked_layers(model: nn.Module) -> list[int]:
    """The layers that currently carry a WeMask hook."""
    return sorted(record.layer for record in owned_hooks(model, KIND) if isinstance(record.hook, AttentionInputMask))


def select_dims(
    config: WeMaskConfig,
    parts: Sequence[LayerParts],
    layers: Sequence[int],
    calibration_input_ids: torch.Tensor | None,
    model: nn.Module,
) -> dict[int, list[int]]:
    """The k dims to mask per layer, chosen once: by |w_eff| (the method), first-token activation, or seeded random."""
    d = hidden_size(parts)
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


def apply_wemask(
    model: nn.Module,
    config: WeMaskConfig,
    *,
    calibration_input_ids: torch.Tensor | None = None,
    active: Callable[[], bool] | None = None,
) -> WeMaskHandle:
    """Install WeMask on `model` (replacing any WeMask already there) and return its handle.

    Dims come from `config.dims` when recorded (a saved run), else are selected now from the weights; for
    select='direction', the massive direction comes from `config.vectors`, else is estimated now on the
    unmasked model. `calibration_input_ids` (a 1 x T tensor, or a list of them for the direction) is used by
    select='activation' and 'direction' only. `active`: a zero-argument predicate asked
    on every forward; while it returns False the hooks change nothing (e.g. DPO's unmasked reference pass).
    """
    remove_wemask(model)
    parts = resolve_layers(model)
    if not config.active:
        return WeMaskHandle(model, config.with_updates(dims=None), [])
    layers = config.layer_indices(len(parts))
    if config.select == "direction":
        resolved = resolve_direction(config, parts, layers, calibration_input_ids, model)
    else:
        resolved = config.with_updates(dims=resolve_dims(config, parts, layers, calibration_input_ids, model))
    d = hidden_size(parts)
    records = []
    for l in layers:
        device = next(parts[l].attention.parameters()).device
        index = torch.tensor(resolved.dims[l] if resolved.dims else [], dtype=torch.long)
        keep = torch.ones(d, dtype=torch.float32)
        keep[index] = 1.0 - float(config.strength)
        if config.tokens == "massive":
            chooser = MassiveTokenChooser(l, active)
            records.append(register_hook(parts[l].layer, KIND, l, chooser, pre=True, with_kwargs=True))
        direction = direction_pair(resolved, l, device)
        hook = AttentionInputMask(l, index, keep.to(device), active, direction)
        # prepended: other interventions' attention pre-hooks (gated attention) see the masked input, whatever
        # the order they were installed in
        records.append(register_hook(parts[l].attention, KIND, l, hook, pre=True, with_kwargs=True, prepend=True))
    return WeMaskHandle(model, resolved, layers, records)


def direction_pair(config: WeMaskConfig, layer: int, device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(unit v, alpha * v) for `layer` of a direction mask (float32, on `device`); None for a dims mask."""
    if config.select != "direction":
        return None
    unit = config.vectors[layer].to(device=device, dtype=torch.float32)
    return unit, unit * float(config.strength)


def resolve_direction(
    config: WeMaskConfig, parts: Sequence[LayerParts], layers: Sequence[int], calibration, model: nn.Module
) -> WeMaskConfig:
    """`config` with its massive direction: the recorded vectors checked against the model, or estimated now."""
    if config.vectors is not None:
        check_vectors(config.vectors, layers, hidden_size(parts))
        return config.with_updates(dims=None)
    prompts = calibration if isinstance(calibration, (list, tuple)) else [calibration]
    if calibration is None:
        prompts = [None]  # first_token_attention_inputs' own default prompt
    vectors, record = estimate_direction(model, parts, layers, prompts)
    return config.with_updates(dims=None, vectors=vectors, direction=record)


def resolve_dims(
    config: WeMaskConfig,
    parts: Sequence[LayerParts],
    layers: Sequence[int],
    calibration_input_ids: torch.Tensor | None,
    model: nn.Module,
) -> dict[int, list[int]]:
    """The recorded dims checked against the model, or dims selected now; sorted, per masked layer."""
    dims = config.dims
    if dims is None:
        dims = select_dims(config, parts, layers, calibration_input_ids, model)
    else:
        check_recorded_dims(config, layers, hidden_size(parts))
    return {l: sorted(dims[l]) for l in layers}


def check_recorded_dims(config: WeMaskConfig, layers: Sequence[int], d: int) -> None:
    """The dims `config` recorded fit `layers` of a model of hidden size `d` (k dims each, all in [0, d))."""
    k, dims = config.num_dims(d), config.dims
    bad = [l for l in layers if l not in dims or len(dims[l]) != k or not all(0 <= i < d for i in dims[l])]
    if bad or set(dims) != set(layers):
        raise WeMaskConfigError(
            f"the recorded dims do not fit this model/config (layers {bad or sorted(set(dims) ^ set(layers))}): "
            f"expected {k} dims in [0, {d}) for layers {layers[0]}..{layers[-1]}; drop 'dims' to reselect"
        )


def estimate_on(model: nn.Module, config, token_ids: Sequence[Sequence[int]]) -> tuple[dict[int, torch.Tensor], dict]:
    """estimate_direction for the layers `config` masks, from prompts given as token id lists (any WeMask removed
    first: the direction is the unmasked model's)."""
    remove_wemask(model)
    parts = resolve_layers(model)
    device = next(model.parameters()).device
    prompts = [torch.tensor([list(ids)], device=device) for ids in token_ids if len(ids) > 0]
    return estimate_direction(model, parts, config.layer_indices(len(parts)), prompts)
