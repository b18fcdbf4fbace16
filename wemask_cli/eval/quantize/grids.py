"""The rounding math of the built-in grids (INT8, INT4, FP4 E2M1), along the last dimension, in float32.

torch is imported inside the functions: schemes.py declares the grids with them and must import without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

INT_QMAX = {8: 127, 4: 7}
FP4_MAX = 6.0


def _safe_scale(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    import torch

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


def round_int8(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """The INT8 grid (no blocks: `block_size` is not used)."""
    return quantize_int(x, 8)


def round_int4(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """The INT4 grid (no blocks: `block_size` is not used)."""
    return quantize_int(x, 4)


def round_to_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value to each element (|v| clamped to 6): steps of 0.5 below 2, 1 below 4, then 2."""
    import torch

    magnitude = v.abs().clamp(max=FP4_MAX)
    step = torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0))
    return torch.sign(v) * torch.round(magnitude / step) * step


def quantize_fp4(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """FP4 (E2M1) fake quantization with one scale (block max / 6) per `block_size` values along the last dim."""
    from torch import nn

    x = x.float()
    width = x.shape[-1]
    pad = -width % block_size
    if pad:
        x = nn.functional.pad(x, (0, pad))
    blocks = x.reshape(*x.shape[:-1], -1, block_size)
    scale = _safe_scale(blocks.abs().amax(dim=-1, keepdim=True), FP4_MAX)
    out = (round_to_e2m1(blocks / scale) * scale).reshape(x.shape)
    return out[..., :width] if pad else out
