"""Claiming an output folder: a lock, a manifest written through as wemask writes, the old output cleared only
after the command's inputs are checked, and a folder the command created removed again when it fails. Torch-free.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from wemask_cli.outputs.files import check_writable
from wemask_cli.outputs.lock import remove_quietly, take_lock
from wemask_cli.outputs.manifest import LOCK_NAME, MANIFEST_NAME, OURS, STAGING_NAME, Manifest, Plan, Snapshot, tree
from wemask_cli.outputs.names import METRICS_FILE
from wemask_cli.runtime.atomic import describe_os_error, follow_umask
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import say
from wemask_cli.runtime.ranks import from_main, is_main_process


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _entries(folder: Path) -> list[str]:
    return sorted(child.name for child in folder.iterdir() if child.name not in OURS)


def _drop_leftovers(folder: Path) -> None:
    """Remove what only wemask writes in a claimed folder and a killed command can leave: the staging folder (a link
    in its place is unlinked) and the manifest's temporary files (runtime/atomic.py names them .NAME.*.tmp)."""
    for torn in folder.glob(f".{MANIFEST_NAME}.*.tmp"):
        remove_quietly(torn)
    staging = folder / STAGING_NAME
    if staging.is_symlink() or staging.is_file():
        remove_quietly(staging)
    elif staging.is_dir():
        shutil.rmtree(staging, ignore_errors=True)


def _merge(staged: Path, target: Path, listing: Snapshot) -> None:
    """Move each staged file into the folder `target`, replacing a file (or a link, never followed) of that name."""
    for rel, info in sorted(listing.items()):
        if info is None and (target / rel).is_symlink():
            raise NotADirectoryError(f"{target / rel} is a link")
        if info is None:
            (target / rel).mkdir(exist_ok=True)
        else:
            os.replace(staged / rel, target / rel)
    shutil.rmtree(staged, ignore_errors=True)


