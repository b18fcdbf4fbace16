"""What a probe is: a causal edit of the ME layer for analysis (never for training), applied inside a block and
undone after it, whatever happens inside.

A probe subclasses `Probe`, sets `name` (what `--probe` says) and `summary` (one line for the table and the docs),
lists in `needs` the ME layer's parts it edits (names of `method.arch.LayerParts`: "ffn_norm", ...), and writes
`applied(context)`: a context manager that edits `context.model` and yields a dict of what it did (written into the
report). `applies(context)` refuses, in one line, a model the probe does not apply to (the default: a part of
`needs` the ME layer lacks); a run of every probe skips it, with that line. `check(context)` refuses settings that do
not fit (an option out of range), whichever probes run. Hooks are handles removed in `finally`, edited weights are restored from a copy (probes/edits.py).
Torch-free: the registry reads this module for `--help`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

    from wemask_cli.method.arch import LayerParts


@dataclass(frozen=True)
class ProbeSettings:
    """The options every probe may read (`wemask probe`'s flags): the permutation's seed, how many singular directions
    to remove, the position the massive component is moved to, and the layer the ME layer is swapped with (None: the
    nearest layer holding the same parameters, see swap_layers.py)."""

    seed: int = 0
    top_k: int = 1
    patch_position: int = 1
    swap_with: int | None = None


@dataclass
class ProbeContext:
    """The model being probed, its layers, the ME layer (0-based), the settings, and the massive direction v: the
    unit mean direction of the first token's output at the ME layer over the prompts, measured on the unmodified
    model."""

    model: nn.Module
    parts: list[LayerParts]
    me_layer: int
    settings: ProbeSettings = field(default_factory=ProbeSettings)
    direction: torch.Tensor | None = None
    lengths: list[int] = field(default_factory=list)  # tokens per prompt

    @property
    def part(self) -> LayerParts:
        return self.parts[self.me_layer]


class Probe:
    """One causal edit at the ME layer (see the module docstring)."""

    name: str = ""
    summary: str = ""
    needs: tuple[str, ...] = ()

    def applies(self, context: ProbeContext) -> None:
        """WeMaskError (one line) when this probe does not apply to the model (a run of every probe skips it)."""
        for part in self.needs:
            context.part.need(part, f"--probe {self.name}")

    def check(self, context: ProbeContext) -> None:
        """WeMaskError (one line) when the settings do not fit the model or the prompts (always refused)."""

    def applied(self, context: ProbeContext) -> AbstractContextManager[dict]:
        raise NotImplementedError
