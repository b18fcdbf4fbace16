"""(d) The ME layer's FFN down projection without its top-k singular directions (--top-k):
W_down - Σ_{i<k} σ_i u_i v_iᵀ, for every token."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from wemask_cli.probes.base import Probe, ProbeContext
from wemask_cli.probes.edits import replaced
from wemask_cli.probes.registry import register
from wemask_cli.runtime.errors import WeMaskError


def without_top_directions(weight: torch.Tensor, k: int) -> tuple[torch.Tensor, float]:
    """`weight` less its k largest singular directions, and the share of its energy (Σσ²) they held."""
    u, s, vh = torch.linalg.svd(weight.detach().double(), full_matrices=False)
    removed = (u[:, :k] * s[:k]) @ vh[:k]
    return (weight.detach().double() - removed).to(weight.dtype), float(s[:k].pow(2).sum() / s.pow(2).sum())


@register
class DownSvd(Probe):
    name = "down-svd"
    summary = "the ME layer's FFN down projection without its top-k singular directions"

    def down(self, context: ProbeContext) -> torch.nn.Module:
        part = context.part
        down = part.ffn_projections().get("down")
        if down is None:
            raise WeMaskError(
                f"model_type={part.family!r}: layer {part.index}'s FFN is a mixture of experts, whose down projections "
                f"--probe {self.name} does not edit; leave it out for this model"
            )
        return down

    def applies(self, context: ProbeContext) -> None:
        self.down(context)

    def check(self, context: ProbeContext) -> None:
        rank = min(self.down(context).weight.shape)
        if not 1 <= context.settings.top_k <= rank:
            raise WeMaskError(f"--top-k {context.settings.top_k} is out of range: the down projection has rank at most {rank}, use 1..{rank}")

    @contextmanager
    def applied(self, context: ProbeContext) -> Iterator[dict]:
        weight = self.down(context).weight
        edited, share = without_top_directions(weight, context.settings.top_k)
        with replaced(weight, edited):
            yield {"top_k": context.settings.top_k, "energy_removed": share}
