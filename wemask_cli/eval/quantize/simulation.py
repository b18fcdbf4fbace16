"""Fake quantization of a loaded model with a registered scheme, and SmoothQuant's calibration (see __init__)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn

from wemask_cli.eval.quantize.schemes import DEFAULT_BLOCK_SIZE, Grid, check_alpha, check_block_size, lookup
from wemask_cli.method.arch import decoder_layers
from wemask_cli.runtime.errors import WeMaskError

SMOOTH_CLAMP = (1e-5, 1e5)


def on_grid(grid: Grid | None, x: torch.Tensor, block_size: int) -> torch.Tensor:
    """`x` rounded to `grid` along its last dim, in float32 (unchanged, as float32, for None: full precision)."""
    return x.float() if grid is None else grid.round(x, block_size)


def target_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """(name, module) of every nn.Linear inside the decoder layers, LoRA adapter matrices excluded."""
    found = []
    for index, layer in enumerate(decoder_layers(model)):
        for name, module in layer.named_modules():
            if isinstance(module, nn.Linear) and ".lora_" not in f".{name}":
                found.append((f"layers.{index}.{name}", module))
    return found


def _batches(calibration) -> list[dict]:
    if calibration is None:
        raise WeMaskError("SmoothQuant needs calibration batches (input ids) for its activation maxima")
    batches = [c if isinstance(c, dict) else {"input_ids": c} for c in calibration]
    if not batches:
        raise WeMaskError("SmoothQuant got no calibration batches")
    return batches


@torch.no_grad()
def activation_maxima(model: nn.Module, linears, calibration: Iterable) -> tuple[dict, dict]:
    """Forward the calibration batches: max|X_j| per input channel of each linear, and each linear's group leader.

    Consecutive linears called with the very same input tensor (q/k/v, gate/up) form one group.
    """
    maxima, leader, last = {}, {}, {"input": None, "name": None}

    def record(name, module, args):
        x = args[0]
        if name not in leader:
            leader[name] = leader[last["name"]] if x is last["input"] else name
        last.update(input=x, name=name)
        amax = x.detach().abs().reshape(-1, x.shape[-1]).amax(dim=0).float()
        maxima[name] = torch.maximum(maxima[name], amax) if name in maxima else amax

    handles = [module.register_forward_pre_hook(partial(record, name)) for name, module in linears]
    device = next(model.parameters()).device
    try:
        for batch in _batches(calibration):
            model(**{k: v.to(device) for k, v in batch.items()}, use_cache=False)
            last.update(input=None, name=None)
    finally:
        for handle in handles:
            handle.remove()
    return maxima, leader


def smoothing_factors(model: nn.Module, linears, alpha: float, calibration: Iterable) -> dict[str, torch.Tensor]:
    """SmoothQuant's s per linear (shared within a group), from a calibration pass."""
    check_alpha(alpha)
    maxima, leader = activation_maxima(model, linears, calibration)
    weights = dict(linears)
    groups: dict[str, list[str]] = {}
    for name in maxima:
        groups.setdefault(leader[name], []).append(name)
    factors = {}
    for head, members in groups.items():
        x_max = maxima[head]
        w_max = torch.stack([weights[m].weight.detach().abs().amax(dim=0).float() for m in members]).amax(dim=0)
        valid = (x_max > 0) & (w_max > 0)
        s = x_max.clamp(min=1e-30).pow(alpha) / w_max.clamp(min=1e-30).pow(1.0 - alpha)
        s = torch.where(valid, s, torch.ones_like(s)).clamp(*SMOOTH_CLAMP)
        factors.update({m: s for m in members})
    return factors


def _quantize_input(grid: Grid | None, block_size: int, smooth: torch.Tensor | None, module, args):
    x = args[0]
    y = x.float() if smooth is None else x.float() / smooth
    return (on_grid(grid, y, block_size).to(x.dtype), *args[1:])


@contextmanager
def simulate(
    model: nn.Module, scheme: str, *, block_size: int = DEFAULT_BLOCK_SIZE, smoothquant: float | None = None, calibration=None
) -> Iterator[nn.Module]:
    """Fake-quantize `model` with `scheme` inside the block; afterwards it is bitwise the original.

    `smoothquant` (α) with `calibration` (an iterable of input-id tensors, or dicts of model inputs) smooths
    first. `none` without SmoothQuant changes nothing.
    """
    spec = lookup(scheme)
    check_block_size([spec], block_size)
    if spec.weights is None and spec.inputs is None and smoothquant is None:
        yield model
        return
    linears = target_linears(model)
    factors = smoothing_factors(model, linears, smoothquant, calibration) if smoothquant is not None else {}
    originals, handles = [], []
    try:
        with torch.no_grad():
            for name, linear in linears:
                weight = linear.weight
                originals.append((weight, weight.detach().clone()))
                s = factors.get(name)  # computed on this linear's device
                smoothed = weight.float() if s is None else weight.float() * s
                weight.copy_(on_grid(spec.weights, smoothed, block_size).to(weight.dtype))
                handles.append(linear.register_forward_pre_hook(partial(_quantize_input, spec.inputs, block_size, s)))
        yield model
    finally:
        for handle in handles:
            handle.remove()
        with torch.no_grad():
            for weight, original in reversed(originals):
                weight.copy_(original)
