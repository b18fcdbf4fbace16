"""(c) FFN only: the first token's FFN output at the ME layer zeroed (what the FFN writes for the other tokens kept)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from wemask_cli.probes.base import Probe, ProbeContext
from wemask_cli.probes.edits import hidden_of, hooked, tracked, with_hidden
from wemask_cli.probes.registry import register


@register
class ZeroFfn(Probe):
    name = "zero-ffn"
    summary = "the first token's FFN output at the ME layer zeroed"

    @contextmanager
    def applied(self, context: ProbeContext) -> Iterator[dict]:
        positions, tracking = tracked(context.part.layer)

        def zero_first(_module, _args, out):
            hidden = hidden_of(out)
            return with_hidden(out, torch.where(positions.first.unsqueeze(-1), torch.zeros_like(hidden), hidden))

        with hooked(tracking, context.part.ffn.register_forward_hook(zero_first)):
            yield {}
