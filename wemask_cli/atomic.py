"""Atomic file writes, the one implementation every writer uses (method/ too: it imports only the standard library).

A temporary file in the same folder, flushed to disk, then `os.replace` over the target: a reader sees the old file
or the new one, never a torn one, and the temporary file never outlives a failure. The file gets the user's umask
(a bare `tempfile.mkstemp` would leave it 0600).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call `write(temporary_path)` to fill a temporary file next to `path`, then move it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(temporary)
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o666 & ~umask())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """atomic_write of UTF-8 text."""
    return atomic_write(path, lambda temporary: Path(temporary).write_text(text, encoding="utf-8"))


def follow_umask(path: str | Path) -> None:
    """Give a file another library wrote private (0600: safetensors' save_file does) the user's umask, as every other
    file of a run has."""
    if os.stat(path).st_mode & 0o777 == 0o600:
        os.chmod(path, 0o666 & ~umask())


def umask() -> int:
    """The process umask (read without changing it)."""
    current = os.umask(0o022)
    os.umask(current)
    return current
