"""(e) Patching: at the ME layer's output, the first token's massive component (its projection on v, the unit mean
direction of the first token's output there on the unmodified model) is removed from it and added to the token at
--patch-position."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from wemask_cli.probes.base import Probe, ProbeContext
from wemask_cli.probes.edits import hidden_of, hooked, tracked, with_hidden
from wemask_cli.probes.registry import register
from wemask_cli.runtime.errors import WeMaskError


def moved(hidden: torch.Tensor, first: torch.Tensor, target: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """`hidden` (B, T, d) with each row's first-token component along `direction` moved to its `target` token."""
    v = direction.to(device=hidden.device, dtype=hidden.dtype)
    component = ((hidden * first.unsqueeze(-1)).sum(1) @ v).view(-1, 1, 1) * v  # (B, 1, d)
    return hidden - component * first.unsqueeze(-1) + component * target.unsqueeze(-1)


@register
class Patch(Probe):
    name = "patch"
    summary = "the first token's massive component moved to the token at --patch-position"

    def check(self, context: ProbeContext) -> None:
        position, shortest = context.settings.patch_position, min(context.lengths)
        if not 1 <= position < shortest:
            raise WeMaskError(
                f"--patch-position {position} is beyond a prompt: the shortest has {shortest} tokens, use "
                f"1..{shortest - 1} (0 is the first token), or longer prompts"
            )

    @contextmanager
    def applied(self, context: ProbeContext) -> Iterator[dict]:
        positions, tracking = tracked(context.part.layer)
        position = context.settings.patch_position

        def move(_module, _args, out):
            return with_hidden(out, moved(hidden_of(out), positions.first, positions.at(position), context.direction))

        with hooked(tracking, context.part.layer.register_forward_hook(move)):
            yield {"patch_position": position}
