"""wemask's own cache folder (converted models, locate results, TRL's flag spellings). Torch-free."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$WEMASK_CACHE, else $XDG_CACHE_HOME/wemask, else ~/.cache/wemask."""
    if os.environ.get("WEMASK_CACHE"):
        return Path(os.environ["WEMASK_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "wemask"
