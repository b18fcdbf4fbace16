"""A property test: any sequence of runs (new, --resume, --overwrite; -o relative, absolute, `.` or a symlink),
user edits (files and folders in the run folder, edited manifest entries, symlinks out of it) never loses a user
byte. The training step is a stub writing like a trainer does (checkpoints and the final save staged, then moved in);
the claim and the manifest code are the real ones."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from wemask_cli.outputs import MANIFEST_NAME, claim_output_dir
from wemask_cli.runtime.errors import WeMaskError

FORMS = ("relative", "absolute", "dot", "symlink")
USER_PATHS = ("notes.txt", "runs/notes.txt", "checkpoint-1/mine.txt", "sub/deep/x.txt", "eval/mine.txt", "metrics.json")


@contextlib.contextmanager
def cwd(path: Path):
    """contextlib.chdir, which Python 3.10 lacks."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def stub_run(base: Path, form: str, *, overwrite: bool, resume: bool, finish: bool = True) -> None:
    """A training run of two checkpoints and (unless interrupted) a final save, through the real claim."""
    folder = base / "runs" / "x"
    arg, where = {"relative": ("runs/x", base), "absolute": (str(folder), base), "dot": (".", folder),
                "symlink": ("link", base)}[form]  # fmt: skip
    if form == "dot":
        folder.mkdir(parents=True, exist_ok=True)
    with cwd(where), claim_output_dir(arg, overwrite=overwrite, resume=resume, kind="sft", resumable=True) as claim:
        out = Path(arg)
        if resume and (out / "metrics.json").exists():
            raise WeMaskError("--resume: a finished run")  # as train.checkpoints.resume_checkpoint refuses
        claim.clear()
        done = [int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
        for step in (max(done, default=0) + 1, max(done, default=0) + 2):
            name = f"checkpoint-{step}"
            staged = claim.staging(name)  # a library saving where wemask tells it, then moved in
            (staged / "state.json").write_text(json.dumps({"step": step}))
            with contextlib.suppress(WeMaskError):  # the user replaced the checkpoint folder with a link: refused
                claim.move_in(staged, name)
            (out / "README.md").write_text(f"model card at {step}")  # a library writing next to the checkpoint, by name
            claim.record("README.md")
        if not finish:
            return
        staged = claim.staging("final")
        (staged / "model.bin").write_bytes(os.urandom(8))
        (staged / "metrics.json").write_text("{}")
        for child in sorted(staged.iterdir()):
            claim.move_in(child, child.name)


def user_write(folder: Path, rel: str, data: bytes, user: dict) -> None:
    path = folder / rel
    if path.is_symlink() or any(p.is_symlink() or p.is_file() for p in list(path.parents)[: len(Path(rel).parts) - 1]):
        return  # not through a link, not under a file (over one of wemask's files is an edit: kept)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    user[str(path)] = data


def edit_manifest(folder: Path, how: int) -> None:
    path = folder / MANIFEST_NAME
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    files = data["files"] = data.get("files") if isinstance(data.get("files"), dict) else {}
    edits = [
        lambda: data.__setitem__("written", "notes.txt"),
        lambda: data.__setitem__("written", [*(data.get("written") or []), "notes.txt"]),
        lambda: files.__setitem__("notes.txt", {"size": 3, "mtime_ns": 1}),
        lambda: files.__setitem__("../outside/precious.txt", {"size": 8, "mtime_ns": 1}),
        lambda: data.__setitem__("dirs", ["sub", "..", ".", "mine1"]),
        lambda: data.__setitem__("files", ["notes.txt"]),
    ]
    edits[how % len(edits)]()
    path.write_text(json.dumps(data))


run_op = st.tuples(st.just("run"), st.sampled_from(FORMS), st.booleans(), st.booleans(), st.booleans())
file_op = st.tuples(st.just("file"), st.sampled_from(USER_PATHS), st.binary(min_size=1, max_size=8))
other_op = st.tuples(st.sampled_from(["manifest", "symlink", "replace-checkpoint", "user-dir"]), st.integers(0, 11))
ops = st.lists(st.one_of(run_op, run_op, file_op, other_op), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
@example([("run", "relative", False, False), ("file", "metrics.json", b"edited"), ("run", "absolute", True, False)])
@example([("run", "symlink", False, False), ("file", "checkpoint-1/mine.txt", b"m"), ("run", "dot", True, False)])
@example([("run", "relative", False, False, False), ("file", "notes.txt", b"n"), ("run", "symlink", False, True),
          ("run", "absolute", True, False)])
@example([("run", "dot", False, False), ("symlink", 1), ("manifest", 3), ("replace-checkpoint", 0), ("run", "relative", True, False)])
def test_no_sequence_of_runs_and_edits_loses_a_user_byte(sequence):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "work"
        folder, outside = base / "runs" / "x", Path(tmp) / "outside"
        base.mkdir()
        outside.mkdir()
        (outside / "precious.txt").write_bytes(b"precious")
        user = {str(outside / "precious.txt"): b"precious"}
        (base / "link").symlink_to(folder, target_is_directory=True)
        for op in sequence:
            apply(op, base, folder, outside, user)
            for path, data in user.items():
                assert Path(path).read_bytes() == data, (path, sequence)


def apply(op, base: Path, folder: Path, outside: Path, user: dict) -> None:
    kind = op[0]
    if kind == "run":
        with contextlib.suppress(WeMaskError):
            stub_run(base, op[1], overwrite=op[2], resume=op[3], finish=op[4] if len(op) > 4 else True)
    elif not folder.is_dir():
        return
    elif kind == "file":
        user_write(folder, op[1], op[2], user)
    elif kind == "manifest":
        edit_manifest(folder, op[1])
    elif kind == "symlink" and not os.path.lexists(folder / f"link{op[1]}"):
        (folder / f"link{op[1]}").symlink_to(outside if op[1] % 2 else outside / "precious.txt")
    elif kind == "replace-checkpoint" and (folder / "checkpoint-1").is_dir() and not (folder / "checkpoint-1").is_symlink():
        if not any(p.startswith(str(folder / "checkpoint-1") + os.sep) for p in user):
            shutil.rmtree(folder / "checkpoint-1")
            (folder / "checkpoint-1").symlink_to(outside, target_is_directory=True)
    elif kind == "user-dir":
        (folder / f"mine{op[1]}").mkdir(exist_ok=True)
