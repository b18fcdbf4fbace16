"""The sink paper's remedies as fine-tuning modules and hooks (SPEC section 5), each the identity at step 0.

- `LowRankGate`: g(x) = 2·σ(W_up · act(W_down · x)), W_up zero-initialised, so g = 1 at the start. It is
  applied as v ⊙ g = v + v ⊙ tanh(½ W_up · act(W_down · x)) (2·σ(z) = 1 + tanh(z/2)), which allocates two
  activation-sized tensors instead of four, and at the start is bitwise the identity: a zero W_up gives
  exact zeros, tanh(0) = 0, v + v · 0 = v for every finite v.
- `NormOutputGate` (GatedNorm): forward hook on an RMSNorm, y' = g(y) ⊙ y. It acts on the norm's output,
  so Gemma's `1 + w` scale needs nothing special.
- `NormInputScale` (PreAffine): forward pre-hook on an RMSNorm, RMSNorm(λ ⊙ x), λ starting at 1.
- `AttentionOutputGate` (gated attention): a pre-hook on the attention module takes the attention input; a
  pre-hook on `o_proj` multiplies the attention output by the gate computed from it. The input is handed
  from one to the other inside the same attention call (keyed by thread), and taken when used, so it never
  outlives the call that made it: exact under gradient checkpointing, which re-runs the whole attention.

Hooks honour an optional `active` predicate: while it returns False they leave the model unchanged.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class LowRankGate(nn.Module):
    """g(y) = 2·σ(W_up · act(W_down · y)): `down` (rank, d_in) seeded Kaiming-uniform, `up` (d_out, rank) zero."""

    def __init__(self, d_in: int, d_out: int, rank: int, *, swish: bool, seed: int, device=None, dtype=None):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        bound = 1.0 / math.sqrt(d_in)  # nn.Linear's default init, from a private generator (global RNG untouched)
        down = torch.empty(rank, d_in).uniform_(-bound, bound, generator=generator)
        self.down = nn.Parameter(down.to(device=device, dtype=dtype))
        self.up = nn.Parameter(torch.zeros(d_out, rank, device=device, dtype=dtype))
        self.swish = swish

    def forward(self, values: torch.Tensor, source: torch.Tensor | None = None) -> torch.Tensor:
        """values ⊙ g(source) (source defaults to values), in values' dtype."""
        source = values if source is None else source
        hidden = F.linear(source.to(self.down.dtype), self.down)
        if self.swish:
            hidden = F.silu(hidden)
        half = torch.tanh_(F.linear(hidden, 0.5 * self.up)).to(values.dtype)  # in place: linear keeps no output
        if torch.is_grad_enabled():
            return torch.addcmul(values, values, half)
        return half.add_(1.0).mul_(values)  # inference: no new activation-sized tensor (1 + 0 = 1, 1 · v = v)


class Scale(nn.Module):
    """A learnable per-dimension vector λ, starting at 1."""

    def __init__(self, d: int, *, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=dtype))


def is_active(active: Callable[[], bool] | None) -> bool:
    return active is None or bool(active())


class NormOutputGate:
    """Forward hook on an RMSNorm: y' = gate(y) ⊙ y (GatedNorm)."""

    def __init__(self, gate: LowRankGate, active: Callable[[], bool] | None = None):
        self.gate = gate
        self.active = active

    def __call__(self, module: nn.Module, args: tuple, output: torch.Tensor):
        if not is_active(self.active):
            return None
        return self.gate(output)


class NormInputScale:
    """Forward pre-hook (with kwargs) on an RMSNorm: its input x becomes λ ⊙ x (PreAffine)."""

    def __init__(self, scale: Scale, active: Callable[[], bool] | None = None):
        self.scale = scale
        self.active = active

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        if not is_active(self.active):
            return None
        if args:
            x = args[0]
            return (x * self.scale.weight.to(x.dtype), *args[1:]), kwargs
        x = kwargs["hidden_states"]
        return args, {**kwargs, "hidden_states": x * self.scale.weight.to(x.dtype)}


class AttentionOutputGate:
    """Gated attention: `compute` (pre-hook with kwargs on the attention) takes the attention input x, `apply`
    (pre-hook on o_proj) multiplies o_proj's input by g(x). See the module docstring for why it is exact."""

    def __init__(self, gate: LowRankGate, active: Callable[[], bool] | None = None):
        self.gate = gate
        self.active = active
        self.pending: dict[int, torch.Tensor] = {}

    def compute(self, module: nn.Module, args: tuple, kwargs: dict):
        key = threading.get_ident()
        self.pending.pop(key, None)
        if is_active(self.active):
            self.pending[key] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        return None

    def apply(self, module: nn.Module, args: tuple):
        source = self.pending.pop(threading.get_ident(), None)
        if source is None:
            return None
        return (self.gate(args[0], source), *args[1:])

    def __deepcopy__(self, memo):
        import copy

        twin = AttentionOutputGate(copy.deepcopy(self.gate, memo), self.active)
        memo[id(self)] = twin
        return twin