class OutputClaim:
    """A claimed output folder. `record(name)` adds what wemask just wrote (names relative to the folder, or
    absolute paths inside it); `staging(name)` with `move_in` or `move_all_in` records what a save wrote; `clear()` does
    --overwrite's deletion (first `record` does it too); leaving the `with` block releases the lock."""

    def __init__(self, path: Path, lock_path: Path | None = None, token: str | None = None):
        self.path, self.lock_path, self.token = path, lock_path, token
        self.manifest = Manifest(path)
        self.plan: Plan | None = None  # --overwrite's deletion, pending until clear()
        self.created: list[Path] = []  # folders this claim created, deepest first
        self.claimed = False  # the folder passed the claim's checks: the manifest is ours to write
        self.fresh_manifest = False  # the folder had no manifest before this claim

    @property
    def active(self) -> bool:
        return self.lock_path is not None

    def relative(self, path) -> str:
        return self.manifest.name_of(path)

    def record(self, *paths) -> None:
        if self.active:
            self.clear()
            for path in paths:
                self.manifest.add(self.relative(path))
            self.manifest.save()

    def staging(self, name: str) -> Path:
        """A folder for a writer (a trainer's save, a merge, an eval's files): it writes there, and `move_in` or
        `move_all_in` puts it in place, so that only what it wrote is recorded, whatever the user adds to the folder meanwhile. Every
        process of a distributed run may write into it."""
        path = self.path / STAGING_NAME / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def move_in(self, staged: Path, rel: str) -> None:
        """Move the staged file or folder `staged` to `rel` in the folder (a folder already there gets the staged
        files moved into it), recording by name each file moved; on a process that holds no claim, only moves."""
        self.clear()
        listing = tree(staged) if staged.is_dir() else None
        for name, info in (listing or {"": ()}).items():  # what a library wrote private gets the user's umask
            if info is not None:
                follow_umask(staged / name if name else staged)
        target = self.path / rel
        if staged.is_dir() and os.path.lexists(target) and (target.is_symlink() or not target.is_dir()):
            raise WeMaskError(f"could not save {target}: something that is not a folder is in its place; move it away and --resume")
        try:
            if staged.is_dir() and os.path.lexists(target):
                _merge(staged, target, listing)
            else:
                os.replace(staged, target)
        except OSError as err:
            raise WeMaskError(f"could not save {target}: {describe_os_error(err)}") from None
        if self.active:
            self.manifest.add(self.relative(rel), listing)
            self.manifest.save()

    def move_all_in(self, staged: Path) -> list[Path]:
        """Every file and folder a writer put in the staging folder `staged` moved into the output folder and recorded
        by name, metrics.json (a finished output's mark) last; the staging folder removed. Returns the moved paths."""
        moved = []
        for child in sorted(staged.iterdir(), key=lambda path: (path.name == METRICS_FILE, path.name)):
            self.move_in(child, child.name)
            moved.append(self.path / child.name)
        shutil.rmtree(staged, ignore_errors=True)
        return moved

    def remove(self, rel: str) -> list[str]:
        """Delete `rel` (a folder wemask wrote: a checkpoint the trainer rotates away) unless it holds anything wemask
        cannot show it wrote; returns those (then nothing is deleted)."""
        plan = self.manifest.plan(self.relative(rel))
        if plan.kept or plan.nested:
            return plan.kept + plan.nested
        kept = self.manifest.delete(plan)
        self.manifest.save()
        return kept

    def clear(self) -> None:
        """--overwrite: delete the previous output, each file checked against the manifest; keep (and name) the rest."""
        plan, self.plan = self.plan, None
        if plan is None or not self.active:
            return
        fresh = self.manifest.plan()  # again: the folder may have changed since the claim
        if fresh.nested:
            say(f"--overwrite: keeping {_listing(fresh.nested)} in {self.path}: written by another wemask command")
        if fresh.files or fresh.folders:
            say(f"--overwrite: deleting the previous output in {self.path} ({_listing(self.manifest.top_names())})")
        try:
            kept = fresh.kept + self.manifest.delete(fresh)
        except OSError as err:
            raise WeMaskError(f"--overwrite: could not delete the previous output in {self.path}: {describe_os_error(err)}") from None
        if kept:
            say(f"--overwrite: kept {_listing(kept)} in {self.path}: not written by wemask, or changed since")
        self.manifest = Manifest(self.path)
        self.manifest.save()

    def release(self, failed: bool = False) -> None:
        """Release the lock (only ours, by token); a failed command's folder that is still empty is removed."""
        if not self.active:
            return
        _drop_leftovers(self.path)
        try:
            if self.claimed and self.path.is_dir():
                self.manifest.prune()
                if failed and self.fresh_manifest and not self.manifest.top_names():
                    remove_quietly(self.path / MANIFEST_NAME)  # a refused command leaves the folder as it found it
                else:
                    self.manifest.save()
        finally:
            try:
                if json.loads(self.lock_path.read_text()).get("token") == self.token:
                    self.lock_path.unlink()
            except (OSError, ValueError, AttributeError):
                pass
            self.lock_path = None
        if failed and self.created and self.path.is_dir() and not _entries(self.path) and not self.manifest.top_names():
            self._remove_created()

    def _remove_created(self) -> None:
        remove_quietly(self.path / MANIFEST_NAME)
        for folder in self.created:
            try:
                folder.rmdir()
            except OSError:
                return

    def __enter__(self) -> OutputClaim:  # noqa: PYI034 (no typing.Self on Python 3.10)
        return self

    def __exit__(self, kind, value, tb) -> None:
        self.release(failed=kind is not None)


