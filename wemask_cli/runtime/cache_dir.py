"""wemask's own cache folder (converted models, locate results, TRL's flag spellings). Torch-free."""

from __future__ import annotations

import os
from pathlib import Path

from wemask_cli.runtime.errors import WeMaskError


def cache_dir() -> Path:
    """$WEMASK_CACHE, else $XDG_CACHE_HOME/wemask, else ~/.cache/wemask. A file in its place (or in place of a
    folder above it) is one line before anything is converted or computed for the cache."""
    if os.environ.get("WEMASK_CACHE"):
        folder, named = Path(os.environ["WEMASK_CACHE"]).expanduser(), f"WEMASK_CACHE={os.environ['WEMASK_CACHE']}"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        folder, named = Path(base).expanduser() / "wemask", "wemask's cache folder"
    existing = next((path for path in (folder, *folder.parents) if path.exists()), None)
    if existing is not None and not existing.is_dir():
        raise WeMaskError(
            f"{named}: {existing} is a file, not a folder: set WEMASK_CACHE to a folder for wemask's cache "
            "(converted models, locate results), or move the file away"
        )
    return folder
