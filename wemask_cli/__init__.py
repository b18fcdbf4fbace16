"""wemask: weight-guided masking of the massive-activation token for LLM inference and TRL fine-tuning."""

from .errors import WeMaskError
from .method import WeMaskConfig, WeMaskConfigError, WeMaskHandle, apply_wemask, remove_wemask

__version__ = "0.1.0"
__all__ = ["WeMaskConfig", "WeMaskConfigError", "WeMaskError", "WeMaskHandle", "apply_wemask", "remove_wemask", "__version__"]
