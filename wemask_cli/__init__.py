"""wemask: weight-guided masking of the massive-activation token for LLM inference and TRL fine-tuning.

The public names load lazily, so `import wemask_cli` (and `wemask --help`) does not import torch.
"""

import importlib

from wemask_cli.runtime.errors import WeMaskError

__version__ = "0.1.0"
_METHOD = ("WeMaskConfig", "WeMaskConfigError", "WeMaskHandle", "apply_wemask", "remove_wemask")
__all__ = [*_METHOD, "WeMaskError", "__version__"]


def __getattr__(name: str):
    if name in _METHOD:
        return getattr(importlib.import_module(".method", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
