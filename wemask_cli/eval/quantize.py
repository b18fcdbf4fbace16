"""Simulated (fake) quantization of a loaded model, as the sink paper measures robustness (SPEC §5).

`simulate(model, scheme)` rounds every nn.Linear inside the decoder layers (attention and FFN projections,
and any intervention's own linears there) to a low-precision grid and back, in float32 math, on whatever device
the model is on. The token embeddings and the lm_head stay in full precision, as in the paper's W/A setting;
LoRA's adapter matrices (`lora_A`/`lora_B`) stay in full precision too, their base layer is quantized.

Schemes (`SCHEMES`): `none`, `w8a8`, `w4a8`, `w4a4` (INT weights / INT inputs) and `fp4` (both in FP4).
- INT: symmetric round-to-nearest (ties to even), scale = max|x| / qmax with qmax 127 (int8) or 7 (int4);
  weights per output channel (one scale per row of W), inputs per token (one scale per token vector).
  A slice of zeros gets scale 1 (it stays zero).
- FP4: E2M1 values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6} with one scale per block of `block_size` (16 or 32)
  consecutive values along the input dimension, for weights and inputs alike; scale = block max|x| / 6, kept in
  float32 (not itself rounded to FP8 as NVFP4 would); ties go to the even mantissa (0.25 -> 0, 5 -> 4).
- Every quantizer works along the last dimension: W is (out, in), an input is (..., in).

Weights are fake-quantized in place once (an exact copy is kept and copied back on exit, so the model is
bitwise the original afterwards); each linear's input is fake-quantized per call by a forward pre-hook whose
handle is removed on exit.

SmoothQuant (`smoothquant=α`, with `calibration` batches): a calibration pass records max|X_j| per input channel
of every quantized linear; linears fed the very same tensor in a row (q/k/v, gate/up) share one factor, as
when s is folded into the preceding norm. Per channel j: s_j = max|X_j|^α / max_i|W_ij|^(1-α) (the weight max
over the group), s = 1 where either max is 0, clamped to [1e-5, 1e5]. Then W <- W·s before the weight
quantizer and X <- X/s in float32 just before the input quantizer: unquantized, the output is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from ..errors import WeMaskError
from ..method.arch import decoder_layers

SCHEMES = ("none", "w8a8", "w4a8", "w4a4", "fp4")
BLOCK_SIZES = (16, 32)
INT_QMAX = {8: 127, 4: 7}
FP4_MAX = 6.0
SMOOTH_CLAMP = (1e-5, 1e5)


def _safe_scale(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    return torch.where(amax > 0, amax / qmax, torch.ones_like(amax))


def round_to_int_grid(x: torch.Tensor, scale: torch.Tensor, qmax: int) -> torch.Tensor:
    """clamp(round(x / scale), -qmax, qmax) · scale (round half to even)."""
    return (x / scale).round_().clamp_(-qmax, qmax).mul_(scale)


def quantize_int(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric INT`bits` fake quantization with one scale per slice along the last dim (float32 result)."""
    x = x.float()
    qmax = INT_QMAX[bits]
    scale = _safe_scale(x.abs().amax(dim=-1, keepdim=True), qmax)
    return round_to_int_grid(x, scale, qmax)


def round_to_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value to each element (|v| clamped to 6): steps of 0.5 below 2, 1 below 4, then 2."""
    magnitude = v.abs().clamp(max=FP4_MAX)
    step = torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0))
    return torch.sign(v) * torch.round(magnitude / step) * step


def quantize_fp4(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """FP4 (E2M1) fake quantization with one scale (block max / 6) per `block_size` values along the last dim."""
    x = x.float()
    width = x.shape[-1]
    pad = -width % block_size
    if pad:
        x = nn.functional.pad(x, (0, pad))
    blocks = x.reshape(*x.shape[:-1], -1, block_size)
    scale = _safe_scale(blocks.abs().amax(dim=-1, keepdim=True), FP4_MAX)
    out = (round_to_e2m1(blocks / scale) * scale).reshape(x.shape)
    return out[..., :width] if pad else out


@dataclass(frozen=True)
class Scheme:
    """A parsed scheme: weight and input formats (`int8`, `int4`, `fp4` or None for full precision)."""

    name: str
    weights: str | None
    inputs: str | None
    block_size: int = 16

    @classmethod
    def parse(cls, name: str, block_size: int = 16) -> "Scheme":
        if name not in SCHEMES:
            raise WeMaskError(f"unknown quantization scheme {name!r}: choose from {', '.join(SCHEMES)}")
        if block_size not in BLOCK_SIZES:
            raise WeMaskError(f"--fp4-block-size must be one of {', '.join(map(str, BLOCK_SIZES))}, not {block_size}")
        if name == "none":
            return cls(name, None, None, block_size)
        if name == "fp4":
            return cls(name, "fp4", "fp4", block_size)
        return cls(name, f"int{name[1]}", f"int{name[3]}", block_size)

    def apply(self, fmt: str | None, x: torch.Tensor) -> torch.Tensor:
        """`x` rounded to format `fmt` along its last dim, in float32 (unchanged, as float32, for None)."""
        if fmt is None:
            return x.float()
        if fmt == "fp4":
            return quantize_fp4(x, self.block_size)
        return quantize_int(x, int(fmt[3:]))


def parse_schemes(text: str, *, block_size: int = 16, smoothquant: float | None = None) -> list[str]:
    """`--quantize none,w8a8,...` -> validated, de-duplicated names in the given order (the block size and
    SmoothQuant's α are checked too, so a bad flag fails before the model loads)."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise WeMaskError(f"--quantize needs at least one of {', '.join(SCHEMES)}")
    for name in names:
        Scheme.parse(name, block_size)
    check_alpha(smoothquant)
    return list(dict.fromkeys(names))


def check_alpha(alpha: float | None) -> None:
    if alpha is not None and not 0.0 <= alpha <= 1.0:
        raise WeMaskError(f"--smoothquant takes α in [0, 1] (0.5 is usual), not {alpha}")


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


def _quantize_input(scheme: Scheme, smooth: torch.Tensor | None, module, args):
    x = args[0]
    y = x.float() if smooth is None else x.float() / smooth
    return (scheme.apply(scheme.inputs, y).to(x.dtype), *args[1:])


@contextmanager
def simulate(
    model: nn.Module, scheme: str, *, block_size: int = 16, smoothquant: float | None = None, calibration=None
) -> Iterator[nn.Module]:
    """Fake-quantize `model` with `scheme` inside the block; afterwards it is bitwise the original.

    `smoothquant` (α) with `calibration` (an iterable of input-id tensors, or dicts of model inputs) smooths
    first. `none` without SmoothQuant changes nothing.
    """
    spec = Scheme.parse(scheme, block_size)
    if spec.weights is None and smoothquant is None:
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
                weight.copy_(spec.apply(spec.weights, smoothed).to(weight.dtype))
                handles.append(linear.register_forward_pre_hook(partial(_quantize_input, spec, s)))
        yield model
    finally:
        for handle in handles:
            handle.remove()
        with torch.no_grad():
            for weight, original in reversed(originals):
                weight.copy_(original)
