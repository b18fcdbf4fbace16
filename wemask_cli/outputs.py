"""Output folders and files: claimed before any work, nothing of the user's ever deleted, JSON always strict.

    with claim_output_dir(path, overwrite=..., resume=..., kind="sft") as claim:   # before loading anything
        ...; claim.record("metrics.json")                                          # what wemask wrote

A claimed folder holds a lock `.wemask.lock` (created with O_EXCL: pid, host, command, start time) while the
command runs, and a manifest `.wemask-manifest.json` listing the top-level entries wemask wrote there. A second
claimant is refused with one line naming the running command; a lock whose process is gone (same host) is
explained and taken over. A non-empty folder is refused unless --overwrite (or --resume); --overwrite deletes only
the entries the manifest lists, never the folder itself, and refuses while anything else is in it (naming it), so
`-o .` or a folder of the user's own files is never emptied. Torch-free.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .errors import WeMaskError
from .progress import is_main_process, say, warn

LOCK_NAME = ".wemask.lock"
MANIFEST_NAME = ".wemask-manifest.json"
OURS = (LOCK_NAME, MANIFEST_NAME)
UNREADABLE_LOCK_GRACE_S = 60.0  # a lock file still empty after this long was torn by a killed process


# ---------------------------------------------------------------------------------------------------------------
# Strict JSON, atomic writes


def strict_json(value, path: str = "") -> tuple[object, list[str]]:
    """(a copy where every non-finite float is None, the paths of those values, e.g. ['loss_history[3][1]'])."""
    if isinstance(value, float) and not math.isfinite(value):
        return None, [path or "<value>"]
    if isinstance(value, dict):
        out, bad = {}, []
        for key, item in value.items():
            out[key], found = strict_json(item, f"{path}.{key}" if path else str(key))
            bad += found
        return out, bad
    if isinstance(value, (list, tuple)):
        out, bad = [], []
        for i, item in enumerate(value):
            clean, found = strict_json(item, f"{path}[{i}]")
            out.append(clean)
            bad += found
        return out, bad
    return value, []


def dumps_strict(obj) -> str:
    """JSON text that every reader accepts: non-finite numbers written as null, listed under `non_finite`
    (a top-level key, for a dict); other objects (paths, numpy scalars) through str()."""
    plain = json.loads(json.dumps(obj, default=_plain))  # numpy/torch scalars -> numbers, the rest -> str
    clean, bad = strict_json(plain)
    if bad and isinstance(clean, dict):
        clean["non_finite"] = sorted(set(clean.get("non_finite") or []) | set(bad))
    return json.dumps(clean, indent=2, allow_nan=False) + "\n"


def _plain(value):
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def atomic_write_text(path, text: str) -> Path:
    """Write `text` to a temporary file next to `path`, fsync, rename over it: readers see the old or the new file,
    never a torn one. A full disk, a read-only folder or a missing permission is one line (WeMaskError)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        remedy = ": free some space or choose another folder" if err.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        raise WeMaskError(f"could not write {path}: {describe_os_error(err)}{remedy}") from None
    finally:
        if tmp is not None:
            with _quiet():
                os.unlink(tmp)
    return path


def atomic_write_json(path, obj) -> Path:
    """atomic_write_text of strict JSON (see dumps_strict)."""
    return atomic_write_text(path, dumps_strict(obj))


def describe_os_error(err: OSError) -> str:
    """A short reason for an OSError."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    if err.errno == errno.EROFS:
        return "the file system is read-only"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return err.strerror or str(err)


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, OSError)


# ---------------------------------------------------------------------------------------------------------------
# Writability, single files


def check_writable(path, *, is_dir: bool, flag: str) -> None:
    """Before any data or model loads: one line if `path` (a folder, or a file to create) cannot be written."""
    path = Path(path).expanduser()
    if path.exists():
        if is_dir and not path.is_dir():
            raise WeMaskError(f"{flag} {path} is a file, not a folder: choose a folder")
        if not is_dir and path.is_dir():
            raise WeMaskError(f"{flag} {path} is a folder: give a file name")
    folder = path if is_dir else path.parent
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise WeMaskError(f"{flag} {path}: {existing} is a file, so nothing can be created under it")
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only(existing) else "is not writable"
        raise WeMaskError(f"{flag} {path}: {existing} {why}")
    if not is_dir and path.exists() and not os.access(path, os.W_OK):
        raise WeMaskError(f"{flag} {path} is not writable")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_output_file(path, *, overwrite: bool, flag: str) -> None:
    """A single output file (infer -o, locate --json/--plot, report): refuse to replace one unless --overwrite,
    and check it can be written, before any work."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise WeMaskError(f"{flag} {path} is a folder: give a file name")
    if path.exists() and not overwrite:
        raise WeMaskError(f"{flag} {path} exists: pass --overwrite to replace it, or choose another name")
    check_writable(path, is_dir=False, flag=flag)


