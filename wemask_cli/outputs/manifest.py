"""The manifest `.wemask-manifest.json`: every file wemask wrote into an output folder (a path relative to the folder,
with its size and mtime) and every folder it created, so that --overwrite deletes only what it can show is still
wemask's. A folder holding its own manifest is another wemask command's output (an eval inside a run): kept.
Torch-free.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from wemask_cli.outputs.files import atomic_write_json
from wemask_cli.runtime.progress import warn

LOCK_NAME = ".wemask.lock"
MANIFEST_NAME = ".wemask-manifest.json"
STAGING_NAME = ".wemask-staging"  # where a library's save writes before wemask moves it into place (claim.py)
OURS = (LOCK_NAME, MANIFEST_NAME, STAGING_NAME)

Snapshot = dict  # relative path -> (size, mtime_ns) for files, None for folders


def safe_relpath(rel) -> str | None:
    """`rel` as a clean relative path inside a folder ('a/b'), or None: absolute, empty, '.', '..' or wemask's own."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return None
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts) or parts[0] in OURS:
        return None
    return rel


def within(root: str, path: Path) -> bool:
    """Whether `path` (not followed itself, its parent folders followed) lies strictly inside the real folder `root`."""
    real = os.path.join(os.path.realpath(path.parent), path.name)
    return real.startswith(root.rstrip(os.sep) + os.sep)


def holds_wemask_output(path: Path) -> bool:
    """A folder another wemask command claimed (its own manifest), or one holding only such folders."""
    if (path / MANIFEST_NAME).is_file():
        return True
    children = [c for c in path.iterdir()] if path.is_dir() and not path.is_symlink() else []
    return bool(children) and all(c.is_dir() and not c.is_symlink() and holds_wemask_output(c) for c in children)


def _stat(path: Path) -> tuple[int, int] | None:
    """(size, mtime_ns) of a regular file, not following a symlink; None for anything else."""
    info = os.lstat(path)
    return (info.st_size, info.st_mtime_ns) if stat.S_ISREG(info.st_mode) else None


def tree(start: Path) -> Snapshot:
    """The files (size, mtime) and folders under the folder `start`, relative to it, not following symlinks and
    leaving out folders another wemask command claimed (their own manifest)."""
    found: Snapshot = {}
    for here, dirs, names in os.walk(start):
        base = os.path.relpath(here, start).replace(os.sep, "/")
        base = "" if base == "." else base + "/"
        dirs[:] = [d for d in dirs if not (Path(here) / d / MANIFEST_NAME).exists() and not (Path(here) / d).is_symlink()]
        found.update({base + d: None for d in dirs})
        for name in names:
            info = _stat(Path(here) / name)
            if info is not None:
                found[base + name] = info
    return found


@dataclass
class Plan:
    """What --overwrite may delete (verified against the manifest) and what it keeps, with why."""

    files: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)  # deepest first
    kept: list[str] = field(default_factory=list)  # not wemask's, or changed since wemask wrote it
    nested: list[str] = field(default_factory=list)  # another wemask command's output


