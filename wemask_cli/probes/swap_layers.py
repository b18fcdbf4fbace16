"""(f) The ME layer's parameters swapped with those of layer --swap-with (default: the nearest layer holding the same
parameters, the one before it first: the layer before the ME layer in a dense model); swapping twice restores both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from wemask_cli.probes.base import Probe, ProbeContext
from wemask_cli.probes.registry import register
from wemask_cli.runtime.errors import WeMaskError


def shapes(layer: nn.Module) -> dict:
    return {name: param.shape for name, param in layer.named_parameters()}


def swap_with(context: ProbeContext) -> int:
    """The layer the ME layer is swapped with: --swap-with, else the nearest of the same shapes (the one before first;
    the one before the ME layer when there is none)."""
    if context.settings.swap_with is not None:
        return context.settings.swap_with
    me, count, mine = context.me_layer, len(context.parts), shapes(context.part.layer)
    for distance in range(1, count):
        for other in (me - distance, me + distance):
            if 0 <= other < count and shapes(context.parts[other].layer) == mine:
                return other
    return me - 1 if me > 0 else me + 1


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
        if shapes(context.part.layer) != shapes(context.parts[other].layer):
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
