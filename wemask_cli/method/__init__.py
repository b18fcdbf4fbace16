"""Layer 0, the science (ranks: tests/test_layers.py).

The method: WeMask config, architecture adapter, the mask hook, the remedies' modules and ME-layer location.

Imports torch only, and lazily: `from wemask_cli.method.config import WeMaskConfig` stays torch-free.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CONFIG_NAME": "config",
    "WeMaskConfig": "config",
    "WeMaskConfigError": "config",
    "find_saved_config": "config",
    "WeMaskHandle": "wemask_hook",
    "apply_wemask": "wemask_hook",
    "masked_layers": "wemask_hook",
    "remove_wemask": "wemask_hook",
    "first_token_positions": "tokens",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
