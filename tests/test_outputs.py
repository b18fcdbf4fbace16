"""Output folders and files: nothing of the user's is deleted, one run per folder, strict JSON, atomic writes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from wemask_cli.outputs import (
    LOCK_NAME,
    MANIFEST_NAME,
    atomic_write_json,
    atomic_write_text,
    check_output_file,
    check_writable,
    claim_output_dir,
    dumps_strict,
    read_manifest,
    record_written,
)
from wemask_cli.runtime.errors import WeMaskError


def user_files(folder):
    """A folder that looks like a run to a careless eye: a stray metrics.json, an empty checkpoint-500/, notes."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text("{}")
    (folder / "checkpoint-500").mkdir()
    (folder / "important.txt").write_text("my notes")
    return {"metrics.json", "checkpoint-500", "important.txt"}


def test_overwrite_never_deletes_a_folder_of_user_files(tmp_path):
    folder = tmp_path / "s"
    names = user_files(folder)
    with pytest.raises(WeMaskError, match="wemask did not write .*checkpoint-500/, important.txt, metrics.json"):
        claim_output_dir(folder, overwrite=True, kind="sft")
    assert names <= set(os.listdir(folder)) and (folder / "important.txt").read_text() == "my notes"
    assert not (folder / LOCK_NAME).exists()
    with pytest.raises(WeMaskError, match="is not empty .*important.txt"):
        claim_output_dir(folder, overwrite=False, kind="sft")


def test_dot_output_is_refused_then_accepted_when_only_wemask_files(tmp_path, monkeypatch):
    user_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WeMaskError, match="wemask did not write"):
        claim_output_dir(".", overwrite=True, kind="sft", flag="-o")
    assert (tmp_path / "important.txt").exists()
    empty = tmp_path / "mine"
    empty.mkdir()
    monkeypatch.chdir(empty)
    with claim_output_dir(".", overwrite=False, kind="eval", flag="-o") as claim:
        atomic_write_json("results.json", {"a": 1})
        (empty / "plots").mkdir()
        claim.record("results.json", "plots")
        (empty / "mine.txt").write_text("written meanwhile by the user: never recorded")
    assert sorted(read_manifest(empty)) == ["plots", "results.json"]
    os.unlink("mine.txt")
    with claim_output_dir(".", overwrite=True, kind="eval", flag="-o") as again:  # only wemask's files: replaced
        assert (empty / "results.json").exists()  # nothing deleted before the command has checked its inputs
        again.clear()
        assert set(os.listdir(".")) == {LOCK_NAME, MANIFEST_NAME}
    assert empty.is_dir() and claim.lock_path is None


def test_overwrite_deletes_only_the_manifest_and_refuses_with_user_notes(tmp_path):
    folder = tmp_path / "run"
    with claim_output_dir(folder, overwrite=False, kind="sft") as claim:
        (folder / "checkpoint-5").mkdir()
        (folder / "checkpoint-5" / "model.safetensors").write_text("w")
        claim.record("checkpoint-5")
        atomic_write_json(folder / "metrics.json", {"loss": 1.0})
        claim.record(folder / "metrics.json")
    assert sorted(read_manifest(folder)) == ["checkpoint-5", "metrics.json"]
    (folder / "notes.md").write_text("keep me")
    with pytest.raises(WeMaskError, match=r"also holds files wemask did not write \(notes.md\).*nothing was deleted"):
        claim_output_dir(folder, overwrite=True, kind="sft")
    assert (folder / "checkpoint-5" / "model.safetensors").exists() and (folder / "notes.md").read_text() == "keep me"
    (folder / "notes.md").unlink()
    with claim_output_dir(folder, overwrite=True, kind="sft") as claim:
        claim.clear()
        assert set(os.listdir(folder)) == {LOCK_NAME, MANIFEST_NAME}
    with pytest.raises(WeMaskError, match="earlier wemask run"):
        atomic_write_text(folder / "x.txt", "x")
        record_written(folder, folder / "x.txt")
        claim_output_dir(folder, overwrite=False, kind="sft")


