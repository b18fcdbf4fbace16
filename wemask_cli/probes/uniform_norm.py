"""(b) RMSNorm only: the ME layer's FFN sees the first token through its pre-FFN norm with uniform weights, each
the RMS of the norm's effective scale (so the normalised vector keeps about its length); other tokens unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from wemask_cli.method.arch import effective_scale
from wemask_cli.probes.base import Probe, ProbeContext
from wemask_cli.probes.edits import hooked, own_norm, tracked
from wemask_cli.probes.registry import register

DEFAULT_EPS = 1e-6


def uniform_rms_norm(x: torch.Tensor, scale: float, eps: float) -> torch.Tensor:
    """RMSNorm of `x` with every weight equal to `scale`."""
    h = x.float()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * scale


@register
class UniformNorm(Probe):
    name = "uniform-norm"
    summary = "the first token enters the ME layer's FFN through a norm with uniform weights"
    needs = ("ffn_norm",)

    def applies(self, context: ProbeContext) -> None:
        own_norm(context, self.name)

    @contextmanager
    def applied(self, context: ProbeContext) -> Iterator[dict]:
        norm = own_norm(context, self.name)
        scale = float(effective_scale(norm, context.part.spec.norm_offset).pow(2).mean().sqrt())
        eps = float(getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", None) or DEFAULT_EPS)
        positions, tracking = tracked(context.part.layer)

        def uniform_for_first(_module, args, out):
            first = positions.first.unsqueeze(-1)
            return torch.where(first, uniform_rms_norm(args[0], scale, eps).to(out.dtype), out)

        with hooked(tracking, norm.register_forward_hook(uniform_for_first)):
            yield {"uniform_weight": scale}
