"""The method: WeMask config, architecture adapter, the mask hook and ME-layer location. Imports torch only."""

from .config import CONFIG_NAME, WeMaskConfig, WeMaskConfigError, find_saved_config
from .mask import WeMaskHandle, apply_wemask, first_token_positions, masked_layers, remove_wemask

__all__ = [
    "CONFIG_NAME",
    "WeMaskConfig",
    "WeMaskConfigError",
    "WeMaskHandle",
    "apply_wemask",
    "find_saved_config",
    "first_token_positions",
    "masked_layers",
    "remove_wemask",
]