def claim_output_dir(
    path, *, overwrite: bool, resume: bool = False, kind: str, flag: str = "--output-dir", resumable: bool = False,
    created: list[Path] = (),
) -> OutputClaim:
    """Claim `path` for a command that writes a folder (see the package docstring). `kind` names the command in the
    lock; `resume` keeps the folder's contents (the caller checks what to resume from); `resumable`: the refusal of a
    non-empty folder mentions --resume; `created`: folders the caller made for this command (deepest first), removed
    like the claim's own when it fails. With `overwrite` the folder is checked now and cleared by `claim.clear()`
    (or the first record), after the command has checked its inputs. On a non-main process of a distributed run:
    no lock, no changes (the main process claims; callers wait on a barrier)."""
    folder = Path(path).expanduser()
    check_writable(folder, is_dir=True, flag=flag)
    if not is_main_process():
        return OutputClaim(folder)
    absolute = Path(os.path.abspath(folder))
    created = [*created, *(p for p in (absolute, *absolute.parents) if not os.path.lexists(p))]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WeMaskError(f"{flag} {folder}: {describe_os_error(err)}") from None
    was_locked = (folder / LOCK_NAME).exists()
    lock_path, token = take_lock(folder, kind)
    claim = OutputClaim(folder, lock_path, token)
    claim.created = created
    try:
        _drop_leftovers(folder)  # what a killed save left: the lock says no command is using it
        found = Manifest.read(folder)
        claim.manifest, claim.fresh_manifest = found or Manifest(folder), found is None and not (folder / MANIFEST_NAME).exists()
        entries = _entries(folder)
        if was_locked and not entries and not claim.manifest.top_names() and absolute not in created:
            claim.created = [absolute, *created]  # a killed command's folder holding nothing: removed like our own on failure
        if entries and not resume and overwrite:
            claim.plan = _plan_overwrite(claim.manifest, folder)
        elif entries and not resume:
            _refuse_non_empty(claim.manifest, folder, entries, flag, resumable)
        claim.claimed = True
        claim.manifest.save()
    except BaseException:
        claim.release(failed=True)
        raise
    return claim


def claim_on_main(path, **kwargs) -> OutputClaim:
    """`claim_output_dir(path, **kwargs)` for a command every process of a launched run works on: the main process
    claims, and its refusal is raised on every process (none loads a model for nothing); the others hold a claim that
    writes nothing. Without a launcher: `claim_output_dir`."""
    claims = []
    from_main(lambda: claims.append(claim_output_dir(path, **kwargs)))
    return claims[0] if claims else OutputClaim(Path(path).expanduser())


def _refuse_non_empty(manifest: Manifest, folder: Path, entries: list[str], flag: str, resumable: bool) -> None:
    ours = bool(manifest.top_names())
    plan = manifest.plan()
    what = "the output of an earlier wemask run" if ours and not plan.kept else f"files ({_listing(entries)})"
    resume = " --resume to continue it," if resumable and ours else ""
    raise WeMaskError(f"{flag} {folder} is not empty (it holds {what}): pass{resume} --overwrite to replace it, or choose another folder")


def _plan_overwrite(manifest: Manifest, folder: Path) -> Plan:
    """--overwrite, checked before anything is deleted: refused while the folder holds anything wemask cannot show
    it wrote (a file of the user's, a file changed since), except other wemask commands' folders (kept)."""
    plan = manifest.plan()
    if plan.kept and not manifest.top_names():
        raise WeMaskError(
            f"--overwrite: {folder} holds files wemask did not write ({_listing(plan.kept)}): refusing to delete anything; "
            "choose another folder or move them away"
        )
    if plan.kept:
        raise WeMaskError(
            f"--overwrite: {folder} also holds files wemask did not write ({_listing(plan.kept)}): they would be left "
            "among the new run's files, so nothing was deleted; move them away or choose another folder"
        )
    return plan


def record_written(folder, *paths) -> None:
    """Add `paths` (relative to `folder`, or absolute inside it) to the manifest of a folder not claimed here."""
    manifest = Manifest.read(folder) or Manifest(Path(folder).expanduser())
    for path in paths:
        manifest.add(manifest.name_of(path))
    manifest.save()


def read_manifest(folder) -> list[str] | None:
    """The top-level names wemask recorded in `folder` (None: no manifest, or one that cannot be trusted)."""
    manifest = Manifest.read(folder)
    return None if manifest is None else manifest.top_names()

