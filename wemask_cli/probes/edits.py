"""The edits probes share: a weight replaced for a block, hooks removed after it, the first token's (and a given
position's) place in the current forward, a module's output tensor read and replaced."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from wemask_cli.method.tokens import first_token_positions
from wemask_cli.probes.base import ProbeContext
from wemask_cli.runtime.errors import WeMaskError


def own_norm(context: ProbeContext, probe: str) -> nn.Module:
    """The ME layer's pre-FFN norm, refused where it also feeds the attention (the parallel layout)."""
    part = context.part
    norm = part.need("ffn_norm", f"--probe {probe}")
    if norm is part.attn_norm:
        raise WeMaskError(
            f"model_type={part.family!r} ({part.spec.layout}): the norm before the FFN also feeds the attention, so "
            f"--probe {probe} would edit both branches; leave it out for this model"
        )
    return norm


@contextmanager
def replaced(param: torch.Tensor, value: torch.Tensor) -> Iterator[None]:
    """`param` holds `value` inside the block and its own values again after it."""
    saved = param.detach().clone()
    with torch.no_grad():
        param.copy_(value)
    try:
        yield
    finally:
        with torch.no_grad():
            param.copy_(saved)


class TokenPositions:
    """A forward pre-hook on a decoder layer that keeps, for the current forward, which positions hold the first real
    token of each sequence and each position's id, for hooks inside the layer that edit those tokens."""

    def __init__(self):
        self.first: torch.Tensor | None = None  # (B, T) bool
        self.position_ids: torch.Tensor | None = None  # (B, T) long

    def __call__(self, _module, args: tuple, kwargs: dict) -> None:
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        batch, length = hidden.shape[:2]
        position_ids = kwargs.get("position_ids")
        self.first = first_token_positions(kwargs.get("attention_mask"), position_ids, batch, length)
        if position_ids is not None:
            self.position_ids = position_ids.expand(batch, length)

    def at(self, position: int) -> torch.Tensor:
        """(B, T) bool: the token at `position` (0-based, counted from the first real token; 1 or more) of each row."""
        if self.position_ids is None:
            raise WeMaskError("the decoder layer received no position ids: cannot find the token to patch")
        hit = self.position_ids == position
        return hit & (hit.cumsum(-1) == 1)


@contextmanager
def hooked(*handles) -> Iterator[None]:
    """Remove exactly these hook handles after the block."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def tracked(layer: nn.Module) -> tuple[TokenPositions, object]:
    """A TokenPositions installed on `layer`, and its handle."""
    positions = TokenPositions()
    return positions, layer.register_forward_pre_hook(positions, with_kwargs=True)


def hidden_of(out) -> torch.Tensor:
    """A module's output tensor (the first element of a tuple)."""
    return out[0] if isinstance(out, tuple) else out


def with_hidden(out, hidden: torch.Tensor):
    """`out` with its output tensor replaced by `hidden`."""
    return (hidden, *out[1:]) if isinstance(out, tuple) else hidden
