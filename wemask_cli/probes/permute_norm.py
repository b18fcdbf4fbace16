"""(a) The ME layer's pre-FFN norm weights permuted (seeded by --permute-seed): the same values on other dims."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from wemask_cli.probes.base import Probe, ProbeContext
from wemask_cli.probes.edits import own_norm, replaced
from wemask_cli.probes.registry import register


def permutation(size: int, seed: int) -> torch.Tensor:
    """A random order of `size` dims, the same for the same seed."""
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed))


@register
class PermuteNorm(Probe):
    name = "permute-norm"
    summary = "the ME layer's pre-FFN norm weights permuted (seeded)"
    needs = ("ffn_norm",)

    def applies(self, context: ProbeContext) -> None:
        own_norm(context, self.name)

    @contextmanager
    def applied(self, context: ProbeContext) -> Iterator[dict]:
        weight = own_norm(context, self.name).weight
        order = permutation(weight.numel(), context.settings.seed).to(weight.device)
        with replaced(weight, weight.detach()[order]):
            yield {"seed": context.settings.seed}
