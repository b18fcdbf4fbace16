"""A local dataset: one file (readers.py) or a folder of them (folders.py)."""

from __future__ import annotations

from pathlib import Path

from wemask_cli.data.folders import load_folder
from wemask_cli.data.readers import LOCAL_SUFFIXES, load_file, not_a_file
from wemask_cli.runtime.errors import WeMaskError


def load_local(path: Path, split: str | None, where: str, config: str | None = None):
    """A datasets.Dataset from a local file or folder (`config`: its subfolder), plus row labels (None for parquet)."""
    if path.is_dir():
        return load_folder(path, split, where, config)
    check_local_file(path, where)
    return load_file(path, split, where)


def check_local_file(path: Path, where: str) -> None:
    """A regular file of a known data type, else one line (missing, a pipe, an unsupported suffix)."""
    if not path.is_file():
        raise not_a_file(path, where)
    suffix = path.suffix.lower()
    if suffix not in LOCAL_SUFFIXES:
        raise WeMaskError(
            f"{where} {path}: unsupported file type {suffix or '(no extension)'!r}; use {', '.join(LOCAL_SUFFIXES)}, "
            "a folder of them, or a hub dataset name"
        )
