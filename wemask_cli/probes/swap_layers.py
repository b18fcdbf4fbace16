"""(f) The ME layer's parameters swapped with those of layer --swap-with (default: the layer before the ME layer,
the one after it for an ME layer 0); swapping twice restores both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from wemask_cli.probes.base import Probe, ProbeContext
from wemask_cli.probes.registry import register
from wemask_cli.runtime.errors import WeMaskError


def swap_with(context: ProbeContext) -> int:
    """The layer the ME layer is swapped with."""
    asked = context.settings.swap_with
    if asked is not None:
        return asked
    return context.me_layer - 1 if context.me_layer > 0 else context.me_layer + 1


def swap_parameters(one: nn.Module, other: nn.Module) -> None:
    """Exchange the values of two modules' parameters of the same names and shapes."""
    theirs = dict(other.named_parameters())
    for name, param in one.named_parameters():
        param.data, theirs[name].data = theirs[name].data, param.data


@register
class SwapLayers(Probe):
    name = "swap-layers"
    summary = "the ME layer's parameters swapped with layer --swap-with's"

    def check(self, context: ProbeContext) -> None:
        other, me, count = swap_with(context), context.me_layer, len(context.parts)
        if other == me:
            raise WeMaskError(f"--swap-with {other} is the ME layer itself: give another layer, 0..{count - 1} (0-based)")
        if not 0 <= other < count:
            raise WeMaskError(f"--swap-with {other} is outside the model: it has {count} layers, use 0..{count - 1} (0-based)")
        mine = {n: p.shape for n, p in context.part.layer.named_parameters()}
        theirs = {n: p.shape for n, p in context.parts[other].layer.named_parameters()}
        if mine != theirs:
            raise WeMaskError(
                f"layers {me} and {other} hold different parameters (a dense and an MoE layer, or other shapes): "
                "give --swap-with a layer of the same kind"
            )

    @contextmanager
    def applied(self, context: ProbeContext) -> Iterator[dict]:
        other = swap_with(context)
        one, two = context.part.layer, context.parts[other].layer
        swap_parameters(one, two)
        try:
            yield {"swap_with": other}
        finally:
            swap_parameters(one, two)
