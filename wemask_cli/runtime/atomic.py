"""Atomic file writes, the one implementation every writer uses (method/ too: it imports only the standard library).

A temporary file in the same folder, flushed to disk, then `os.replace` over the target: a reader sees the old file
or the new one, never a torn one, and the temporary file never outlives a failure. The file gets the user's umask
(a bare `tempfile.mkstemp` would leave it 0600). A write that fails (a full disk, a read-only folder, a missing
permission) raises WriteFailed: one line for the user that is still an OSError with its errno, so a caller that
tolerates an unwritable cache (`except OSError`) or names the checkpoint to resume from keeps doing so.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from wemask_cli.runtime.errors import WeMaskError


class WriteFailed(WeMaskError, OSError):
    """A file could not be written: 'could not write PATH: REASON', with the cause's errno, strerror and filename."""

    def __init__(self, message: str, cause: OSError):
        super().__init__(message)
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, cause.filename

    def __str__(self) -> str:
        return self.args[0]


def atomic_write(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call `write(temporary_path)` to fill a temporary file next to `path`, then move it into place (WriteFailed
    when it cannot)."""
    path = Path(path)
    try:
        return _write_and_replace(path, write)
    except WriteFailed:
        raise
    except OSError as err:
        remedy = ": free some space or choose another folder" if err.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        raise WriteFailed(f"could not write {path}: {describe_os_error(err)}{remedy}", err) from None


def _write_and_replace(path: Path, write: Callable[[str], None]) -> Path:
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


def describe_os_error(err: OSError) -> str:
    """A short reason for an OSError."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    if err.errno == errno.EFBIG:
        return "a file reached this process's file-size limit"
    if err.errno == errno.EROFS:
        return "the file system is read-only"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return err.strerror or str(err)


WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EIO)  # the disk's, not a bug


def write_error(err: BaseException) -> OSError | None:
    """The OS error behind a failed write, also when a library wraps it (safetensors names its number as "os error
    N"; torch's zip writer names none: the file-size limit, when one is set, is taken as the cause); None for an
    error that is not a failed write of WRITE_ERRNOS."""
    if isinstance(err, OSError):
        return err if err.errno in WRITE_ERRNOS else None
    text = str(err)
    number = re.search(r"\(os error (\d+)\)", text)
    if number and int(number[1]) in WRITE_ERRNOS:
        return OSError(int(number[1]), os.strerror(int(number[1])))
    if "PytorchStreamWriter" in text or "inline_container" in text:
        import resource

        limited = resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY
        return OSError(errno.EFBIG, "") if limited else OSError(errno.EIO, f"torch could not write a file ({text.splitlines()[0][:120]})")
    return None


def write_remedy(err: OSError) -> str:
    """What to do about a failed write (write_error's), in a few words."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "make room"
    if err.errno == errno.EFBIG:
        return "raise the file-size limit (ulimit -f)"
    return "make the folder writable" if err.errno in (errno.EROFS, errno.EACCES) else "check the disk"


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
