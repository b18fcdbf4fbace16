"""Owned hooks: every hook wemask registers keeps its RemovableHandle, recorded on the hooked module.

Nothing here reads torch's private hook dictionaries. Each hooked module carries a small list of
`OwnedHook` records (attribute `wemask_owned_hooks`), so `owned_hooks(model, kind)` finds what is live on
any model or wrapper (PEFT, a trainer's model) by walking `model.modules()`.

Deep copies: `copy.deepcopy(model)` copies torch's hooks *and* these records, and the copied
RemovableHandles point at the copy's hook dictionaries, so `remove_owned(copy, kind)` removes the copy's
hooks and leaves the original's alone (and the other way round).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

RECORDS = "wemask_owned_hooks"


@dataclass(eq=False)
class OwnedHook:
    """One registered hook: its intervention kind, the 0-based layer, the hooked module, the hook and its handle."""

    kind: str
    layer: int
    module: nn.Module = field(repr=False)
    hook: Callable = field(repr=False)
    handle: Any = field(repr=False)  # torch.utils.hooks.RemovableHandle

    def alive(self) -> bool:
        """Whether this hook is still installed (not yet removed through wemask)."""
        return any(record is self for record in self.module.__dict__.get(RECORDS, ()))

    def remove(self) -> None:
        """Remove this hook (a no-op when already removed)."""
        self.handle.remove()
        records = self.module.__dict__.get(RECORDS, [])
        if any(record is self for record in records):
            records[:] = [record for record in records if record is not self]
        if not records:
            self.module.__dict__.pop(RECORDS, None)


def register_hook(
    module: nn.Module,
    kind: str,
    layer: int,
    hook: Callable,
    *,
    pre: bool,
    with_kwargs: bool = False,
    prepend: bool = False,
) -> OwnedHook:
    """Register `hook` on `module` (forward pre-hook when `pre`, else forward hook) and record its handle."""
    if pre:
        handle = module.register_forward_pre_hook(hook, with_kwargs=with_kwargs, prepend=prepend)
    else:
        handle = module.register_forward_hook(hook, with_kwargs=with_kwargs, prepend=prepend)
    record = OwnedHook(kind, layer, module, hook, handle)
    module.__dict__.setdefault(RECORDS, []).append(record)
    return record


def owned_hooks(model: nn.Module, kind: str | None = None) -> list[OwnedHook]:
    """Every live owned hook of `kind` (all kinds when None) in `model`, in module order."""
    return [
        record
        for module in model.modules()
        for record in list(module.__dict__.get(RECORDS, ()))
        if kind is None or record.kind == kind
    ]


def remove_owned(model: nn.Module, kind: str) -> int:
    """Remove every owned hook of `kind` from `model`; returns how many. Other hooks are left alone."""
    found = owned_hooks(model, kind)
    for record in found:
        record.remove()
    return len(found)

