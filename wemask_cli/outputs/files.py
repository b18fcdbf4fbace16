"""Strict JSON, atomic writes, and the checks of an output path made before any work. Torch-free."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from wemask_cli.runtime.atomic import atomic_write_text
from wemask_cli.runtime.errors import WeMaskError


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


def atomic_write_json(path, obj) -> Path:
    """atomic_write_text of strict JSON (see dumps_strict)."""
    return atomic_write_text(path, dumps_strict(obj))


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


def check_output_file(path, *, overwrite: bool, flag: str, inputs=()) -> None:
    """A single output file (infer -o, locate --json/--plot, report): refuse to replace one unless --overwrite, or
    when it is, or lies in, one of the command's `inputs` ((flag, path) pairs); check it can be written; before any
    work."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise WeMaskError(f"{flag} {path} is a folder: give a file name")
    if path.exists() and not overwrite:
        raise WeMaskError(f"{flag} {path} exists: pass --overwrite to replace it, or choose another name")
    for what, value in inputs if path.exists() else ():
        if value and Path(str(value)).expanduser().exists() and _within_or_equal(Path(str(value)).expanduser(), path):
            raise WeMaskError(f"{flag} {path} is an input of this command ({what} {value}): --overwrite would replace it; choose another name")
    check_writable(path, is_dir=False, flag=flag)


def _within_or_equal(container: Path, path: Path) -> bool:
    base, real = os.path.realpath(container), os.path.realpath(path)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def check_inputs_outside(folder, inputs, *, flag: str = "--output-dir") -> None:
    """--overwrite: refuse (one line, before anything is deleted) an input ((flag, local path) pairs) that lies
    inside, or is, the output folder, since clearing the folder would delete it. Hub names and missing paths pass."""
    for what, value in inputs:
        path = Path(str(value)).expanduser() if value else None
        if path is not None and path.exists() and _within_or_equal(Path(folder).expanduser(), path):
            raise WeMaskError(
                f"{what} {value} is inside {flag} {folder}, which --overwrite would clear: write to another folder, "
                "or copy the input out first"
            )