# ---------------------------------------------------------------------------------------------------------------
# The manifest


def read_manifest(folder) -> list[str] | None:
    """The top-level names wemask wrote into `folder` (None: no manifest, or an unreadable one)."""
    try:
        data = json.loads((Path(folder) / MANIFEST_NAME).read_text())
        return [str(name) for name in data["written"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_written(folder, *paths) -> None:
    """Add `paths` to the folder's manifest: a path inside `folder` (absolute, relative to the current directory,
    or relative to the folder); its top-level entry is what is recorded."""
    folder = Path(folder).expanduser()
    names = list(read_manifest(folder) or [])
    for path in paths:
        top = _top_entry(folder, Path(path).expanduser())
        if top and top not in OURS and top not in names:
            names.append(top)
    atomic_write_json(folder / MANIFEST_NAME, {"written": sorted(names)})


def _top_entry(folder: Path, path: Path) -> str:
    for base, target in ((folder, path), (folder.resolve(), path.resolve())):
        try:
            parts = target.relative_to(base).parts
            return parts[0] if parts else ""
        except ValueError:
            continue
    return "" if path.is_absolute() else path.parts[0]


def _entries(folder: Path) -> list[str]:
    return sorted(child.name for child in folder.iterdir() if child.name not in OURS)


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ---------------------------------------------------------------------------------------------------------------
# The lock


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(lock: dict) -> str:
    command = lock.get("command") or lock.get("kind") or "a wemask command"
    return f"`{command}` (pid {lock.get('pid')} on {lock.get('host')}, started {lock.get('started')})"


def _take_lock(folder: Path, kind: str) -> tuple[Path, str]:
    """Create the lock with O_EXCL; explain and replace a stale one; refuse a live one. Returns (path, token)."""
    lock_path = folder / LOCK_NAME
    token = uuid.uuid4().hex
    content = json.dumps({
        "pid": os.getpid(), "host": socket.gethostname(), "kind": kind, "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "token": token,
    })
    for _ in range(3):
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            _judge_existing_lock(lock_path)  # raises for a live lock; removes a stale one
            continue
        except OSError as err:
            raise WeMaskError(f"could not claim {folder}: {describe_os_error(err)}") from None
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        return lock_path, token
    raise WeMaskError(f"{folder} is being claimed by another command at the same moment: try again")


def _judge_existing_lock(lock_path: Path) -> None:
    """A lock already there: refuse when its run may be alive; explain and remove it when it is not."""
    try:
        lock = json.loads(lock_path.read_text())
        if not isinstance(lock, dict):
            raise ValueError
    except FileNotFoundError:
        return  # released meanwhile
    except (OSError, ValueError):
        age = time.time() - lock_path.stat().st_mtime if lock_path.exists() else 0
        if age < UNREADABLE_LOCK_GRACE_S:
            raise WeMaskError(f"{lock_path.parent} is being claimed by another wemask command: wait for it, or use another folder") from None
        warn(f"{lock_path.parent}: removing an unreadable lock left by a killed command ({LOCK_NAME}, {age:.0f} s old)")
        _remove(lock_path)
        return
    same_host = lock.get("host") == socket.gethostname()
    pid = lock.get("pid")
    if same_host and isinstance(pid, int) and not _pid_alive(pid):
        warn(
            f"{lock_path.parent} was locked by {_describe(lock)}, which is no longer running (killed or crashed): "
            "taking the folder over; its files are kept"
        )
        _remove(lock_path)
        return
    where = "" if same_host else f"; if that run is gone, delete {lock_path}"
    raise WeMaskError(f"{lock_path.parent} is in use by {_describe(lock)}: wait for it to finish or choose another folder{where}")


def _remove(path: Path) -> None:
    with _quiet():
        path.unlink()


# ---------------------------------------------------------------------------------------------------------------
# The claim


class OutputClaim:
    """A claimed output folder: `record(...)` adds to its manifest; leaving the `with` block records every entry
    created since the claim and releases the lock (only ours, by token)."""

    def __init__(self, path: Path, lock_path: Path | None = None, token: str | None = None):
        self.path, self.lock_path, self.token = path, lock_path, token
        self.before: set[str] = set()  # the entries there when claimed (not this command's)

    def record(self, *paths) -> None:
        if self.lock_path is not None:
            record_written(self.path, *(Path(p) if Path(p).is_absolute() else self.path / p for p in paths))

    def record_new(self) -> None:
        """Record every top-level entry that appeared since the claim (what this command wrote)."""
        if self.lock_path is not None and self.path.is_dir():
            new = [self.path / name for name in _entries(self.path) if name not in self.before]
            if new:
                record_written(self.path, *new)

    def release(self) -> None:
        if self.lock_path is None:
            return
        try:
            self.record_new()
        finally:
            try:
                if json.loads(self.lock_path.read_text()).get("token") == self.token:
                    self.lock_path.unlink()
            except (OSError, ValueError, AttributeError):
                pass
            self.lock_path = None

    def __enter__(self) -> "OutputClaim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim_output_dir(
    path, *, overwrite: bool, resume: bool = False, kind: str, flag: str = "--output-dir", resumable: bool = False
) -> OutputClaim:
    """Claim `path` for a command that writes a folder (see the module docstring). `kind` names the command in the
    lock; `resume` keeps the folder's contents (the caller checks what to resume from); `resumable`: the refusal of a
    non-empty folder mentions --resume. On a non-main process of a distributed run: no lock, no changes (the main
    process claims; callers wait on a barrier)."""
    folder = Path(path).expanduser()
    check_writable(folder, is_dir=True, flag=flag)
    if not is_main_process():
        return OutputClaim(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WeMaskError(f"{flag} {folder}: {describe_os_error(err)}") from None
    lock_path, token = _take_lock(folder, kind)
    claim = OutputClaim(folder, lock_path, token)
    try:
        entries = _entries(folder)
        if entries and not resume and overwrite:
            _clear_for_overwrite(folder, entries)
        elif entries and not resume:
            _refuse_non_empty(folder, entries, flag, resumable)
        claim.before = set(_entries(folder))
    except BaseException:
        claim.lock_path = None
        _remove(lock_path)
        raise
    return claim


def _refuse_non_empty(folder: Path, entries: list[str], flag: str, resumable: bool) -> None:
    written = read_manifest(folder)
    what = "the output of an earlier wemask run" if written is not None and set(entries) <= set(written) else f"files ({_listing(entries)})"
    resume = " --resume to continue it," if resumable and written is not None else ""
    raise WeMaskError(f"{flag} {folder} is not empty (it holds {what}): pass{resume} --overwrite to replace it, or choose another folder")


def _clear_for_overwrite(folder: Path, entries: list[str]) -> None:
    """--overwrite: delete what the manifest lists, only when nothing else is in the folder."""
    written = read_manifest(folder)
    if written is None:
        raise WeMaskError(
            f"--overwrite: {folder} holds files wemask did not write ({_listing(entries)}): refusing to delete anything; "
            "choose another folder or move them away"
        )
    foreign = [name for name in entries if name not in written]
    if foreign:
        raise WeMaskError(
            f"--overwrite: {folder} also holds files wemask did not write ({_listing(foreign)}): they would be left "
            "among the new run's files, so nothing was deleted; move them away or choose another folder"
        )
    say(f"--overwrite: deleting the previous output in {folder} ({_listing(entries)})")
    for name in entries:
        target = folder / name
        try:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        except OSError as err:
            raise WeMaskError(f"--overwrite: could not delete {target}: {describe_os_error(err)}") from None
    atomic_write_json(folder / MANIFEST_NAME, {"written": []})
