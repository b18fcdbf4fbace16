"""A quantization scheme declared outside the package, as a user's module would (tests/test_quantize_registry.py).

`toy_bf16` rounds weights and inputs to bfloat16 and back. Importing this module registers it and needs no torch;
the rounding imports torch when called, and counts its calls.
"""

from __future__ import annotations

from wemask_cli.eval.quantize import Grid, Scheme, register

CALLS = []


def round_bf16(x, block_size):
    import torch

    CALLS.append(tuple(x.shape))
    return x.to(torch.bfloat16).float()


BF16 = Grid("bf16", round_bf16)
TOY = register(Scheme("toy_bf16", BF16, BF16, "toy: bfloat16 weights and inputs, from tests/", module=__name__))