def test_a_second_claim_is_refused_naming_the_first(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["wemask", "sft", "-o", "run"])
    with claim_output_dir(tmp_path / "run", overwrite=False, kind="sft"):
        for overwrite, resume in ((False, False), (True, False), (False, True)):
            with pytest.raises(WeMaskError, match=rf"in use by `wemask sft -o run` \(pid {os.getpid()} "):
                claim_output_dir(tmp_path / "run", overwrite=overwrite, resume=resume, kind="sft")
    with claim_output_dir(tmp_path / "run", overwrite=True, kind="sft"):  # released: free again
        pass


def test_a_concurrent_process_is_refused(tmp_path):
    script = (
        "import sys, time; from wemask_cli.outputs import claim_output_dir\n"
        "with claim_output_dir(sys.argv[1], overwrite=False, kind='eval'):\n"
        "    print('claimed', flush=True); time.sleep(30)\n"
    )
    first = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "o")], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "claimed"
        with pytest.raises(WeMaskError, match=rf"in use by .*pid {first.pid} "):
            claim_output_dir(tmp_path / "o", overwrite=True, kind="eval")
    finally:
        first.kill()
        first.wait()
    # killed: its lock is stale, explained and taken over
    with claim_output_dir(tmp_path / "o", overwrite=False, resume=True, kind="eval"):
        pass


def test_stale_lock_is_explained_and_taken_over(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    lock = {"pid": dead.pid, "host": socket.gethostname(), "command": "wemask sft -o run", "started": "then"}
    (folder / LOCK_NAME).write_text(json.dumps(lock))
    with claim_output_dir(folder, overwrite=False, kind="sft"):
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()
    err = capsys.readouterr().err
    assert f"locked by `wemask sft -o run` (pid {dead.pid}" in err and "no longer running" in err
    lock["host"] = "elsewhere"  # another machine: cannot tell, so refused with the way out
    (folder / LOCK_NAME).write_text(json.dumps(lock))
    with pytest.raises(WeMaskError, match=f"if that run is gone, delete .*{LOCK_NAME}"):
        claim_output_dir(folder, overwrite=False, kind="sft")
    (folder / LOCK_NAME).write_text("")  # torn lock: fresh -> refused, old -> removed
    with pytest.raises(WeMaskError, match="being claimed"):
        claim_output_dir(folder, overwrite=False, kind="sft")
    os.utime(folder / LOCK_NAME, (0, 0))
    with claim_output_dir(folder, overwrite=False, kind="sft"):
        pass


def test_writability_checks(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(WeMaskError, match=r"^-o .*file/run: .*file is a file"):
        check_writable(tmp_path / "file" / "run", is_dir=True, flag="-o")
    with pytest.raises(WeMaskError, match="is a file, not a folder"):
        claim_output_dir(tmp_path / "file", overwrite=True, kind="sft")
    with pytest.raises(WeMaskError, match="is a folder: give a file name"):
        check_output_file(tmp_path, overwrite=True, flag="--json")
    with pytest.raises(WeMaskError, match="exists: pass --overwrite"):
        check_output_file(tmp_path / "file", overwrite=False, flag="--json")
    check_output_file(tmp_path / "file", overwrite=True, flag="--json")
    check_output_file(tmp_path / "new" / "deep" / "out.json", overwrite=False, flag="--json")
    if os.geteuid() != 0:
        locked = tmp_path / "ro"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            with pytest.raises(WeMaskError, match="ro is not writable"):
                claim_output_dir(locked / "run", overwrite=False, kind="sft")
        finally:
            locked.chmod(0o700)


def test_strict_json_and_atomic_writes(tmp_path, monkeypatch):
    text = dumps_strict({"train_loss": float("nan"), "history": [[1, 2.0], [2, float("inf")]], "ok": 1})
    data = json.loads(text)
    assert data == {"train_loss": None, "history": [[1, 2.0], [2, None]], "ok": 1, "non_finite": ["history[1][1]", "train_loss"]}
    assert "NaN" not in text and "Infinity" not in text
    path = atomic_write_json(tmp_path / "m.json", {"x": 1})
    assert json.loads(path.read_text()) == {"x": 1}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(WeMaskError, match="could not write .*m.json: no space left on the device: free some space"):
        atomic_write_json(tmp_path / "m.json", {"x": 2})
    assert json.loads(path.read_text()) == {"x": 1}  # the old file intact, no temporary left behind
    assert os.listdir(tmp_path) == ["m.json"]
