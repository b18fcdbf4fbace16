"""Simulated (fake) quantization of a loaded model, as the sink paper measures robustness (SPEC §5).

`simulate(model, scheme)` rounds every nn.Linear inside the decoder layers (attention and FFN projections,
and any intervention's own linears there) to a low-precision grid and back, in float32 math, on whatever device
the model is on. The token embeddings and the lm_head stay in full precision, as in the paper's W/A setting;
LoRA's adapter matrices (`lora_A`/`lora_B`) stay in full precision too, their base layer is quantized.

Schemes (declared and registered in schemes.py, the only place that names them): `none`, `w8a8`, `w4a8`, `w4a4`
(INT weights / INT inputs) and `fp4` (both in FP4).
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

- schemes.py     Grid, Scheme, the registry, --quantize / --fp4-block-size parsing and help (torch-free)
- grids.py       the INT and FP4 rounding math
- simulation.py  target_linears, SmoothQuant's factors, `simulate` (imported on first use: --help stays torch-free)
"""

from __future__ import annotations

from wemask_cli.eval.quantize.grids import quantize_fp4, quantize_int, round_to_e2m1, round_to_int_grid
from wemask_cli.eval.quantize.schemes import DEFAULT_BLOCK_SIZE, SCHEMES, Grid, Scheme, check_alpha, check_block_size, lookup, parse_schemes, register, schemes

TORCH_NAMES = ("simulate", "smoothing_factors", "activation_maxima", "target_linears")


def __getattr__(name: str):
    """simulation.py's functions, imported (with torch) when first asked for."""
    if name in TORCH_NAMES:
        from wemask_cli.eval.quantize import simulation

        return getattr(simulation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "SCHEMES",
    "Grid",
    "Scheme",
    "activation_maxima",
    "check_alpha",
    "check_block_size",
    "lookup",
    "parse_schemes",
    "quantize_fp4",
    "quantize_int",
    "register",
    "round_to_e2m1",
    "round_to_int_grid",
    "schemes",
    "simulate",
    "smoothing_factors",
    "target_linears",
]