class Manifest:
    """The records of one folder, kept in memory by the claim and written through on every change."""

    def __init__(self, folder: Path, files: dict | None = None, folders: set | None = None):
        self.folder, self.root = Path(folder), os.path.realpath(folder)
        self.files: dict[str, tuple[int, int]] = files or {}
        self.folders: set[str] = folders or set()

    # -- reading and writing ------------------------------------------------------------------------------------

    @classmethod
    def read(cls, folder) -> Manifest | None:
        """The folder's manifest; None when there is none, or (with a warning) when it cannot be trusted."""
        path = Path(folder) / MANIFEST_NAME
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            warn(f"{path} is not valid JSON: ignored, so nothing in {folder} is deleted as wemask's")
            return None
        written = data.get("written") if isinstance(data, dict) else None
        if not isinstance(written, list) or not all(isinstance(name, str) for name in written):
            warn(f"{path}: 'written' is not a list of names: ignored, so nothing in {folder} is deleted as wemask's")
            return None
        manifest = cls(folder)
        for rel, rec in (data.get("files") or {}).items() if isinstance(data.get("files"), dict) else ():
            ok = isinstance(rec, dict) and all(isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool) for k in ("size", "mtime_ns"))
            if manifest._readable(rel, path) and ok:
                manifest.files[rel] = (rec["size"], rec["mtime_ns"])
        for rel in data.get("dirs") or [] if isinstance(data.get("dirs"), list) else ():
            if manifest._readable(rel, path):
                manifest.folders.add(rel)
        return manifest

    def _readable(self, rel, path: Path) -> bool:
        if safe_relpath(rel) is None or not within(self.root, self.folder / rel):
            warn(f"{path}: ignoring the entry {rel!r}, which is not a path inside {self.folder}")
            return False
        return True

    def top_names(self) -> list[str]:
        return sorted({rel.split("/")[0] for rel in (*self.files, *self.folders)})

    def save(self) -> None:
        atomic_write_json(self.folder / MANIFEST_NAME, {
            "version": 2, "written": self.top_names(),
            "files": {rel: {"size": size, "mtime_ns": mtime} for rel, (size, mtime) in sorted(self.files.items())},
            "dirs": sorted(self.folders),
        })

    def prune(self) -> None:
        """Forget what no longer exists (a checkpoint the trainer rotated away)."""
        self.files = {rel: rec for rel, rec in self.files.items() if os.path.lexists(self.folder / rel)}
        self.folders = {rel for rel in self.folders if (self.folder / rel).is_dir()}

    # -- recording ----------------------------------------------------------------------------------------------

    def check(self, rel) -> str:
        """`rel` if it names a path inside the folder; a ValueError (a bug in the caller) if not."""
        if safe_relpath(rel) is None or not within(self.root, self.folder / rel):
            raise ValueError(f"not a path inside the output folder {self.folder}: {rel!r}")
        return rel

    def name_of(self, path) -> str:
        """The name of `path` inside the folder: a relative path is the folder's, an absolute one must lie in it."""
        path = Path(path)
        if not path.is_absolute():
            return self.check(path.as_posix())
        real = Path(os.path.realpath(path.parent)) / path.name
        try:
            return self.check(real.relative_to(self.root).as_posix())
        except ValueError:
            raise ValueError(f"{path} is not inside the output folder {self.folder}") from None

    def add(self, rel: str, listing: Snapshot | None = None) -> None:
        """Record `rel` (a file, or a folder with everything in it, or with only `listing`: what a writer put there,
        relative to it) and the folders above it as wemask's."""
        path = self.folder / self.check(rel)
        if not os.path.lexists(path):
            raise ValueError(f"cannot record {path}: it does not exist")
        parts = rel.split("/")
        self.folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        if not path.is_dir() or path.is_symlink():
            info = _stat(path)
            if info is not None:
                self.files[rel] = info
            return
        self.folders.add(rel)
        for sub, info in (tree(path) if listing is None else listing).items():
            self.folders.add(f"{rel}/{sub}") if info is None else self.files.__setitem__(f"{rel}/{sub}", info)

    # -- what --overwrite may delete ----------------------------------------------------------------------------

    def plan(self, rel: str = "") -> Plan:
        """What --overwrite may delete of the folder ('') or of one path `rel` in it."""
        plan = Plan()
        if rel:
            self._judge(self.check(rel), plan)
        for name in sorted(os.listdir(self.folder)) if not rel else ():
            if name not in OURS:
                self._judge(name, plan)
        return plan

    def _judge(self, rel: str, plan: Plan) -> None:
        path = self.folder / rel
        info = os.lstat(path)
        if stat.S_ISDIR(info.st_mode):
            if holds_wemask_output(path):
                plan.nested.append(rel)
            elif rel not in self.folders:
                plan.kept.append(rel + "/")
            else:
                for child in sorted(os.listdir(path)):
                    self._judge(f"{rel}/{child}", plan)
                plan.folders.append(rel)
        elif rel not in self.files:
            plan.kept.append(rel)
        elif _stat(path) != self.files[rel]:
            plan.kept.append(rel + " (changed since wemask wrote it)")
        else:
            plan.files.append(rel)

    def delete(self, plan: Plan) -> list[str]:
        """Delete the plan's files (each checked again) and then its folders if empty; returns what was kept."""
        kept = []
        for rel in plan.files:
            path = self.folder / rel
            if within(self.root, path) and os.path.lexists(path) and _stat(path) == self.files.get(rel):
                os.unlink(path)
                self.files.pop(rel, None)
            elif os.path.lexists(path):
                kept.append(rel)
        for rel in plan.folders:
            path = self.folder / rel
            try:
                if within(self.root, path):
                    os.rmdir(path)
                    self.folders.discard(rel)
            except OSError:
                kept.append(rel + "/")
        return kept
